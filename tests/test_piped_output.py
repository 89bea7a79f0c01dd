"""Every command's output piped to a file: plain lines, never split inside a word or a path.

Each command runs as a real subprocess with stdout and stderr on pipes (not a terminal), on
inputs under a directory whose name is long enough that any 80-column wrap would cut it. The
directory's full path must appear whole on a line wherever the command prints it. The inputs are
the repository's real CPU capture and SYNTHETIC Python files written here.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
LONG = "a-directory-name-long-enough-that-an-eighty-column-wrap-would-cut-it-in-two-" + "x" * 24
KNOB = "MY_PIPED_KNOB_NAME"


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TERM")}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["FORENSICS_CACHE_DIR"] = str(cwd / "cache")
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _assert_whole(r: subprocess.CompletedProcess, long_dir: Path, must_print: bool = True) -> None:
    text = r.stdout + r.stderr
    assert "Traceback" not in text
    assert "\x1b[" not in text, "colour codes in piped output"
    if must_print:
        assert str(long_dir) in text, text[-2000:]
    # nothing on any line ends with a cut-off piece of the long name
    for line in text.splitlines():
        for cut in range(12, len(LONG)):
            assert not line.rstrip().endswith(LONG[:cut]), f"line cut inside a path: {line!r}"


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("piped") / LONG
    d.mkdir()
    shutil.copytree(REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads", d / "capture",
                    ignore=shutil.ignore_patterns("analysis*"))
    pkg = d / "site" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "reader.py").write_text(f'import os\n\nVALUE = os.environ.get("{KNOB}", "0")\n')  # SYNTHETIC
    return d


def test_analyze_piped(long_dir):
    r = _run(["analyze", str(long_dir / "capture"), "--out", str(long_dir / "analysis")], long_dir)
    assert r.returncode == 0
    _assert_whole(r, long_dir)
    assert "verdict: 2 implementation(s) NAMED" in r.stdout.splitlines()


def test_compare_piped(long_dir):
    r = _run(["compare", str(long_dir / "capture")], long_dir)
    assert r.returncode == 1  # the toggle arm diverges: a finding
    _assert_whole(r, long_dir, must_print=False)
    assert any(line.startswith("t1-omp_num_threads (toggle OMP_NUM_THREADS=2) vs a1:") for line in r.stdout.splitlines())


def test_bundle_piped(long_dir):
    out = long_dir / "bundle.tar.gz"
    r = _run(["bundle", str(long_dir / "capture"), "-o", str(out)], long_dir)
    assert r.returncode == 0 and out.exists()
    _assert_whole(r, long_dir)


def test_knob_piped(long_dir):
    r = _run(["knob", KNOB, "--path", str(long_dir / "site"), "--no-cache"], long_dir)
    assert r.returncode == 0
    _assert_whole(r, long_dir)
    assert any("reader.py:3" in line for line in r.stdout.splitlines())


def test_kernel_dry_run_piped(long_dir):
    r = _run(["kernel", "--device", "cpu", "--site", "aten.mm.default", "--dry-run", "--out",
              str(long_dir / "cap"), "--", sys.executable, str(REPO / "examples" / "cpu-backend" / "train.py")], long_dir)
    assert r.returncode == 0, r.stderr
    _assert_whole(r, long_dir)


@pytest.mark.slow
def test_trace_and_diff_piped(long_dir):
    script = REPO / "examples" / "cpu-divergence" / "train.py"
    for name, threads in (("runA", "1"), ("runB", "2")):
        r = _run(["trace", "--out", str(long_dir / name), "--", sys.executable, str(script), "--threads", threads,
                  "--steps", "1"], long_dir)
        assert r.returncode == 0, r.stderr
        _assert_whole(r, long_dir)
    r = _run(["diff", str(long_dir / "runA"), str(long_dir / "runB")], long_dir)
    assert r.returncode == 1
    _assert_whole(r, long_dir, must_print=False)
    assert any(line.startswith("site: ") for line in r.stdout.splitlines())


@pytest.mark.parametrize("command", ["analyze", "kernel", "trace", "diff", "knob", "bundle", "compare"])
def test_help_usage_is_conventional(command, tmp_path):
    r = _run([command, "--help"], tmp_path)
    assert r.returncode == 0
    usage = r.stdout.splitlines()[0]
    assert usage.startswith(f"Usage: forensics {command} [OPTIONS]")
    assert "{" not in usage and "<bool>" not in r.stdout and "[]" not in usage
    if command in ("trace", "kernel", "knob"):
        assert "-- CMD ..." in usage
    examples = r.stdout.split("Examples:\n\n", 1)[1].splitlines()
    assert examples and all(line.startswith("    forensics ") for line in examples), r.stdout  # never rewrapped
    assert any(line.startswith(f"    forensics {command} ") for line in examples)


def test_version(tmp_path):
    from forensics import __version__

    r = _run(["--version"], tmp_path)
    assert r.returncode == 0 and r.stdout == f"forensics {__version__}\n" and r.stderr == ""


def test_a_reader_that_closes_the_pipe_early_is_not_a_finding(tmp_path):
    """``forensics analyze CAP | head -1``: the reader closes stdout after one line. Exit 141 (the
    shell's code for SIGPIPE), not click's exit 1, which reads as "nothing NAMED"."""
    cap = tmp_path / "cap"
    shutil.copytree(REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads", cap)
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORENSICS_CACHE_DIR": str(tmp_path / "cache")}
    p = subprocess.Popen([sys.executable, "-m", "forensics", "analyze", str(cap)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    assert p.stdout.readline().startswith(b"capture ")
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=600) == 141, err
    assert b"Traceback" not in err
