"""Discriminator tables on SYNTHETIC capture directories (tests/synthetic_captures.py).

A worked example of the method (docs/method.md): the break lives in the
fp32-output wgrad GEMM. The synthetic scenario keeps every other axis MIXED so the separating
axis is known in advance: ``output dtype``.
"""
from __future__ import annotations

import json

from forensics.judge.arm_evidence import load_evidence
from forensics.judge.verdicts import CLEAN, DIVERGENT, MIXED, discriminator_table
from tests.synthetic_captures import SM90_BF16_F32OUT, SPLITK_REDUCE, Arm, Gemm, build_capture, wgrad_scenario


def _cells(table):
    return {(r["axis"], r["value"]): (r["verdict"], r["clean"], r["divergent"]) for r in table.cells.to_dict("records")}


def test_output_dtype_is_the_only_separating_axis(tmp_path):
    cap = build_capture(tmp_path / "cap", wgrad_scenario(), [Arm("a1"), Arm("a2")])
    table = discriminator_table(cap)
    assert table.separating == ["output dtype"]
    cells = _cells(table)
    assert cells[("output dtype", "float32")] == (DIVERGENT, 0, 4)
    assert cells[("output dtype", "bfloat16")] == (CLEAN, 3, 0)
    assert cells[("layout", "NT")] == (MIXED, 1, 2)
    assert cells[("accumulate", "1")][0] == DIVERGENT  # pure, but accumulate=0 is MIXED: not separating
    assert cells[("kernel family", "sm90_xmma")][0] == MIXED
    assert table.statement.startswith("The discriminator is output dtype: float32 DIVERGENT, bfloat16 CLEAN")
    rows = table.rows()
    assert len(rows) == 7 and set(rows["verdict"]) == {CLEAN, DIVERGENT}
    json.dumps(table.to_dict())


def test_site_held_fixed(tmp_path):
    cap = build_capture(tmp_path / "cap", wgrad_scenario(), [Arm("a1"), Arm("a2")])
    table = discriminator_table(cap, site="gemm:NT:acc0:grad1")
    assert set(table.instances["site"]) == {"gemm:NT:acc0:grad1"}
    assert len(table.instances) == 2
    assert "output dtype" in table.separating
    assert _cells(table)[("layout", "NT")] == (MIXED, 1, 1)


def test_confounded_axes_are_reported_as_such(tmp_path):
    gemms = [  # SYNTHETIC: fp32 output always comes with split-K + a reduce kernel: two axes separate
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512),
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512, d_type="float32", kernel=SM90_BF16_F32OUT,
             extra_kernels=(SPLITK_REDUCE,), algo={"algoId": 66, "tile": "MATMUL_TILE_128x128",
                                                   "stages": "MATMUL_STAGES_64xAUTO", "numSplitsK": 4,
                                                   "reductionScheme": "CUBLASLT_REDUCTION_SCHEME_INPLACE"},
             diverge_in=("a2",)),
    ]
    table = discriminator_table(build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")]))
    assert {"output dtype", "splitK", "reduction", "kernel family"} <= set(table.separating)
    assert "confounded" in table.statement
    assert _cells(table)[("kernel family", "sm90_xmma+splitKreduce")][0] == DIVERGENT


def test_no_divergence_and_receivers_excluded(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256),
             Gemm("gemm:NN:acc0:grad1", 256, 512, 256, inputs_differ_in=("a2",))]  # SYNTHETIC receiver
    table = discriminator_table(build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")]))
    assert table.separating == []
    assert table.statement.startswith("No divergent instance among 1 clean")
    assert list(table.instances["status"]) == [CLEAN, "excluded"]


def test_toggle_arms_are_not_instances(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, diverge_in=("t",))]  # SYNTHETIC
    ev = load_evidence(build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2"),
                                                                Arm("t", toggle={"NVTE_EXT_MARGIN_SM": "8"})]))
    table = discriminator_table(ev)
    assert list(table.instances["pair"]) == ["a1/a2"] and list(table.instances["status"]) == [CLEAN]


def test_unknown_axis_values_without_instruments(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, cupti=False, cublaslt=False),
             Gemm("gemm:TN:acc0:grad0", 256, 512, 256, d_type="float32", cupti=False, cublaslt=False,
                  diverge_in=("a2",))]  # SYNTHETIC: digests only
    table = discriminator_table(build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")]))
    cells = _cells(table)
    assert cells[("kernel family", "unknown")][0] == MIXED
    assert cells[("m/n/k", "out 512x256")][0] == MIXED  # from the output digest's shape
    assert table.separating == ["output dtype"]
