"""Each command's JSON report is named and versioned, every key it emits is documented, and
``--as json|csv|markdown`` prints the report or the command's table alone on stdout (issue 31).

The commands run in-process on the repository's real inputs: the CPU captures, the public GPU
capture, the real op traces of the CPU example, the DebugMode and torchtitan dumps, and the
installed torch package for ``knob``.
"""
from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.runtime.output import render_rows

pytestmark = pytest.mark.slow  # in-process commands on real captures, seconds each

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures"
TRACES = FIX / "traces-cpu-divergence"
DOC = (REPO / "docs" / "formats" / "reports.md").read_text()
TORCH = Path(importlib.util.find_spec("torch").origin).parent
VERSIONS = {"forensics.analysis": 1, "forensics.compare": 1, "forensics.diff": 2, "forensics.knob": 2}


def key_paths(obj, parts: tuple[str, ...] = (), depth: int = 2) -> set[str]:
    """Every key path to ``depth`` named keys: list items as ``key[]``, a rank number as ``<rank>``."""
    out: set[str] = set()
    if len([p for p in parts if p != "<rank>"]) >= depth:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = parts + ("<rank>" if str(k).lstrip("-").isdigit() else str(k),)
            out.add(".".join(p))
            out |= key_paths(v, p, depth)
    elif isinstance(obj, list) and parts:
        for v in obj:
            out |= key_paths(v, parts[:-1] + (parts[-1] + "[]",), depth)
    return out


def documented(schema: str) -> set[str]:
    """The keys a section lists; ``counts[].<instrument>`` stands for one key per counting instrument
    of the registry (a new instrument is its module, its parser and one registration line: no doc edit)."""
    from forensics import instruments as registry

    section = DOC.split(f"## `{schema}`", 1)[1].split("\n## ", 1)[0]
    keys = set(re.findall(r"`([^`\s]+)`", section))
    if "counts[].<instrument>" in keys:
        keys |= {f"counts[].{i.name}" for i in registry.INSTRUMENTS
                 if i.role in (registry.LAUNCHES, registry.CALLS)}
    return keys


def _run(capsys, args: list[str], code: int | None = None) -> str:
    got = main(args)
    out = capsys.readouterr().out
    if code is not None:
        assert got == code, out[-2000:]
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _commands(tmp: Path) -> list[tuple[list[str], int]]:
    cpu = FIX / "cpu"
    return [
        (["analyze", str(cpu / "conv1d-threads"), "--out", str(tmp / "a1")], 0),
        (["analyze", str(cpu / "mm-cbwr"), "--out", str(tmp / "a2")], 0),
        (["analyze", str(REPO / "examples" / "corpus-ex-gpu"), "--out", str(tmp / "a3")], 0),
        (["compare", str(cpu / "conv1d-threads")], 1),
        (["compare", str(cpu / "mm-cbwr")], 1),
        (["diff", str(TRACES / "a.jsonl"), str(TRACES / "origin.jsonl")], 1),
        (["diff", str(TRACES / "a_window.jsonl"), str(TRACES / "receiver.jsonl")], 1),
        (["diff", str(FIX / "debugmode-save-logs" / "a"), str(FIX / "debugmode-save-logs" / "b")], 1),
        (["diff", str(FIX / "torchtitan-numerics" / "a"), str(FIX / "torchtitan-numerics" / "b")], 1),
        (["knob", "OMP_NUM_THREADS", "--site", "aten.mm.default", "--path", str(TORCH)], 0),
    ]


def test_every_key_of_every_json_report_is_documented(tmp_path, capsys, cache, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(cache))
    seen: dict[str, set[str]] = {}
    for args, code in _commands(tmp_path):
        data = json.loads(_run(capsys, args + ["--as", "json"], code))
        assert VERSIONS.get(data["schema"]) == data["version"], (args, data["schema"], data["version"])
        assert list(data)[:2] == ["schema", "version"] or args[0] in ("diff", "knob")
        seen.setdefault(data["schema"], set()).update(key_paths(data))
    assert set(seen) == set(VERSIONS)
    for schema, keys in seen.items():
        missing = sorted(keys - documented(schema))
        assert missing == [], f"{schema}: keys not in docs/formats/reports.md: {missing}"


def test_analysis_json_on_disk_is_the_as_json_report(tmp_path, capsys):
    printed = json.loads(_run(capsys, ["analyze", str(FIX / "cpu" / "conv1d-threads"), "--out", str(tmp_path / "a"),
                                       "--as", "json"], 0))
    on_disk = json.loads((tmp_path / "a" / "analysis.json").read_text())
    assert on_disk["schema"] == printed["schema"] == "forensics.analysis" and on_disk["verdicts"] == printed["verdicts"]


def test_analyze_as_csv_is_every_verdict_row_alone_on_stdout(tmp_path, capsys):
    out = _run(capsys, ["analyze", str(FIX / "cpu" / "conv1d-threads"), "--out", str(tmp_path / "a"), "--as", "csv"], 0)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 6 and {r["verdict"] for r in rows} == {"NAMED"}
    assert {r["arm"] for r in rows} == {"a1", "a2", "t1-omp_num_threads"}
    toggle = [r for r in rows if r["arm"] == "t1-omp_num_threads"]
    assert {r["implementation -> library"] for r in toggle} == {
        "aten::mkldnn_convolution -> oneDNN convolution jit_1x1:avx512_core"}
    assert all("torch_profiler + onednn agree" in r["reason"] for r in toggle)


def test_analyze_as_markdown_is_a_pipe_table(tmp_path, capsys):
    out = _run(capsys, ["analyze", str(REPO / "examples" / "corpus-ex-gpu"), "--out", str(tmp_path / "a"),
                        "--as", "markdown"], 0)
    lines = out.splitlines()
    assert lines[0].startswith("| arm | rank | scope | kernel (short name) |") and lines[1].startswith("|---|")
    assert len(lines) == 2 + 5 and all(line.startswith("| a1 | 0 | <window> |") for line in lines[2:])
    assert any("| vector_add1 |" in line for line in lines)


def test_compare_as_csv_has_each_occurrence(capsys):
    out = _run(capsys, ["compare", str(FIX / "cpu" / "conv1d-threads"), "--as", "csv"], 1)
    rows = list(csv.DictReader(io.StringIO(out)))
    by = {(r["arm"], r["label"]): r for r in rows}
    assert by[("a2", "aten.convolution.default#1")]["classification"] == "IDENTICAL"
    first = by[("t1-omp_num_threads", "aten.convolution.default#1")]
    assert first["classification"] == "SELECTION DIFFERS" and first["toggle"] == "OMP_NUM_THREADS=2"
    assert first["kernel_arm"] == "aten::mkldnn_convolution"


def test_diff_as_csv_is_one_row_per_rank(capsys):
    out = _run(capsys, ["diff", str(TRACES / "a.jsonl"), str(TRACES / "origin.jsonl"), "--as", "csv"], 1)
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert (row["rank"], row["verdict"], row["evidence"], row["identity"], row["site"]) == (
        "0", "ORIGIN", "proven", "aten.mm.default:2", "gemm:NT:acc0:grad1")
    out = _run(capsys, ["diff", str(TRACES / "a.jsonl"), str(TRACES / "same.jsonl"), "--as", "csv"], 0)
    (row,) = list(csv.DictReader(io.StringIO(out)))
    assert row["verdict"] == "no divergence" and row["records_compared"] == "130"


def test_knob_as_csv_lists_every_finding(capsys, cache, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(cache))
    out = _run(capsys, ["knob", "OMP_NUM_THREADS", "--path", str(TORCH), "--as", "csv"], 0)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert any(r["kind"] == "python read" and r["where"].endswith("distributed/run.py") for r in rows)
    assert any(r["kind"] == "library contains the name" and r["where"].endswith("libgomp.so.1") for r in rows)


def test_as_refuses_an_unknown_name(capsys):
    assert main(["diff", str(TRACES / "a.jsonl"), str(TRACES / "same.jsonl"), "--as", "xml"]) == 2


def test_render_rows_quotes_and_escapes():
    cols, rows = ["name", "n"], [["a|b, \"c\"", 2.0], ["line\nbreak", None]]
    assert list(csv.reader(io.StringIO(render_rows(cols, rows, "csv")))) == [
        ["name", "n"], ["a|b, \"c\"", "2"], ["line\nbreak", ""]]
    md = render_rows(cols, rows, "markdown").splitlines()
    assert md == ["| name | n |", "|---|---|", '| a\\|b, "c" | 2 |', "| line<br>break |  |"]
