"""docs/api.md runs: its code blocks execute in order (one namespace, from the repository root, on
the shipped real captures and traces), and each verdict they compute equals the command's on the
same files (the commands run in-process through forensics.cli.main)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

from forensics.cli import main

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
CAPTURE = "tests/fixtures/cpu/conv1d-threads"
LOGS = "tests/fixtures/debugmode-save-logs"


@pytest.fixture(scope="module")
def session() -> dict:
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    assert len(blocks) >= 5
    ns: dict = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(REPO)
        for i, block in enumerate(blocks, 1):
            exec(compile(block, f"docs/api.md block {i}", "exec"), ns)  # noqa: S102 - the page's own code
    return ns


def _cli(args: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = main(args)
    return code, unfit(capsys.readouterr().out)  # piped lines are broken at 100 columns (docs/errors.md): read them whole


def test_analyze_equals_the_command(session, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _cli(["analyze", CAPTURE, "--out", str(tmp_path / "an"), "-q"], capsys)
    an = session["an"]
    assert code == an.exit_code == 0
    assert out.strip().splitlines()[-1] == an.verdict == "verdict: 2 implementation(s) NAMED"
    written = json.loads((tmp_path / "an" / "analysis.json").read_text())
    key = lambda rows: sorted((r["arm"], r["rank"], r["scope"], r["kernel"], r["verdict"]) for r in rows)  # noqa: E731
    assert key(written["verdicts"]) == key(an.to_json()["verdicts"])
    assert len(session["table"]) == len(written["verdicts"]) == 6


def test_compare_equals_the_command(session, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _cli(["compare", CAPTURE, "--json", str(tmp_path / "c.json")], capsys)
    cmp = session["cmp"]
    assert code == cmp.exit_code == 1
    written = json.loads((tmp_path / "c.json").read_text())
    assert {p["arm"]: p["counts"] for p in written["comparison"]["pairs"]} == cmp.summary()
    assert cmp.summary()["a2"] == {"IDENTICAL": 2}
    for line in cmp.toggle_lines():
        assert f"toggle {line}" in out
    assert set(session["occ"]["classification"]) == {"IDENTICAL", "SELECTION DIFFERS", "INPUTS DIFFER"}


def test_diff_equals_the_command(session, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _cli(["diff", f"{LOGS}/a", f"{LOGS}/b", "--json", str(tmp_path / "d.json")], capsys)
    d, first = session["d"], session["first"]
    assert code == d.exit_code == 1
    fd = json.loads((tmp_path / "d.json").read_text())["ranks"]["0"]["first_divergence"]
    row = first.iloc[0]
    assert (fd["verdict"], fd["identity"], fd["evidence"]) == (row["verdict"], row["identity"], row["evidence"])
    assert (row["verdict"], row["identity"], row["evidence"]) == ("ORIGIN", "aten.mm.default:3", "unproven")
    assert f"site: {d.site}" in out and all(f"warning: {w}" in out for w in d.warnings)
    assert len(session["records"]) == 44


def test_knob_equals_the_command(session, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code, out = _cli(["knob", "OMP_NUM_THREADS", "--site", "aten.mm.default", "--path", "examples",
                      "--device", "cpu", "--json", "-"], capsys)
    assert code == 0
    k = session["k"]
    report = json.loads(out)
    assert report["scope"]["verdict"] == k.verdict and report["catalog"] is not None and k.catalogued
    assert len(report["python"]["mention"]) == int((k.to_frame()["kind"] == "mention").sum())
