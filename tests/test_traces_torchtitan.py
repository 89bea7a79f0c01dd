"""torchtitan's numerics activation logs (``--profiler.dump_numerics``) read by ``forensics diff``.

The shipped logs are real output of torchtitan's own tracer (tests/fixtures/torchtitan-numerics/
PROVENANCE.md); only the malformed cases are SYNTHETIC mutations of them. With
FORENSICS_TORCHTITAN_TRACER pointing at torchtitan's activation_tracer.py, a pair is also made live.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.tracediff.diff import diff_paths
from forensics.tracediff.traces import detect_format
from forensics.tracediff.traces import torchtitan as tt

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "torchtitan-numerics"
SAVE_LOGS = REPO / "tests" / "fixtures" / "debugmode-save-logs"


def test_the_shipped_pair_names_the_wgrad_mm_the_debugmode_files_name():
    assert detect_format(FIX / "a") == "torchtitan"
    report = diff_paths(FIX / "a", FIX / "b")
    d = report.ranks[0].first_divergence
    assert (d.verdict, d.identity, d.evidence, d.phase) == ("ORIGIN", "mm:3", "unproven", "backward")
    assert report.lacks == list(tt.LACKS)
    # the same program recorded by DebugMode: the same op, the same occurrence
    dm = diff_paths(SAVE_LOGS / "a", SAVE_LOGS / "b").ranks[0].first_divergence
    assert dm.identity == "aten.mm.default:3" and dm.identity.split(".")[1] == d.identity.split(":")[0]
    assert dm.identity.rsplit(":", 1)[1] == d.identity.rsplit(":", 1)[1]


def test_a_byte_identical_rerun_is_no_divergence_seen(capsys):
    assert main(["diff", str(FIX / "a"), str(FIX / "same")]) == 0
    out = capsys.readouterr().out
    assert "no divergence seen (not proven" in out and "lacks a digest of the bits" in out


def test_records_keep_module_phase_and_location():
    recs = tt.read_log(FIX / "a" / "numerics" / "rank_0_activations.log")
    assert len(recs) == 14 and recs[0].identity == "addmm:1" and recs[0].extra["module"] == "0"
    mm3 = next(r for r in recs if r.identity == "mm:3")
    assert mm3.extra["key"] == "0/op_1_mm" and mm3.phase == "backward"
    assert mm3.outputs[0].shape == (512, 256) and mm3.outputs[0].evidence == "summary"
    assert len(mm3.inputs) == 2 and all(t.evidence == "summary" for t in mm3.inputs)


@pytest.mark.parametrize("mutation, words", [
    (lambda t: t[: t.rindex("[<none>")], "declares 14 activation"),
    (lambda t: t.replace("Output hash: 9.664464e+05", "Output hash: nine", 1), "not a number"),
    (lambda t: t.replace("  L2 norm:", "  L3 norm:", 1), "unknown field 'L3 norm'"),
])
def test_a_damaged_log_is_bad_input_naming_file_and_line(tmp_path, capsys, mutation, words):
    """SYNTHETIC: mutations of the real baseline log."""
    bad = tmp_path / "rank_0_activations.log"
    bad.write_text(mutation((FIX / "a" / "numerics" / "rank_0_activations.log").read_text()))
    with pytest.raises(BadInput, match=words) as e:
        tt.read_log(bad)
    assert str(e.value).startswith(f"{bad}:")
    assert main(["diff", str(tmp_path), str(FIX / "b"), "--format", "torchtitan"]) == 3
    assert capsys.readouterr().err.count("\n") == 1


TRACER = os.environ.get("FORENSICS_TORCHTITAN_TRACER")


@pytest.mark.skipif(not TRACER, reason="FORENSICS_TORCHTITAN_TRACER (torchtitan's activation_tracer.py) not set")
def test_a_live_pair_from_torchtitans_tracer(tmp_path):
    script = REPO / "tests" / "data" / "scripts" / "torchtitan_numerics.py"
    procs = [subprocess.Popen([sys.executable, str(script), TRACER, str(tmp_path / k), "--threads", t],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k, t in (("a", "1"), ("b", "2"))]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    d = diff_paths(tmp_path / "a", tmp_path / "b").ranks[0].first_divergence
    assert (d.verdict, d.identity) == ("ORIGIN", "mm:3")
