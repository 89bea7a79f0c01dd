"""The bundle's picture of the arms side by side per occurrence (arms.svg, hand-written SVG).

Rendered from the repository's real CPU capture (conv1d-threads: a1, a2 at one thread, the
toggle arm at OMP_NUM_THREADS=2) and parsed back: each cell names what the arm ran at the
occurrence, its algo and its bits against the baseline, red where it differs, green where not.
"""
from __future__ import annotations

import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from forensics.evidence.bundle import write_bundle

pytestmark = pytest.mark.slow  # a real bundle, seconds

REPO = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def members(tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("pic") / "b.tar.gz"
    write_bundle(REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads", out)
    with tarfile.open(out) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _cells(svg: bytes) -> dict[tuple[str, str], dict[str, str]]:
    root = ET.fromstring(svg)
    cells = {}
    for g in root.iter(f"{SVG}g"):
        texts = {t.get("class"): t.text for t in g.iter(f"{SVG}text")}
        rect = g.find(f"{SVG}rect")
        cells[(g.get("data-arm"), g.get("data-occurrence"))] = {**texts, "fill": rect.get("fill")}
    return cells


def test_arms_side_by_side_per_occurrence(members):
    cells = _cells(members["arms.svg"])
    occ = ("aten.convolution.default#1", "aten.convolution.default#2")
    assert set(cells) == {(arm, o) for arm in ("a1", "a2", "t1-omp_num_threads") for o in occ}
    base = cells[("a1", occ[0])]
    assert base["impl"] == "aten::_slow_conv2d_forward -> oneMKL SGEMM" and base["bits"] == "baseline"
    replica = cells[("a2", occ[0])]
    assert replica["bits"] == "bits equal: IDENTICAL" and replica["fill"] == "#e8f5e9"
    toggle = cells[("t1-omp_num_threads", occ[0])]
    assert toggle["impl"].startswith("aten::mkldnn_convolution -> oneDNN convolution")
    assert toggle["bits"] == "bits DIFFER: SELECTION DIFFERS" and toggle["fill"] == "#ffebee"
    assert "(arms.svg)" in members["report.md"].decode()
