"""A capture records the knobs and the in-process switches of each arm (issue 27 item 2), on a real
CPU capture: `forensics kernel` on a small conv1d script with a toggle arm
``ATEN_CPU_CAPABILITY=default``, run under ``ONEDNN_MAX_CPU_ISA=AVX2``. The manifest's ``knobs``
dropped ``ONEDNN_*`` and ``ATEN_*``; now they are there, and each arm's probe headers
(``sites.jsonl``, ``cpuprobe.jsonl``) carry ``env`` and ``switches`` as the arm's process had them,
the ISA ATen dispatched to (``torch.backends.cpu.get_cpu_capability``) included."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

SCRIPT = """\
import torch
torch.manual_seed(0)
m = torch.nn.Conv1d(8, 16, 3)
m(torch.randn(4, 8, 32)).sum().backward()
"""


def test_capture_records_knobs_and_switches_per_arm(tmp_path):
    (tmp_path / "s.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORENSICS_", "ONEDNN_", "DNNL_", "ATEN_"))}
    env.update(PYTHONPATH=str(REPO), ONEDNN_MAX_CPU_ISA="AVX2", OMP_NUM_THREADS="2")
    r = subprocess.run([sys.executable, "-m", "forensics", "kernel", "--site", "aten.convolution.default",
                        "--steps", "0", "--arms", "1", "--toggle", "ATEN_CPU_CAPABILITY=default", "--out", "cap",
                        "--", sys.executable, "s.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode in (0, 1), r.stdout[-2000:] + r.stderr[-2000:]
    cap = tmp_path / "cap"
    manifest = yaml.safe_load((cap / "manifest.yaml").read_text())
    assert manifest["knobs"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
    seen = {}
    for arm in ("a1", "t1-aten_cpu_capability"):
        for name in ("sites.jsonl", "cpuprobe.jsonl"):
            header = json.loads((cap / arm / "rank0" / name).read_text().splitlines()[0])
            assert header["event"] == "header" and header["env"]["ONEDNN_MAX_CPU_ISA"] == "AVX2"
            seen[arm, name] = (header["env"].get("ATEN_CPU_CAPABILITY"),
                               header["switches"]["torch.backends.cpu.get_cpu_capability"],
                               header["switches"]["torch.backends.mkldnn.enabled"])
    assert seen["t1-aten_cpu_capability", "sites.jsonl"] == ("default", "DEFAULT", True)
    assert seen["t1-aten_cpu_capability", "cpuprobe.jsonl"] == ("default", "DEFAULT", True)
    baseline = seen["a1", "sites.jsonl"]
    assert baseline[0] is None and baseline[1] != "DEFAULT" and baseline == seen["a1", "cpuprobe.jsonl"]
