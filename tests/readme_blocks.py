"""The README's sample outputs are produced by the commands, not typed by hand.

A sample in README.md is a fenced ``text`` block right after a marker comment::

    <!-- readme-setup: forensics trace --out runA -- python examples/cpu-divergence/train.py --threads 1 -->
    <!-- readme-run exit=1: forensics diff runA runB -->
    ```text
    ...what the command printed...
    ```

``readme-setup`` commands run first (their output is not shown); ``readme-run`` is the command
whose stdout (and stderr, after it) the block shows, with the exit code it must end with. Every
command runs with bash in a scratch copy of ``examples/`` and ``tests/fixtures/cpu/`` (so nothing
is written into the repository), with the repository on PYTHONPATH. The block shows the real
output with the scratch directory written as ``.``. Before comparing, text that changes from run
to run is normalised on both sides: durations, time stamps, and which uninitialised ``empty``
buffers the differ passed over (their bits are whatever memory held: the count and the lines vary).

``python -m tests.readme_blocks --update`` rewrites the blocks from real runs;
``tests/test_readme.py`` fails when a block differs from what the command prints now.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
_MARK = re.compile(r"^<!-- readme-(setup|run)(?: exit=(\d+))?: (.*?) -->$")
_FENCE = "```"
#: Normalisations applied to real output before it is compared or written.
_VOLATILE = [
    (re.compile(r"\b\d+(\.\d+)? ?(s|ms|seconds)\b"), "<time>"),
    (re.compile(r"\b\d+:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\b\d{8}-\d{6}\b"), "<stamp>"),
    (re.compile(r"\b\d+ probe artifact\(s\) passed over"), "<n> probe artifact(s) passed over"),
]
#: Lines dropped before comparing (their number and content vary between runs of the same program).
_VOLATILE_LINES = re.compile(r"^\s*(artifact passed over: |\.\.\. and \d+ more artifact\(s\) passed over)")
#: What the scratch directory holds: copies of these repository folders (analysis outputs left out).
_COPIED = ("examples", "tests/fixtures/cpu")


@dataclass
class Sample:
    command: str
    exit_code: int
    setup: list[str] = field(default_factory=list)
    start: int = 0  # index of the first line inside the fence
    end: int = 0  # index of the closing fence
    expected: str = ""


def parse(text: str) -> list[Sample]:
    lines = text.splitlines()
    samples: list[Sample] = []
    setup: list[str] = []
    i = 0
    while i < len(lines):
        m = _MARK.match(lines[i].strip())
        if not m:
            i += 1
            continue
        kind, code, cmd = m.group(1), m.group(2), m.group(3)
        if kind == "setup":
            setup.append(cmd)
            i += 1
            continue
        j = i + 1
        if j >= len(lines) or not lines[j].startswith(_FENCE):
            raise ValueError(f"README.md:{i + 1}: readme-run marker not followed by a fenced block")
        k = j + 1
        while k < len(lines) and not lines[k].startswith(_FENCE):
            k += 1
        if k >= len(lines):
            raise ValueError(f"README.md:{j + 1}: fenced block never closed")
        samples.append(Sample(cmd, int(code or 0), setup, j + 1, k, "\n".join(lines[j + 1:k])))
        setup = []
        i = k + 1
    return samples


def normalise(text: str, scratch: Path | None = None) -> str:
    """The output as the README shows it: scratch directory as ``.``, no trailing blanks, and the
    lines broken at 100 columns as the command breaks them when run in the repository (the scratch
    path is longer: its lines are joined and broken again after it is taken out)."""
    from forensics.runtime.console import fit_line, unfit  # noqa: PLC0415 (the repository's code)

    if scratch is not None:
        for d in sorted({str(scratch), os.path.realpath(scratch)}, key=len, reverse=True):
            text = text.replace(d + "/", "").replace(d, ".")
    text = text.replace(str(REPO) + "/", "")
    return "\n".join(piece.rstrip() for line in unfit(text.strip("\n")).splitlines()
                     for piece in fit_line(line.rstrip(), 100))


def comparable(text: str) -> str:
    """``text`` with what varies from run to run normalised (durations, stamps, artifact lines)."""
    lines = []
    for line in normalise(text).splitlines():
        if _VOLATILE_LINES.match(line):
            continue
        for pattern, repl in _VOLATILE:
            line = pattern.sub(repl, line)
        lines.append(line)
    return "\n".join(lines)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.pop("FORCE_COLOR", None)
    env["NO_COLOR"] = "1"
    return env


def run(sample: Sample, timeout_s: float = 600) -> tuple[int, str]:
    """Run the sample's setup and command in a scratch copy; (exit code, output as the README shows it)."""
    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        scratch = Path(tmp)
        for rel in _COPIED:
            shutil.copytree(REPO / rel, scratch / rel,
                            ignore=shutil.ignore_patterns("analysis", "analysis-*", "__pycache__"))
        env = _env()
        for cmd in sample.setup:
            r = subprocess.run(["bash", "-c", cmd], cwd=scratch, env=env, capture_output=True, text=True,
                               timeout=timeout_s)
            if r.returncode not in (0, 1):
                raise RuntimeError(f"setup `{cmd}` exited {r.returncode}: {r.stderr[-2000:]}")
        r = subprocess.run(["bash", "-c", sample.command], cwd=scratch, env=env, capture_output=True, text=True,
                           timeout=timeout_s)
        out = r.stdout + (("\n" + r.stderr) if r.stderr.strip() else "")
        return r.returncode, normalise(out, scratch)


def update(path: Path = README) -> int:
    """Rewrite every sample block from a real run; 1 when a command's exit code is not the README's."""
    lines = path.read_text().splitlines()
    bad = 0
    for s in reversed(parse(path.read_text())):
        code, out = run(s)
        if code != s.exit_code:
            bad += 1
            print(f"{s.command}: exit {code}, README says {s.exit_code}", file=sys.stderr)
        lines[s.start:s.end] = out.splitlines()
    path.write_text("\n".join(lines) + "\n")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.readme_blocks", description=__doc__.splitlines()[0])
    p.add_argument("--update", action="store_true", help="rewrite README.md's sample blocks from real runs")
    a = p.parse_args(argv)
    if a.update:
        return update()
    bad = 0
    for s in parse(README.read_text()):
        code, out = run(s)
        if code != s.exit_code or comparable(out) != comparable(s.expected):
            bad += 1
            print(f"differs: {s.command} (exit {code})", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
