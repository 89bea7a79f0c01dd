"""Run a Python script under PyTorch's DebugMode with tensor hashes and save its logs as
``DebugMode.save_logs`` JSON and, with ``--hashes``, as ``dump_tensor_hashes`` text (the installed
torch's own methods when it has them, else forensics' writers of the same layouts: torch 2.13 has
neither).

    python tests/data/scripts/debugmode_save_logs.py [--hashes OUT.txt] OUT.json SCRIPT.py [ARGS...]
"""
import runpy
import sys

from torch.utils._debug_mode import DebugMode

from forensics.tracediff.traces._debugmode_hashes import dump_tensor_hashes
from forensics.tracediff.traces.debugmode import save_logs

args = sys.argv[1:]
hashes = None
if args[:1] == ["--hashes"]:
    hashes, args = args[1], args[2:]
out, script, rest = args[0], args[1], args[2:]
sys.argv = [script, *rest]
with DebugMode() as mode, DebugMode.log_tensor_hashes(hash_fn="hash_tensor", hash_inputs=True):
    runpy.run_path(script, run_name="__main__")
save_logs(mode, out)
if hashes:
    dump_tensor_hashes(mode, hashes)
