"""Issue 30's claim, checked: a new instrument is its module, its parser and one registration line.

A toy launch counter (SYNTHETIC: its line form and file are made up here, labelled so) of a new
independent family is registered in the test, with a parser; nothing else in forensics is edited.
A plain folder holding the real ex-gpu nsys export (../shared/corpus, an A100 run of Extra-P's
ex-gpu, provenance in its .source.txt) and one toy file is then analyzed: the toy file is
recognised by its line form, read by its parser, counted in its own column and judged as an
independent family beside nsys.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from forensics import instruments as reg
from forensics.core.model import LAUNCH_COLUMNS, conform
from forensics.judge.analysis import NAMED, analyze

TOY_LINE = re.compile(rb"^TOYPROF launch ", re.M)


def read_toy(path: Path) -> pd.DataFrame:
    """The toy parser: one launch per ``TOYPROF launch <kernel>`` line."""
    rows = [{"kernel": name, "short_name": name.split("(")[0], "instrument": "toyprof", "file": str(path), "line": i}
            for i, line in enumerate(Path(path).read_text().splitlines(), 1) if line.startswith("TOYPROF launch ")
            for name in [line.split(" ", 2)[2]]]
    return conform(pd.DataFrame(rows), LAUNCH_COLUMNS) if rows else conform(pd.DataFrame(columns=["kernel"]),
                                                                            LAUNCH_COLUMNS)


TOY_FAMILY = reg.Family("toyprof", "toy profiler", "toy", reg.CUDA, "no toy profiler trace")
TOY = reg.Instrument("toyprof", reg.LAUNCHES, ("*.toy",), reg.CUDA, "toyprof", read_toy, "toy profiler trace",
                     line_form=TOY_LINE, line_why="text with TOYPROF launch lines")


@pytest.fixture
def toy():
    reg.register(TOY, family=TOY_FAMILY)
    yield TOY
    reg.unregister(TOY.name)


def test_a_registered_instrument_is_recognised_read_counted_and_judged(toy, corpus, tmp_path):
    (tmp_path / "window.sqlite").symlink_to(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite")
    # SYNTHETIC toy trace, named with no pattern of any instrument: recognised by its lines alone
    init, add = "init_array(double*, unsigned long)", "vector_add(double const*, double const*, unsigned long, double*)"
    (tmp_path / "toy-run.txt").write_text(f"TOYPROF launch {init}\nTOYPROF launch {init}\n"
                                          f"TOYPROF launch {add}\nTOYPROF launch {add}\n")
    an = analyze(tmp_path)
    assert {f.instrument for f in an.capture.files} == {"nsys", "toyprof"}
    assert "toyprof" in an.counts.columns
    v = {r.short_name: r for r in an.verdicts.itertuples()}
    # counts and names agree, but the toy file records no process id: nothing ties it to the nsys run
    # (issue 39), so the agreement is judged and shown, never NAMED
    assert v["init_array"].counts == {"cupti": 2, "toyprof": 2} and v["init_array"].verdict == "AGREE-UNTIED"
    assert v["init_array"].verdict != NAMED and "toy-run.txt (toyprof) records no process id" in v["init_array"].reason
    assert v["vector_add"].counts == {"cupti": 1, "toyprof": 2} and v["vector_add"].verdict == "DISAGREE"
    assert v["vector_dot"].counts == {"cupti": 1, "toyprof": 0}  # the toy saw the window, not this kernel
    assert an.capture.recognised[str(tmp_path / "toy-run.txt")] == "text with TOYPROF launch lines"


def test_a_capture_without_the_registered_family_says_it_is_missing(toy, corpus, tmp_path):
    (tmp_path / "window.sqlite").symlink_to(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite")
    assert "no toy profiler trace" in analyze(tmp_path).missing


def test_unregistered_the_toy_file_is_not_recognised(corpus, tmp_path):
    (tmp_path / "window.sqlite").symlink_to(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite")
    (tmp_path / "toy-run.txt").write_text("TOYPROF launch init_array\n")
    an = analyze(tmp_path)
    assert {f.instrument for f in an.capture.files} == {"nsys"}
    assert [Path(u["path"]).name for u in an.capture.not_recognised] == ["toy-run.txt"]


def _toy_argv(tool: str, report: Path, command: list[str], **_: object) -> list[str]:
    return [tool, "record", "-o", str(report), *command]


TOY_CAPTURED = reg.Instrument(
    "toycap", reg.LAUNCHES, ("*.toycap",), reg.CUDA, "toyprof", read_toy, "toy profiler, captured",
    switch=reg.Switch(order=50, env=lambda folder: {"TOY_LOG": str(folder / "toy.%p.log")},
                      own_pass=reg.OwnPass("toytool", (), "toytool not found on PATH", _toy_argv)))


def test_a_registered_switch_is_planned_by_kernel(tmp_path):
    """The capture side of the same claim: `forensics kernel`'s plan gives every arm the toy's env and
    runs the toy's own pass after ncu and nsys, with no edit of capture/passes.py."""
    from forensics.capture.passes import Tools, default_instruments, describe_plan, plan_passes

    reg.register(TOY, TOY_CAPTURED, family=TOY_FAMILY)
    try:
        assert default_instruments("cuda") == ("cupti", "cublaslt", "ncu", "nsys", "toycap")
        tools = Tools(ncu="/x/ncu", nsys="/x/nsys", cuda=True, cuda_reason="", other={"toytool": "/x/toytool"})
        plan = plan_passes("gemm:NT:acc0:grad1", ["python", "t.py"], out=tmp_path / "cap", tools=tools)
        text = describe_plan(plan)
    finally:
        reg.unregister(TOY_CAPTURED.name)
        reg.unregister(TOY.name)
    assert [p.name for p in plan.passes] == ["a1", "a2", "ncu", "nsys", "toycap"]
    assert plan.passes[0].env["TOY_LOG"] == str(tmp_path / "cap" / "a1" / "toy.%p.log")
    toy = plan.passes[-1]
    assert toy.argv == ["/x/toytool", "record", "-o", str(tmp_path / "cap" / "toycap" / "window"), "python", "t.py"]
    assert toy.skip_reason is None and "pass toycap (pass of a1)" in text
    assert default_instruments("cuda") == ("cupti", "cublaslt", "ncu", "nsys")  # unregistered: gone


def test_a_registered_binary_form_is_recognised(tmp_path):
    """A toy SQLite export (SYNTHETIC: one table of our choosing) is recognised by its instrument's
    ``content`` (its tables), as nsys's export is; unregistered it is an SQLite file of no instrument."""
    import sqlite3
    from contextlib import closing

    from forensics.instruments.recognise import recognise

    db = tmp_path / "run.db"
    with closing(sqlite3.connect(db)) as c:
        c.execute("CREATE TABLE toy_kernel_dispatch (id INTEGER, name TEXT)")
        c.commit()
    toydb = reg.Instrument("toydb", reg.LAUNCHES, ("*.db",), reg.CUDA, "toyprof", read_toy, "toy database",
                           content=lambda h: "SQLite with the toy's tables" if h.tables and
                           "toy_kernel_dispatch" in h.tables else None)
    assert recognise(db).instrument is None and "without Nsight Systems tables" in recognise(db).why
    reg.register(toydb, family=TOY_FAMILY)
    try:
        seen = recognise(db)
    finally:
        reg.unregister(toydb.name)
    assert (seen.instrument, seen.why) == ("toydb", "SQLite with the toy's tables")


def test_the_cpu_probe_runs_what_the_registry_switches_on():
    """probes/ import nothing above them, so the CPU probe keeps its own list of what it can run: it
    must be the registry's CPU backend (the instruments whose switch names the 'cpu' probe)."""
    from probes import cpu

    assert set(cpu.INSTRUMENTS) == {i.name for i in reg.captured(reg.CPU) if i.switch.probe == "cpu"}
