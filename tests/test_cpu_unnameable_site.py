"""At a CPU site nothing can be NAMED at, the report and the bundle say what the profiler saw there.

``tests/fixtures/cpu/mse-loss`` is a real capture (tests/fixtures/cpu/PROVENANCE.md) of the
conv1d example's loss, ``aten.mse_loss.default#1``: an ATen-internal reduction, no op inside it
calls oneDNN or oneMKL, so the two-instrument rule names nothing. The analysis prints the ops the
profiler recorded inside the occurrence and their counts, and the bundle's Kernel section and
evidence.json carry them, instead of an empty table.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from forensics.cli import main

pytestmark = pytest.mark.slow  # in-process commands on a real capture, seconds each

REPO = Path(__file__).resolve().parents[1]
CAPTURE = REPO / "tests" / "fixtures" / "cpu" / "mse-loss"
LABEL = "aten.mse_loss.default#1"


def test_analysis_says_what_the_profiler_saw_at_the_occurrence(tmp_path, capsys):
    from forensics.judge.analysis import analyze
    from forensics.judge.report import profiler_ops_at

    seen = profiler_ops_at(analyze(CAPTURE))
    assert {(d["arm"], d["rank"], d["occurrence"]) for d in seen} == {
        ("a1", 0, LABEL), ("a2", 0, LABEL), ("t1-omp_num_threads", 0, LABEL)}
    for d in seen:
        ops = {o["op"]: o["count"] for o in d["ops"]}
        assert ops["aten::mse_loss"] == 1 and ops["aten::mean"] == 1  # the op itself and its reduction
        assert all(isinstance(c, int) and c >= 1 for c in ops.values())
        assert [o["count"] for o in d["ops"]] == sorted((o["count"] for o in d["ops"]), reverse=True)
    main(["analyze", str(CAPTURE), "--out", str(tmp_path / "an")])
    out = capsys.readouterr().out
    line = next(x for x in out.split("\nprofiler at ")[1:2])
    assert line.startswith(f"{LABEL} (a1 rank 0, a2 rank 0, t1-omp_num_threads rank 0): ")
    assert "aten::mse_loss x1" in " ".join(line.split())
    assert "verdict: no implementation NAMED" in out


def test_bundle_shows_the_profiler_ops_instead_of_an_empty_table(tmp_path, capsys):
    out = tmp_path / "b.tar.gz"
    assert main(["bundle", str(CAPTURE), "-o", str(out)]) == 0
    with tarfile.open(out) as tar:
        top = tar.getnames()[0].split("/")[0]
        report = tar.extractfile(f"{top}/report.md").read().decode()
        evidence = json.loads(tar.extractfile(f"{top}/evidence.json").read())
    kernel = report.split("## Kernel", 1)[1].split("\n## ", 1)[0]
    assert "What torch.profiler recorded inside each occurrence" in kernel and "none of them is NAMED" in kernel
    assert f"| {LABEL} | a1 | 0 | aten::mse_loss | 1 |" in kernel
    assert "| arm | family | launches |" not in kernel  # no empty kernel table
    assert {d["arm"] for d in evidence["profiler_ops"]} == {"a1", "a2", "t1-omp_num_threads"}
    assert all(isinstance(o["count"], int) for d in evidence["profiler_ops"] for o in d["ops"])
    assert ".0 |" not in report  # counts as integers
