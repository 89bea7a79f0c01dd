"""The cuBLASLt algo descriptor is defined once (parsers/cublaslt_grammar.ALGO_COLUMNS) and every
reader of it has all ten columns: the arm verdict compares scheduling_mode and inner_shape too.

The line read is real (tests/data/cublaslt/real_lines.log line 4: NVFP4 on B200 from Transformer
Engine, whose algo block prints ``schedulingMode=0``; provenance in tests/data/cublaslt/README.md).
"""
from __future__ import annotations

from pathlib import Path

from forensics import instruments
from forensics.evidence import bundle, repro
from forensics.judge import arm_evidence, verdicts
from forensics.sweep import table
from parsers import cublaslt
from parsers.cublaslt_grammar import ALGO_COLUMNS

REAL = Path(__file__).parent / "data" / "cublaslt" / "real_lines.log"


def test_one_definition_everyone_reads():
    assert len(ALGO_COLUMNS) == 10 and {"scheduling_mode", "inner_shape"} <= set(ALGO_COLUMNS)
    assert list(cublaslt.ALGO_COLUMNS) == list(ALGO_COLUMNS)
    assert instruments.get("cublaslt").algo_columns == ALGO_COLUMNS
    assert arm_evidence.ALGO_COLUMNS[:10] == list(ALGO_COLUMNS)  # the arm verdict's (then the CPU logs')
    assert bundle.ALGO_COLUMNS == list(ALGO_COLUMNS)
    assert tuple(repro.ALGO_KEYS) == ALGO_COLUMNS
    assert tuple(table.ALGO_FIELDS["cublaslt"]) == ALGO_COLUMNS


def test_the_arm_verdict_sees_a_scheduling_mode_a_real_log_prints():
    row = cublaslt.read_calls(REAL).iloc[3].to_dict()
    assert row["scheduling_mode"] == "0" and row["cluster_shape"] == "CLUSTER_SHAPE_2x1x1"
    sig = verdicts.algo_signature([row])
    assert "scheduling_mode=0" in verdicts._algo_text(sig)
    other = {**row, "scheduling_mode": "1"}  # SYNTHETIC: the same call with another scheduling mode
    assert verdicts.algo_signature([other]) != sig
