"""Every command's piped output fits 100 columns, or the line says why it is longer (issue 31).

Each command runs as a real subprocess with stdout and stderr on pipes, on the repository's real
inputs (its CPU captures, the public GPU capture, the real op traces of the CPU example and the
DebugMode and torchtitan dumps made by the installed torch, the installed torch package for
``knob``) and the README's programs. The rule (docs/errors.md, "Piped output"): a line is at most
100 columns, broken only between words, its continuation indented deeper; a longer line is either
a command to copy (``next:``, a dry run's ``argv:``/``env:``/``then:``), printed whole, or one word
(a path, a name) that no break could shorten, alone on its line after its indent. Lines on stderr
(errors, refusals, progress) are not broken: an error is one line.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import CONTINUATION, PIPED_TABLE_WIDTH, fit_line

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
FIX = "tests/fixtures"
TRACES = f"{FIX}/traces-cpu-divergence"
TORCH = Path(__import__("importlib").util.find_spec("torch").origin).parent
WHOLE = re.compile(r"^\s*(next|argv|env|then): ")

#: (command line, exit status it must end with); run from a scratch copy of examples/ and tests/fixtures/.
COMMANDS = [
    (["analyze", f"{FIX}/cpu/conv1d-threads", "--out", "an1"], 0),
    (["analyze", f"{FIX}/cpu/example", "--out", "an2"], 0),
    (["analyze", f"{FIX}/cpu/mm-cbwr", "--out", "an3"], 0),
    (["analyze", "examples/corpus-ex-gpu", "--out", "an4"], 0),
    (["compare", f"{FIX}/cpu/conv1d-threads"], 1),
    (["compare", f"{FIX}/cpu/mm-cbwr"], 1),
    (["compare", f"{FIX}/cpu/example"], 0),
    (["diff", f"{TRACES}/a.jsonl", f"{TRACES}/origin.jsonl"], 1),
    (["diff", f"{TRACES}/a.jsonl", f"{TRACES}/same.jsonl"], 0),
    (["diff", f"{TRACES}/a_window.jsonl", f"{TRACES}/receiver.jsonl"], 1),
    (["diff", f"{FIX}/debugmode-save-logs/a", f"{FIX}/debugmode-save-logs/b"], 1),
    (["diff", f"{FIX}/debugmode-tensor-hashes/a", f"{FIX}/debugmode-tensor-hashes/b"], 1),
    (["diff", f"{FIX}/torchtitan-numerics/a", f"{FIX}/torchtitan-numerics/b"], 1),
    (["knob", "OMP_NUM_THREADS", "--path", str(TORCH)], 0),
    (["knob", "MKL_CBWR", "--path", str(TORCH)], 0),
    (["bundle", f"{FIX}/cpu/conv1d-threads", "-o", "b.tar.gz"], 0),
    (["kernel", "--device", "cpu", "--site", "gemm:NT:acc0:grad1#2", "--ranks", "0", "--steps", "0", "--dry-run",
      "--arm-command", "python examples/cpu-divergence/train.py --threads 2", "--", "python",
      "examples/cpu-divergence/train.py", "--threads", "1"], 0),
    (["trace", "--out", "runA", "--", "python", "examples/cpu-divergence/train.py", "--threads", "1", "--steps", "1"], 0),
    (["kernel", "--site", "gemm:NT:acc0:grad1#2", "--ranks", "0", "--steps", "0", "--arm-command",
      "python examples/cpu-divergence/train.py --threads 2", "--", "python", "examples/cpu-divergence/train.py",
      "--threads", "1"], 0),
]


def too_long(text: str) -> list[str]:
    """The lines longer than 100 columns that the rule does not allow."""
    bad = []
    for line in text.splitlines():
        if len(line) <= PIPED_TABLE_WIDTH or WHOLE.match(line):
            continue
        if " " in line.strip():  # more than one word: a break between two of them would have shortened it
            bad.append(line)
    return bad


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("width")
    for rel in ("examples", "tests/fixtures"):
        shutil.copytree(REPO / rel, d / rel, ignore=shutil.ignore_patterns("analysis", "analysis-*", "__pycache__"))
    return d


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "FORCE_COLOR", "TERM")}
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["FORENSICS_CACHE_DIR"] = str(cwd / "cache")
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.parametrize("args,code", COMMANDS, ids=[" ".join(a[:2]) + f" {i}" for i, (a, _) in enumerate(COMMANDS)])
def test_piped_lines_fit_100_columns(scratch, args, code):
    r = _run(args, scratch)
    assert r.returncode == code, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stdout + r.stderr and r.stdout.strip()
    assert too_long(r.stdout) == [], r.stdout[-3000:]  # stderr is never broken: an error is one line


def test_a_real_diff_line_is_broken_between_words_only(scratch):
    """The real diff of a one-thread and a two-thread run: the rank line (259 columns whole) reads on
    three lines; rejoined, it is the line the report holds, every identifier whole."""
    from forensics.tracediff.diff import diff_paths, format_report

    r = _run(["diff", f"{TRACES}/a.jsonl", f"{TRACES}/origin.jsonl"], scratch)
    whole = format_report(diff_paths(scratch / TRACES / "a.jsonl", scratch / TRACES / "origin.jsonl"))
    head = next(line for line in whole.splitlines() if line.startswith("rank 0: "))
    assert len(head) > 200
    lines = r.stdout.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("rank 0: "))
    cont = [line for line in lines[i + 1:i + 4] if line.startswith(" " * CONTINUATION) and not line.startswith(" " * 7)]
    assert len(cont) >= 2
    assert " ".join([lines[i]] + [c.strip() for c in cont]) == head
    for token in ("aten.mm.default:2", "node=AddmmBackward0", "gemm:NT:acc0:grad1#1"):
        assert any(token in line for line in [lines[i]] + cont)
    nxt = [line for line in lines if line.startswith("next: ")]
    assert len(nxt) == 1 and len(nxt[0]) > PIPED_TABLE_WIDTH and "--arm-command 'python train.py --threads 2'" in nxt[0]


def test_fit_line_rule():
    path = "/a/" + "long-folder-name/" * 8 + "trace.jsonl"
    line = "forensics diff: " + path + "  vs  " + path + "  (format native)"
    out = fit_line(line)
    assert out[0] == "forensics diff:" and out[1] == " " * CONTINUATION + path  # a path is never split
    assert all(len(x) <= 100 or " " not in x.strip() for x in out)
    assert " ".join(" ".join(out).split()) == " ".join(line.split())  # nothing lost, only spaces changed
    assert fit_line("  rank 0: " + "word " * 40)[1].startswith(" " * (2 + CONTINUATION) + "word")
    cmd = "next: forensics kernel --site 'x#1' " + "--arm-command 'python t.py' " * 5
    assert fit_line(cmd) == [cmd]
    assert fit_line("short") == ["short"]


def test_stderr_is_never_broken(tmp_path):
    """A refusal on stderr stays one line however long (here 160+ columns under a long tmp path)."""
    out = tmp_path / ("an-output-folder-whose-name-is-long-enough-" + "x" * 60)
    out.mkdir()
    (out / "analysis.json").write_text("{}")
    r = _run(["analyze", str(REPO / FIX / "cpu" / "conv1d-threads"), "--out", str(out)], tmp_path)
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) > PIPED_TABLE_WIDTH and str(out) in lines[0]
