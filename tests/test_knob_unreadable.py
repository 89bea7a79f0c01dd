"""`forensics knob` never skips an unreadable file or directory silently (issue 15 item 10).

Trees here are SYNTHETIC. Broken symbolic links are real unreadable entries on any machine (root
included); an unreadable directory is simulated by a PermissionError from os.scandir, and also made
for real with chmod when the tests do not run as root (root reads everything).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.runtime.console import unfit
from forensics.core.errors import EXIT_BAD_INPUT, EXIT_OK
from forensics.knobs import scan
from forensics.knobs.scope import assess
from forensics.core.site import parse_site
from tests._helpers import assert_bad_input

KNOB = "MY_DET_KNOB"


@pytest.fixture()
def tree(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    pkg = tmp_path / "site" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text(f'import os\nDET = os.environ.get("{KNOB}", "0")\n')
    return tmp_path / "site"


def test_readable_tree_is_complete_and_exits_0(tree, capsys):
    assert main(["knob", KNOB, "--path", str(tree), "--json", "-"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["complete"] is True and data["unreadable"] == [] and data["counts"]["unreadable"] == 0


def test_broken_links_are_reported_and_exit_3(tree, capsys):
    (tree / "pkg" / "gone.py").symlink_to(tree / "pkg" / "missing.py")
    (tree / "pkg" / "libgone.so").symlink_to("/nonexistent/libgone.so")
    (tree / "pkg" / "notes.txt").symlink_to("/nonexistent/notes.txt")  # not a file the scan reads: ignored
    code = main(["knob", KNOB, "--path", str(tree)])
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT
    assert "Python reads: 1" in captured.out  # the report is still printed, first
    # a line longer than 100 columns is broken between words (docs/errors.md): read it whole
    unreadable = [line for line in unfit(captured.out).splitlines() if line.startswith("unreadable (not scanned): ")]
    assert len(unreadable) == 2 and all("broken symbolic link" in line for line in unreadable)
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "could not be read" in err[0] and "and 1 more" in err[0]


def test_unreadable_directory_is_recorded(tree, monkeypatch):
    (tree / "locked").mkdir()
    (tree / "locked" / "b.py").write_text(f'import os\nos.getenv("{KNOB}")\n')
    real = os.scandir

    def scandir(path):
        if os.path.basename(str(path)) == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = scan(KNOB, [str(tree)])
    assert not result.complete
    assert [(Path(p).name, why) for p, why in result.unreadable] == [("locked", "Permission denied")]
    assert [Path(r.file).name for r in result.python] == ["a.py"]  # what could be read is still reported


def test_unreadable_library_on_the_path_is_not_scanned_and_says_how_to_close(tree, tmp_path):
    lib = tree / "torch" / "lib"
    lib.mkdir(parents=True)
    (lib / "libtorch_cuda.so").symlink_to("/nonexistent/libtorch_cuda.so")
    v = assess(scan(KNOB, [str(tree)]), parse_site("aten.mm.default"), None, device="cuda")
    [u] = [u for u in v.unscanned if u.component.startswith("ATen CUDA")]
    assert u.why.startswith("present but unreadable: ") and "libtorch_cuda.so" in u.why
    assert "readable" in u.how


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode: chmod cannot make one unreadable")
def test_chmod_000_file_and_directory_for_real(tree):
    f = tree / "pkg" / "secret.py"
    f.write_text(f'import os\nos.getenv("{KNOB}")\n')
    d = tree / "closed"
    d.mkdir()
    f.chmod(0)
    d.chmod(0)
    try:
        result = scan(KNOB, [str(tree)])
    finally:
        f.chmod(0o644)
        d.chmod(0o755)
    assert {Path(p).name for p, _ in result.unreadable} == {"secret.py", "closed"}


def test_command_exit_code_in_a_real_process(tree):
    (tree / "pkg" / "gone.py").symlink_to(tree / "pkg" / "missing.py")
    env = dict(os.environ)
    r = subprocess.run([sys.executable, "-m", "forensics.cli", "knob", KNOB, "--path", str(tree)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert_bad_input(r.returncode, r.stderr, file=tree / "pkg" / "gone.py", prefix="forensics knob: ", out=r.stdout)
