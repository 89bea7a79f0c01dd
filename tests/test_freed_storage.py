"""A tensor whose storage was freed (FSDP resizes an unsharded parameter's storage to nothing
between uses and keeps its sizes) has no bytes to digest. The probes must record it as metadata
and go on: ``torch.hash_tensor`` on such a tensor kills the process (SIGSEGV on the CPU), and a
numpy view of it reads memory the tensor does not own (a digest of garbage, different from run
to run: a false divergence). Run in a child process, so a crash fails the test instead of the
test run."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from probes.digests import holds_elements

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import torch
    from probes import optrace, sites
    from probes.config import ProbeConfig
    from probes.window import StepWindow, parse_steps

    out = Path(sys.argv[1])
    freed = {}
    for dtype in (torch.float32, torch.bfloat16):
        t = torch.randn(256, 256).to(dtype)
        t.untyped_storage().resize_(0)
        freed[dtype] = t
    cfg = ProbeConfig(out_dir=str(out), probes=["optrace"], steps="all", max_records=1000)
    window = StepWindow(parse_steps("all"))
    inst = optrace.install(cfg, window, out / "rank0", 0)
    window.start()
    for t in freed.values():
        t.view(-1)  # metadata ops on the freed tensor are legal (a transpose is not: torch checks) and traced
        t.detach()
    alive = torch.ones(4).add(1)  # the program goes on, traced
    staged = sites.stage(freed[torch.float32])
    window.close()
    inst.close()
    print(json.dumps({"alive": alive.tolist(), "staged": {k: v for k, v in staged.items() if not k.startswith("_")},
                      "staged_keys": sorted(staged)}))
""")


def test_freed_storage_is_metadata_and_the_program_goes_on(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, f"child died (rc {proc.returncode}): {proc.stderr[-2000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["alive"] == [2.0] * 4
    assert "_h" not in result["staged_keys"] and "_o" not in result["staged_keys"]
    assert "freed" in result["staged"]["hash_error"] and "freed" in result["staged"]["ohash_error"]
    records = [json.loads(line) for line in (tmp_path / "rank0" / "trace.jsonl").read_text().splitlines()]
    ops = [r for r in records if r.get("op", "").startswith("aten.") and r["op"].split(".")[1] in ("view", "detach")]
    assert len(ops) == 4
    for r in ops:
        tensors = [e for e in r["in"] + r["out"] if e.get("t") != "args"]
        assert tensors and all(e.get("ev") == "metadata" for e in tensors), r
        assert not any(k in e for e in tensors for k in ("h", "o", "c")), r
    after = [r for r in records if r.get("op") == "aten.add.Tensor"]
    assert after and "o" in after[0]["out"][0]  # tensors with bytes are still digested


def test_holds_elements_reads_sizes_strides_and_offset():
    t = torch.randn(8, 8)
    assert holds_elements(t) and holds_elements(t.t()) and holds_elements(t[2:, 1:3])
    assert holds_elements(torch.randn(4).expand(3, 4))  # stride 0: one row of storage is enough
    view = t[4:]
    t.untyped_storage().resize_(4 * 8 * 4)  # the first half only
    assert not holds_elements(view) and not holds_elements(t)
    assert holds_elements(t[:4].clone())
