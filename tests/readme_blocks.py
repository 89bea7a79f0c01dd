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

Some figures depend on the CPU, not on the code: which linear layer's wgrad GEMM diverges first
between 1 and 2 threads depends on how the CPU's GEMM blocks the work. :data:`MACHINE_DEPENDENT`
lists each such figure with the values the CPUs we ran on gave; a value in that set is masked on
both sides before comparing, any other value is compared as it is (a new CPU's outcome is
recorded here, never waved through). What must hold on any CPU is compared byte for byte: the
structure, the verdict words, the op family of the divergence site, the next command's shape.

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
#: Figures that depend on the machine: (pattern, the tuples of its groups seen, on which CPUs). The
#: diff sample's first divergence is the wgrad GEMM of the second linear layer (backward reaches it
#: first: site occurrence #1, 28 records) on an AMD EPYC with AVX2 and one with AVX-512 (and under
#: benchmarks/isa.py's AVX2 switches), of the first linear layer (#2, 38 records) on a Xeon with AMX.
MACHINE_DEPENDENT = [
    (re.compile(r"\b(\d+) records compared"), {("28",), ("38",)}, "records up to the first divergence"),
    (re.compile(r"\baten\.mm\.default:(\d+) seq=(\d+)"), {("2", "27"), ("3", "37")}, "the divergent op and its seq"),
    (re.compile(r"\(forward aten\.addmm\.default:(\d+)\)"), {("2",), ("1",)}, "the forward op of that layer"),
    (re.compile(r"\bgemm:NT:acc0:grad1#(\d+)"), {("1",), ("2",)}, "the wgrad site's occurrence in the step"),
]
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


def mask_machine(text: str) -> str:
    """``text`` with each :data:`MACHINE_DEPENDENT` figure whose value is in its documented set written
    as ``<cpu>`` (lines joined first, so a figure is found whatever the line breaks; then fitted again)."""
    from forensics.runtime.console import fit_line, unfit  # noqa: PLC0415 (the repository's code)

    def masker(allowed: set[tuple[str, ...]]):  # noqa: ANN202
        def sub(m: re.Match[str]) -> str:
            if m.groups() not in allowed:
                return m.group(0)
            out, last = [], m.start()
            for i in range(1, len(m.groups()) + 1):
                out += [m.string[last:m.start(i)], "<cpu>"]
                last = m.end(i)
            return "".join(out) + m.string[last:m.end()]
        return sub

    lines = unfit(text).splitlines()
    for pattern, allowed, _ in MACHINE_DEPENDENT:
        lines = [pattern.sub(masker(allowed), line) for line in lines]
    return "\n".join(piece.rstrip() for line in lines for piece in fit_line(line.rstrip(), 100))


def comparable(text: str) -> str:
    """``text`` with what varies from run to run normalised (durations, stamps, artifact lines) and the
    documented machine-dependent figures masked."""
    lines = []
    dropped_indent = None  # a dropped line's continuation lines (indented deeper) go with it
    for line in mask_machine(normalise(text)).splitlines():
        indent = len(line) - len(line.lstrip())
        if dropped_indent is not None and line.strip() and indent > dropped_indent:
            continue
        dropped_indent = None
        if _VOLATILE_LINES.match(line):
            dropped_indent = indent
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


def run(sample: Sample, timeout_s: float = 600, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run the sample's setup and command in a scratch copy; (exit code, output as the README shows it).
    ``extra_env``: set for every command (e.g. benchmarks/isa.py's AVX2 switches)."""
    with tempfile.TemporaryDirectory(prefix="readme-") as tmp:
        scratch = Path(tmp)
        for rel in _COPIED:
            shutil.copytree(REPO / rel, scratch / rel,
                            ignore=shutil.ignore_patterns("analysis", "analysis-*", "__pycache__"))
        env = {**_env(), **(extra_env or {})}
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
