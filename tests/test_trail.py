"""The trail (issue 43): every step says what comes next, on one line a terminal paste gives whole.

``kernel`` -> ``compare`` when an arm's bits differ, ``compare`` -> ``knob`` / ``bundle``; a command
to copy is written without a line break at any terminal width (80 columns, a pty); one overwrite
rule (``compare --force`` replaces its ``--json``) and ``--json -`` on ``analyze`` and ``kernel``.
"""
from __future__ import annotations

import fcntl
import json
import os
import pty
import struct
import subprocess
import sys
import termios
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from forensics.cli import main
from forensics.runtime.console import echo_plain

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads"
TRACES = REPO / "tests" / "fixtures" / "traces-cpu-divergence"
NEXT = ("next: forensics kernel --site 'gemm:NT:acc0:grad1#1' --ranks 0 --steps 0 "
        "--arm-command 'python train.py --threads 2' -- python train.py --threads 1")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("NO_COLOR", None)
    env["COLUMNS"], env["TERM"] = "80", "xterm"
    return env


def run_in_pty(argv: list[str], cols: int = 80) -> tuple[int, str]:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal ``cols`` wide: what a user's terminal gets."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=_env(), cwd=REPO, close_fds=True)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=120)
    os.close(master)
    text = out.decode("utf-8", "replace").replace("\r\n", "\n")
    import re

    return p.returncode, re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # colour codes out


def test_a_command_to_copy_is_one_line_on_an_80_column_terminal():
    buf = StringIO()
    console = Console(file=buf, width=80, force_terminal=True, no_color=True)
    echo_plain(console, "site: gemm:NT:acc0:grad1#1 (rank 0, step 0)\n" + NEXT + "\nthen: forensics bundle cap -o b.tgz")
    lines = buf.getvalue().splitlines()
    assert NEXT in lines and "then: forensics bundle cap -o b.tgz" in lines
    assert all(len(line) <= 80 for line in lines if line != NEXT)
    # other text still wraps between words at the width
    buf = StringIO()
    echo_plain(Console(file=buf, width=40, force_terminal=True, no_color=True), "word " * 20)
    assert all(len(line) <= 40 for line in buf.getvalue().splitlines()) and len(buf.getvalue().splitlines()) > 1


def test_diffs_next_line_pastes_whole_from_an_80_column_pty():
    code, out = run_in_pty([sys.executable, "-m", "forensics", "diff", str(TRACES / "a.jsonl"),
                            str(TRACES / "origin.jsonl")])
    assert code == 1, out
    nxt = [line for line in out.splitlines() if line.startswith("next: ")]
    assert len(nxt) == 1 and nxt[0].endswith("-- python train.py --threads 1"), out
    assert len(nxt[0]) > 80  # longer than the terminal, and still not broken
    assert all(len(line) <= 80 for line in out.splitlines() if not line.startswith("next: ")), out


def test_kernel_dry_run_argv_lines_are_whole_on_an_80_column_pty():
    code, out = run_in_pty([sys.executable, "-m", "forensics", "kernel", "--site", "aten.mm.default", "--device",
                            "cpu", "--dry-run", "--", "python", "examples/cpu-divergence/train.py", "--threads", "1"])
    assert code == 0, out
    argv = [line for line in out.splitlines() if line.strip().startswith("argv: ")]
    assert argv and all(line.rstrip().endswith("--threads 1") for line in argv), out


def test_compare_points_on_to_knob_then_bundle(capsys):
    code = main(["compare", str(CAPTURE)])
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[-2:] == ["next: forensics knob OMP_NUM_THREADS --site aten.convolution.default",
                        f"then: forensics bundle {CAPTURE} -o bundle.tar.gz"]


def test_compare_force_replaces_its_json_and_incomparable_is_its_own_flag(tmp_path, capsys):
    target = tmp_path / "c.json"
    target.write_text("{}\n")
    assert main(["compare", str(CAPTURE), "--json", str(target)]) == 3  # refused without --force
    assert target.read_text() == "{}\n"
    assert main(["compare", str(CAPTURE), "--json", str(target), "--force"]) == 1
    assert json.loads(target.read_text())["schema"] == "forensics.compare"
    capsys.readouterr()
    assert main(["compare", str(CAPTURE), "--incomparable"]) == 1


def test_kernel_says_which_arm_differs_and_points_on_to_compare():
    from forensics.commands.kernel import arm_lines
    from forensics.judge.analysis import analyze

    lines = arm_lines(analyze(CAPTURE), CAPTURE)
    assert any(line.startswith("arms: t1-omp_num_threads (toggle OMP_NUM_THREADS=2) vs a1: its output bits differ "
                               "at aten.convolution.default#1") for line in lines), lines
    assert not any(line.startswith("arms: a2") for line in lines)  # the replica does not differ
    assert lines[-1] == f"next: forensics compare {os.path.relpath(CAPTURE)}"  # as typed, below the working folder


def test_analyze_json_dash_prints_the_report_alone(tmp_path, capsys):
    code = main(["analyze", str(CAPTURE), "--json", "-", "--out", str(tmp_path / "a")])
    assert code == 0
    assert json.loads(capsys.readouterr().out)["schema"] == "forensics.analysis"
    target = tmp_path / "r.json"
    assert main(["analyze", str(CAPTURE), "-q", "--json", str(target), "--out", str(tmp_path / "b")]) == 0
    assert json.loads(target.read_text())["schema"] == "forensics.analysis"
    assert main(["analyze", str(CAPTURE), "-q", "--json", str(target), "--out", str(tmp_path / "c")]) == 3


def test_kernel_has_json_dash_and_refuses_it_with_another_as(capsys):
    code = main(["kernel", "--site", "aten.mm.default", "--device", "cpu", "--json", "-", "--as", "csv", "--",
                 "python", "x.py"])
    assert code == 2


def _scaled(an, ranks: int, odd: dict[tuple[int, str], str]):
    """The real analysis's verdict rows repeated for ``ranks`` ranks (rendering only: the counts are the
    real capture's), with the verdict of (rank, scope) pairs in ``odd`` replaced."""
    import dataclasses

    import pandas as pd

    rows = []
    for r in range(ranks):
        v = an.verdicts.copy()
        v["rank"] = r
        for (rank, scope), word in odd.items():
            if rank == r:
                v.loc[(v["scope"] == scope) & (v["arm"] == "a2"), "verdict"] = word
        rows.append(v)
    return dataclasses.replace(an, verdicts=pd.concat(rows, ignore_index=True))


def test_analyze_at_96_ranks_prints_the_summary_and_every_exception_first():
    from forensics.judge.analysis import analyze
    from forensics.judge.report import print_table

    odd = {(5, "aten.convolution.default#1"): "SINGLE-SOURCE", (5, "aten.convolution.default#2"): "SINGLE-SOURCE",
           (40, "aten.convolution.default#1"): "SINGLE-SOURCE", (40, "aten.convolution.default#2"): "SINGLE-SOURCE",
           (77, "aten.convolution.default#2"): "SINGLE-SOURCE", (90, "aten.convolution.default#2"): "SINGLE-SOURCE"}
    an = _scaled(analyze(CAPTURE), 96, odd)
    buf = StringIO()
    print_table(an, Console(file=buf, width=200, no_color=True, force_terminal=False))
    lines = buf.getvalue().splitlines()
    assert lines[2] == "summary: 576 (scope, implementation) pairs over 3 arm(s) x 96 rank(s): 570 NAMED, 6 SINGLE-SOURCE"
    single = [line for line in lines if "SINGLE-SOURCE" in line and "│" in line]
    assert len(single) == 6 and all(any(f"│ {r} " in line for line in single) for r in (5, 40, 77, 90))
    assert len(lines) < 40, "\n".join(lines)  # a screenful: the NAMED rows folded, not 570 of them
    folded = [line for line in lines if line.startswith("NAMED, folded:")]
    assert len(folded) == 2 and all("rank(s) 0-95" in line for line in folded)  # one line per implementation
    assert sum(int(line.split(": ", 2)[1].split()[0]) for line in folded) == 570
    assert lines[-1].startswith("570 of 576 (scope, implementation) pairs NAMED")


def test_a_small_capture_keeps_its_whole_table():
    from forensics.judge.analysis import analyze
    from forensics.judge.report import print_table

    buf = StringIO()
    print_table(analyze(CAPTURE), Console(file=buf, width=100, no_color=True, force_terminal=False))
    text = buf.getvalue()
    assert "summary:" not in text and "NAMED, folded" not in text and text.count("│ a2 ") + text.count("a2  scope") >= 2


def test_a_folder_of_several_captures_is_refused_with_the_list(tmp_path):
    import shutil

    from tests._helpers import assert_bad_input

    for name in ("job1/cap", "job2/cap"):
        shutil.copytree(CAPTURE, tmp_path / "runs" / name, ignore=shutil.ignore_patterns("analysis*"))
    r = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(tmp_path / "runs")], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    line = assert_bad_input(r.returncode, r.stderr, file=tmp_path / "runs", out=r.stdout)
    assert "2 capture(s)" in line and "job1/cap, job2/cap" in line
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["job1", "job2"]  # nothing written into it


def test_scheduler_without_dask_is_unavailable_in_one_line(monkeypatch, capsys):
    """``--scheduler`` where dask is not installed: exit 4, one line naming the extra (no traceback)."""
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import fails as when it is absent
    assert main(["analyze", str(CAPTURE), "--scheduler", "tcp://127.0.0.1:8786", "-q"]) == 4
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "dask.distributed is not installed" in err[0] and ".[dask]" in err[0], err


@pytest.mark.slow
def test_the_readme_flow_pasted_from_an_80_column_terminal_ends_in_a_bundle(tmp_path):
    """trace twice, diff, then paste each printed ``next:`` as a user would from an 80-column terminal:
    kernel -> compare -> bundle, and the bundle names the implementation and the setting."""
    import re
    import shutil
    import tarfile

    shutil.copytree(REPO / "examples" / "cpu-divergence", tmp_path / "examples" / "cpu-divergence")
    env = _env()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    for run, threads in (("runA", "1"), ("runB", "2")):
        r = subprocess.run(["forensics", "trace", "--out", run, "--", "python", "examples/cpu-divergence/train.py",
                            "--threads", threads], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr

    def step(command: str) -> tuple[int, str, str]:
        """Run a pasted command in an 80-column pty; (exit, output, the next: command it printed)."""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 80, 0, 0))
        p = subprocess.Popen(["bash", "-c", command], stdin=slave, stdout=slave, stderr=slave, env=env,
                             cwd=tmp_path, close_fds=True)
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        p.wait(timeout=600)
        os.close(master)
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode("utf-8", "replace").replace("\r\n", "\n"))
        nxt = [line[len("next: "):] for line in text.splitlines() if line.startswith("next: ")]
        return p.returncode, text, (nxt[0] if nxt else "")

    code, out, kernel = step("forensics diff runA runB")
    assert code == 1 and kernel.startswith("forensics kernel --site 'gemm:NT:acc0:grad1#") and \
        kernel.endswith("-- python examples/cpu-divergence/train.py --threads 1"), out
    code, out, compare = step(kernel)
    assert code == 0 and "its output bits differ" in out and compare == "forensics compare forensics-capture", out
    code, out, bundle = step(compare)
    assert code == 1 and bundle == "forensics bundle forensics-capture -o bundle.tar.gz", out
    code, out, _ = step(bundle)
    assert code == 0, out
    with tarfile.open(tmp_path / "bundle.tar.gz") as tar:
        report = next(tar.extractfile(m).read().decode() for m in tar.getmembers() if m.name.endswith("/report.md"))
    assert "aten::mm -> oneMKL SGEMM" in report and "--threads 2" in report and "nthr=2" in report
