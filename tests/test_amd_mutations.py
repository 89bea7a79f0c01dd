"""Every real AMD file of tests/fixtures/amd, cut short and byte-flipped, through its reader (the rule
of tests/test_corpus_mutations.py): ``BadInput`` in one line naming the damaged file, or the intact
file's count, or a result that says what it lost or skipped (``attrs["problems"]``); never another
exception, never a different count presented as complete.

Mutations (seeded): cuts at 32 evenly spaced offsets, 16 bytes XOR 0xFF, 16 printable characters
replaced by another printable one. A cut that lands exactly after a newline leaves a shorter valid
file (the limit docs/parsers/README.md states for every text reader) and is not counted as damage.
"""
from __future__ import annotations

import random
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers import hipblaslt_log, rocblas_log, rocprofv3

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
READERS = {"rocprofv3": rocprofv3.read_kernel_trace, "rocpd": rocprofv3.read_kernel_trace,
           "rocprof": rocprofv3.read_kernel_trace,
           "hipblaslt": hipblaslt_log.read_calls, "rocblas": rocblas_log.read_calls}
FILES = sorted(p for p in AMD.iterdir() if p.suffix in (".csv", ".log"))
pytestmark = pytest.mark.slow  # ~11 s on 2 cores: the integration lane (README, "fast lane")
POINTS, FLIPS = 32, 16


def _reader(path: Path):
    if "marker_api_trace" in path.name:
        return rocprofv3.read_marker_trace
    if "hip_runtime_api_trace" in path.name:
        return rocprofv3.read_api_trace
    return READERS[path.name.split("_")[0]]


def _mutations(data: bytes, seed: str) -> list[tuple[str, bytes]]:
    n = len(data)
    out = []
    for i in range(1, POINTS + 1):
        at = n * i // (POINTS + 1)
        if data[at - 1:at] != b"\n":
            out.append((f"cut@{at}", data[:at]))
    rng = random.Random(seed)
    for _ in range(FLIPS):
        pos = rng.randrange(n)
        b = bytearray(data)
        b[pos] ^= 0xFF
        out.append((f"xor@{pos}", bytes(b)))
    for _ in range(FLIPS):
        pos = rng.randrange(n)
        c = data[pos]
        if 32 <= c < 127:
            b = bytearray(data)
            b[pos] = (c - 32 + 47) % 95 + 32
            out.append((f"char@{pos}", bytes(b)))
    return out


def test_every_fixture_has_a_reader():
    assert len(FILES) == 19 and all(_reader(p) for p in FILES)


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_damaged_amd_file_is_bad_input_or_the_same_count(path, tmp_path):
    read = _reader(path)
    try:
        baseline = len(read(path))
    except BadInput:
        baseline = None  # an intact file the reader refuses (rocprof's per-kernel summary)
    damaged = tmp_path / path.name
    wrong = []
    for label, data in _mutations(path.read_bytes(), path.name):
        damaged.write_bytes(data)
        try:
            df = read(damaged)
        except BadInput as e:
            assert "\n" not in str(e) and e.path == str(damaged), (label, str(e))
            continue
        if len(df) != baseline and not df.attrs.get("problems"):
            wrong.append((label, baseline, len(df)))
    assert wrong == [], f"{path.name}: a different count presented as complete: {wrong[:5]}"
