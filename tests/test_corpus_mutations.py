"""Every real file of ../shared/corpus, cut short and byte-flipped, through its registry reader and
through `forensics analyze`.

For each mutation the reader must either raise ``BadInput`` (one line, naming the mutated file)
or return a result whose count (launches of a launch counter, calls of a call log) equals the
intact file's, or that says what it lost (``attrs["problems"]``): never a traceback, never a
different count presented as complete. Then `forensics analyze` on a capture holding a damaged
file: exit 3 and exactly one stderr line naming the file.

Mutations (seeded, reproducible): cuts at ``POINTS`` evenly spaced offsets; flips of ``FLIPS``
bytes XOR 0xFF (binary damage) and, in text files, ``FLIPS`` printable characters replaced by
another printable one (damage the grammar must see). Bounded to fit CI on 2 cores: files over
1 MiB get ``LARGE_POINTS`` cuts; ``FORENSICS_FUZZ_POINTS=64`` runs every file at 64 points.
What a flip inside a binary file's string or number changes without changing any count (SQLite
and .ncu-rep carry no checksums) is not detectable and not claimed: docs/parsers/README.md.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from forensics import instruments as reg
from forensics.core.errors import BadInput
from tests._helpers import assert_bad_input

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
_FULL = os.environ.get("FORENSICS_FUZZ_POINTS")
POINTS = int(_FULL or 64)
LARGE_POINTS = POINTS if _FULL else 16
FLIPS = int(_FULL or 16)
LARGE = 1 << 20
TEXT = (".log", ".csv")


def _instrument(path: Path) -> reg.Instrument | None:
    if path.suffix == ".log":
        return reg.get("cublas" if "cublas_legacy" in path.name else "cublaslt")
    inst = reg.get(reg.classify_file(path.name) or "")
    return inst if inst is not None and inst.reader else None


def _files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return [p for p in sorted(CORPUS.rglob("*")) if p.is_file() and _instrument(p) is not None]


FILES = _files()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not FILES, reason=f"real corpus not found at {CORPUS}")]


def _count(inst: reg.Instrument, path: Path):
    """(count, problems) of a file through its registry reader; BadInput propagates."""
    df = inst.read(path)
    return len(df), list(df.attrs.get("problems") or [])


def mutations(path: Path) -> list[tuple[str, bytes]]:
    data = path.read_bytes()
    n = len(data)
    points = LARGE_POINTS if n > LARGE else POINTS
    out = [(f"cut@{n * i // (points + 1)}", data[: n * i // (points + 1)]) for i in range(1, points + 1)]
    rng = random.Random(path.name)
    for _ in range(FLIPS if n <= LARGE else max(FLIPS // 2, 4)):
        pos = rng.randrange(n)
        b = bytearray(data)
        b[pos] ^= 0xFF
        out.append((f"xor@{pos}", bytes(b)))
    if path.suffix in TEXT:
        for _ in range(FLIPS):
            pos = rng.randrange(n)
            c = data[pos]
            if not 32 <= c < 127:
                continue
            b = bytearray(data)
            b[pos] = (c - 32 + 47) % 95 + 32  # another printable character
            out.append((f"char@{pos}", bytes(b)))
    return out


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_damaged_file_is_bad_input_or_the_same_count(path, tmp_path):
    inst = _instrument(path)
    try:
        baseline = _count(inst, path)[0]
    except BadInput:
        baseline = None  # an intact file the reader refuses (no kernel table, an edited excerpt)
    damaged = tmp_path / path.name
    wrong = []
    for label, data in mutations(path):
        damaged.write_bytes(data)
        try:
            count, problems = _count(inst, damaged)
        except BadInput as e:
            text = str(e)
            assert "\n" not in text and e.path == str(damaged), (label, text)
            continue
        if count != baseline and not problems:
            wrong.append((label, baseline, count))
    assert wrong == [], f"{path.name}: a different count presented as complete: {wrong[:5]}"


# One damaged file per instrument kind, end to end through the CLI.
_END_TO_END = {
    "nsys": "nsys/extrap_ex-gpu.s10.sqlite", "ncu": "ncu/extrap_ex-gpu.s10.ncu-rep",
    "ncu_csv": "ncu/ncu_extrap_ex-gpu.s10_raw_by_ncu2022.3.csv",
    "kineto": "kineto/hta_critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "cublaslt": "cublaslt/cublaslt_l4_tf_xla_readme_trace.log", "cublas": "cublas_legacy/cublas_legacy_gopeft_lora.log",
}


@pytest.mark.parametrize("inst,rel", sorted(_END_TO_END.items()))
@pytest.mark.parametrize("how", ["cut", "xor"])
def test_analyze_on_a_damaged_file_says_one_line_and_exits_3(inst, rel, how, tmp_path, capsys):
    from forensics.capture.directory import new_manifest, write_manifest
    from forensics.cli import main

    src = CORPUS / rel
    data = src.read_bytes()
    mid = len(data) // 2
    bad = data[:mid] if how == "cut" else data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:]
    if how == "xor" and inst in ("ncu", "nsys"):  # no checksum: damage the bytes a reader must check
        bad = data[:16] + bytes(b ^ 0xFF for b in data[16:64]) + data[64:]
    if how == "xor" and inst == "ncu_csv":  # a metric value can change unseen: damage the third row's ID
        at = data.index(b"\n", data.index(b"\n") + 1) + 1
        bad = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
    cap = tmp_path / "cap"
    cap.mkdir()
    damaged = cap / src.name
    damaged.write_bytes(bad)
    write_manifest(cap, new_manifest(files=[{"path": src.name, "instrument": inst, "arm": "a1", "rank": 0}]))
    capsys.readouterr()
    rc = main(["analyze", str(cap), "-q", "--out", str(tmp_path / "out")])
    line = assert_bad_input(rc, capsys.readouterr().err, file=damaged)
    if inst in ("cublaslt", "cublas", "ncu_csv"):  # text: the line is named
        assert f"{src.name}:" in line
