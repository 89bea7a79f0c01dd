"""Faults: internal errors (exit 70, one line, details in a file), whole-or-nothing outputs,
claim-safe output directories, never overwriting, directories that are not captures.

Captures here are SYNTHETIC (tests/synthetic_captures.py): real formats, made-up values.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

from forensics.runtime import atomic
from forensics.cli import main
from forensics.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_UNAVAILABLE
from tests._helpers import assert_bad_input
from tests.synthetic_captures import Arm, Gemm, build_capture

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def crash_dir(tmp_path, monkeypatch):
    d = tmp_path / "crashes"
    monkeypatch.setenv("FORENSICS_CRASH_DIR", str(d))
    return d


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, diverge_in=("a2",))]  # SYNTHETIC
    return build_capture(root / "cap", gemms, [Arm("a1"), Arm("a2")])


def _listing(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"<dir>")
            for p in sorted(root.rglob("*"))}


# --------------------------------------------------------------------------- internal errors
def test_internal_error_is_one_line_exit_70_and_a_details_file(capture, tmp_path, monkeypatch, capsys, crash_dir):
    import forensics.judge.analysis as analysis

    def broken(*a, **k):
        return {}["no such key"]  # a bug inside the library

    monkeypatch.setattr(analysis, "count_launches", broken)
    before = _listing(capture)
    code = main(["analyze", str(capture), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_INTERNAL
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith("forensics analyze: internal error (a bug, not a finding) while analysing the capture ")
    assert "KeyError: 'no such key'" in line and "test_faults.py" not in line.split(" at ")[0]
    details = Path(line.split("traceback written to ")[1])
    assert details.parent == crash_dir and details.is_file()
    text = details.read_text()
    assert "Traceback (most recent call last)" in text and "KeyError: 'no such key'" in text
    assert "command line (redacted): forensics analyze" in text
    assert _listing(capture) == before and not (tmp_path / "out").exists()  # nothing written


def test_internal_error_details_are_never_lost(capture, monkeypatch, capsys):
    import forensics.judge.analysis as analysis

    monkeypatch.setenv("FORENSICS_CRASH_DIR", "/proc/forensics-cannot-write-here")
    monkeypatch.setenv("XDG_STATE_HOME", "/proc/nor-here")
    monkeypatch.setattr("tempfile.gettempdir", lambda: "/proc/nor-there")
    monkeypatch.setattr(analysis, "count_launches", lambda *a, **k: 1 / 0)
    code = main(["analyze", str(capture), "-q"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL
    assert err.splitlines()[0].endswith("could not write a details file; traceback follows")
    assert "ZeroDivisionError" in err and "Traceback (most recent call last)" in err


def test_console_script_exits_70_not_1(capture, tmp_path, crash_dir):
    """A real process: a bug must not exit 1 ('nothing NAMED') or 0."""
    code = ("import sys, forensics.judge.analysis as a\n"
            "a.judge = lambda *x, **k: [][1]\n"
            "from forensics.cli import main\n"
            "main()\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORENSICS_CRASH_DIR": str(crash_dir)}
    r = subprocess.run([sys.executable, "-c", code, "analyze", str(capture), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == EXIT_INTERNAL, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "IndexError" in lines[0] and "Traceback" not in r.stderr
    assert len(list(crash_dir.iterdir())) == 1


def test_interrupt_is_130_and_one_line(capture, monkeypatch, capsys):
    import forensics.judge.analysis as analysis

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis, "count_launches", interrupted)
    assert main(["analyze", str(capture), "-q"]) == EXIT_INTERRUPTED
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- whole or nothing
def test_write_atomic_leaves_nothing_on_failure_and_a_rerun_works(tmp_path, monkeypatch):
    target = tmp_path / "out.json"

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "fsync", full)
    with pytest.raises(atomic.CannotWrite, match="No space left on device"):
        atomic.write_atomic(target, "x" * 10_000)
    assert list(tmp_path.iterdir()) == []  # no partial file, no temporary file
    monkeypatch.undo()
    atomic.write_atomic(target, "ok")
    assert target.read_text() == "ok"
    with pytest.raises(atomic.OutputExists):
        atomic.write_atomic(target, "again")
    assert target.read_text() == "ok"


def test_an_exception_inside_atomic_output_publishes_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic.atomic_output(tmp_path / "a.bin") as fh:
            fh.write(b"half")
            raise RuntimeError("killed mid-write")
    assert list(tmp_path.iterdir()) == []


def test_dangling_symlink_at_json_is_refused(capture, tmp_path, capsys):
    link = tmp_path / "report.json"
    link.symlink_to(tmp_path / "elsewhere" / "target.json")
    code = main(["compare", str(capture), "--json", str(link)])
    assert_bad_input(code, capsys.readouterr().err, file=link, needle="dangling symbolic link",
                     prefix="forensics: ")
    assert not (tmp_path / "elsewhere").exists() and link.is_symlink()


def _limit_file_size():  # runs in the child: files may not grow past 1 KiB (EFBIG instead of SIGXFSZ)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))


@pytest.mark.parametrize("command", ["bundle", "compare", "analyze"])
def test_a_full_disk_leaves_no_partial_output(capture, tmp_path, crash_dir, command):
    """A real write failure (RLIMIT_FSIZE: the kernel refuses to grow a file, as on a full disk)."""
    out = tmp_path / {"bundle": "b.tar.gz", "compare": "c.json", "analyze": "an"}[command]
    flag = {"bundle": "-o", "compare": "--json", "analyze": "--out"}[command]
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORENSICS_CRASH_DIR": str(crash_dir)}
    argv = [sys.executable, "-m", "forensics", command, str(capture), flag, str(out)]
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, preexec_fn=_limit_file_size)
    lines = [x for x in r.stderr.strip().splitlines() if x]
    assert r.returncode == EXIT_UNAVAILABLE, r.stderr
    assert len(lines) == 1 and "cannot write" in lines[0] and "Traceback" not in r.stderr
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and "crashes" not in p.parts]
    assert leftovers == []  # nothing partial, no temporary file
    r2 = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)  # the rerun is not blocked
    assert r2.returncode in (0, 1), r2.stderr


# --------------------------------------------------------------------------- never overwrite, claims
def test_analyze_out_refuses_an_earlier_analysis_unless_force(capture, tmp_path, capsys):
    out = tmp_path / "an"
    assert main(["analyze", str(capture), "-q", "--out", str(out)]) in (0, 1)
    (out / "report.md").write_text("my notes\n")  # the user edited it
    capsys.readouterr()
    assert main(["analyze", str(capture), "-q", "--out", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"forensics: {out} exists (a directory); not overwriting the analysis folder "
                   "(--force replaces it, or choose another --out)"]
    assert (out / "report.md").read_text() == "my notes\n" and not (tmp_path / "an-2").exists()  # no silent -2
    assert main(["analyze", str(capture), "-q", "--out", str(out), "--force"]) in (0, 1)
    assert (out / "report.md").read_text() != "my notes\n" and "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["an"]  # the earlier output set aside is gone
    other = tmp_path / "mine"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    assert main(["analyze", str(capture), "-q", "--out", str(other), "--force"]) == EXIT_BAD_INPUT
    assert "holds no earlier forensics output" in capsys.readouterr().err
    assert (other / "thesis.tex").read_text() == "x"


def test_analyze_default_location_is_never_overwritten(capture, tmp_path, capsys):
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(capture, cap)
    assert main(["analyze", str(cap), "-q"]) in (0, 1)
    first = (cap / "analysis" / "report.md").read_bytes()
    assert main(["analyze", str(cap), "-q"]) in (0, 1)
    text = unfit(capsys.readouterr().out)  # lines broken at 100 columns, read whole (docs/errors.md)
    assert (cap / "analysis" / "report.md").read_bytes() == first
    assert f"note: {cap / 'analysis'} already holds earlier output; wrote {cap / 'analysis-2'} instead" in text


def _claim(args):
    path, barrier = args
    barrier.wait()
    return atomic.claim_dir(path)


def test_concurrent_claims_of_one_directory_have_one_winner(tmp_path):
    ctx = multiprocessing.get_context("fork")
    for trial in range(5):
        target = tmp_path / f"out{trial}"
        if trial % 2:
            target.mkdir()  # an existing empty directory is claimable once too
        with ctx.Manager() as m:
            barrier = m.Barrier(6)
            with ctx.Pool(6) as pool:
                wins = pool.map(_claim, [(target, barrier)] * 6)
        assert sum(wins) == 1, wins


def test_fresh_dir_under_concurrency_gives_distinct_directories(tmp_path):
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(6) as pool:
        dirs = pool.map(atomic.fresh_dir, [tmp_path / "cap"] * 12)
    assert len(set(dirs)) == 12


# --------------------------------------------------------------------------- not a capture
@pytest.mark.parametrize("kind", ["empty", "trace", "megatron", "analysis"])
def test_analyze_refuses_a_directory_that_is_not_a_capture(tmp_path, capsys, kind):
    d = tmp_path / "d"
    d.mkdir()
    if kind == "trace":
        (d / "rank0").mkdir()
        (d / "rank0" / "trace.jsonl").write_text(json.dumps({"event": "header"}) + "\n")
        (d / "optrace-config.json").write_text("{}")
    elif kind == "megatron":
        (d / "rank_0.jsonl").write_text("{}\n")
    elif kind == "analysis":
        (d / "analysis.json").write_text("{}")
        (d / "report.md").write_text("# x\n")
    before = _listing(d)
    for command in (["analyze", str(d)], ["compare", str(d)], ["bundle", str(d), "-o", str(tmp_path / "b.tgz")]):
        code = main(command)
        line = assert_bad_input(code, capsys.readouterr().err, file=d, needle="not a capture")
        if kind == "trace":
            assert "forensics diff" in line
    assert _listing(d) == before  # nothing written into it
    assert not (tmp_path / "b.tgz").exists()


# --------------------------------------------------------------------------- real processes: nothing before the one line
@pytest.mark.parametrize("damage", ["site numel", "cupti id", "manifest arms", "cupti cut"])
def test_bad_input_in_a_real_process_is_exactly_one_line(capture, tmp_path, damage):
    """No warning (pandas FutureWarning, ...) precedes the one line: stderr holds that line only."""
    import shutil

    cap = tmp_path / "cap"
    shutil.copytree(capture, cap)
    if damage == "site numel":
        f = cap / "a2" / "rank0" / "sites.jsonl"
        f.write_text(f.read_text().replace('"numel": ', '"numel": 1.5, "n0": ', 1))
    elif damage == "cupti id":
        f = cap / "a1" / "rank0" / "cupti.jsonl"
        f.write_text(f.read_text().replace('"correlation_id": 901', '"correlation_id": "901"', 1))
    elif damage == "manifest arms":
        f = cap / "manifest.yaml"
        f.write_text(f.read_text().replace("- name: a2", "- name: [a2]", 1))
    else:
        f = cap / "a1" / "rank0" / "cupti.jsonl"
        f.write_bytes(f.read_bytes()[:-30])
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONWARNINGS": "default"}
    for command in (["analyze", str(cap), "-q", "--out", str(tmp_path / "an")], ["compare", str(cap)]):
        r = subprocess.run([sys.executable, "-m", "forensics", *command], capture_output=True, text=True, env=env,
                           timeout=300)
        assert_bad_input(r.returncode, r.stderr, out=r.stdout)


def test_two_external_files_with_one_name_stay_two_bundle_members(tmp_path):
    """Item 11: files listed by the manifest from outside the capture, same name, different folders."""
    import tarfile

    import yaml

    from forensics.capture.directory import classify
    from forensics.evidence.bundle import write_bundle

    gemms = [Gemm("gemm:NT:acc0:grad1", 256, 256, 512, diverge_in=("a2",))]  # SYNTHETIC
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")])
    files = []
    for f in sorted(cap.rglob("*")):
        if not f.is_file() or classify(f.name) is None:
            continue
        arm = f.relative_to(cap).parts[0]
        entry = {"path": str(f.relative_to(cap)), "arm": arm, "rank": 0}
        if f.name.startswith("cublaslt."):
            ext = tmp_path / f"external-{arm}" / "cublaslt.log"  # one name for both arms' logs
            ext.parent.mkdir()
            f.rename(ext)
            entry.update(path=os.path.relpath(ext, cap), instrument="cublaslt", pid=int(f.name.split(".")[1]))
        files.append(entry)
    manifest = yaml.safe_load((cap / "manifest.yaml").read_text())
    manifest["files"] = files
    (cap / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    out = write_bundle(cap, tmp_path / "b.tar.gz", site="gemm:NT:acc0:grad1")
    with tarfile.open(out) as tar:
        logs = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()
                if m.name.endswith("cublaslt.log")}
    assert sorted(logs) == ["raw/external-2/cublaslt.log", "raw/external/cublaslt.log"]
    a1, a2 = (tmp_path / "external-a1" / "cublaslt.log").read_bytes(), (tmp_path / "external-a2" / "cublaslt.log").read_bytes()
    sources = []
    for text in logs.values():  # each member holds lines of exactly one of the two files, never both
        lines = set(text.splitlines())
        assert lines
        sources.append([lines <= set(a1.splitlines()), lines <= set(a2.splitlines())])
    assert sorted(sources) == [[False, True], [True, False]]


def test_trace_into_a_directory_another_run_claimed_is_refused(tmp_path):
    """Item 11: two `forensics trace --out X` at once: the second finds X claimed and runs nothing."""
    from forensics.commands.trace import UsageError, trace_command

    out = tmp_path / "run"
    assert atomic.claim_dir(out)  # the first run, still empty
    marker = tmp_path / "ran"
    with pytest.raises(UsageError, match="another run claimed it"):
        trace_command([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], out)
    assert not marker.exists()
