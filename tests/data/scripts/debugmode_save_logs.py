"""Run a Python script under PyTorch's DebugMode with tensor hashes and save its logs as
``DebugMode.save_logs`` JSON (the installed torch's own save_logs when it has one, else forensics'
writer of the same layout: torch 2.13 has none).

    python tests/data/scripts/debugmode_save_logs.py OUT.json SCRIPT.py [ARGS...]
"""
import runpy
import sys

from torch.utils._debug_mode import DebugMode

from forensics.tracediff.traces.debugmode import save_logs

out, script, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [script, *rest]
with DebugMode() as mode, DebugMode.log_tensor_hashes(hash_fn="hash_tensor", hash_inputs=True):
    runpy.run_path(script, run_name="__main__")
save_logs(mode, out)
