"""The traced process imports the code the untraced one imports (issue 27): its ``sys.path`` is the
untraced one's plus the bootstrap entry, on real processes.

The install is a copy of ``forensics``, ``probes`` and ``parsers`` in a folder of its own, as a
non-editable install puts them in site-packages, with an installed ``mylib`` beside them; a
checkout of ``mylib`` comes first on ``PYTHONPATH``. Untraced, the program imports the checkout.
The bootstrap used to put its package's folder (the "site-packages") first on ``PYTHONPATH``:
traced, the same program imported the installed ``mylib``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

PROGRAM = """\
import json, sys
import torch
import mylib
torch.ones(2) + 1
print("SYS_PATH=" + json.dumps({"path": sys.path, "mylib": mylib.WHO}))
"""


def _read(out: str) -> dict:
    lines = [x for x in out.splitlines() if x.startswith("SYS_PATH=")]
    assert len(lines) == 1, out
    return json.loads(lines[0][len("SYS_PATH="):])


def test_traced_sys_path_is_the_untraced_one_plus_the_bootstrap(tmp_path):
    site = tmp_path / "site-packages"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for pkg in ("forensics", "probes", "parsers"):
        shutil.copytree(REPO / pkg, site / pkg, ignore=ignore)
    (site / "mylib.py").write_text("WHO = 'installed'\n")
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "mylib.py").write_text("WHO = 'checkout'\n")
    script = tmp_path / "work" / "prog.py"
    script.parent.mkdir()
    script.write_text(PROGRAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORENSICS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), str(site)])

    plain = subprocess.run([sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True,
                           text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    untraced = _read(plain.stdout)
    assert untraced["mylib"] == "checkout"

    traced_run = subprocess.run([sys.executable, "-m", "forensics", "trace", "--out", str(tmp_path / "runA"), "--",
                                 sys.executable, str(script)], cwd=script.parent, env=env, capture_output=True,
                                text=True, timeout=300)
    assert traced_run.returncode == 0, traced_run.stderr
    traced = _read(traced_run.stdout)
    bootstrap = str(site / "probes" / "bootstrap")
    assert bootstrap in traced["path"], traced["path"]  # the copy's bootstrap ran, not the repository's
    assert [p for p in traced["path"] if p != bootstrap] == untraced["path"]
    assert traced["mylib"] == "checkout"
    assert list((tmp_path / "runA").rglob("trace.jsonl")), "the probes were not activated"
