"""Arm comparison and toggle report on SYNTHETIC capture directories (tests/synthetic_captures.py).

Every capture here is synthetic: real formats (site/CUPTI records as docs/parsers/ describes them, cuBLASLt lines),
made-up values, labelled ``synthetic: true`` in its manifest and README.txt.
"""
from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from forensics.judge.analysis import analyze
from forensics.judge.arm_evidence import load_evidence
from forensics.cli import main
from forensics.core.errors import EXIT_BAD_INPUT, EXIT_NOT_NAMED, EXIT_OK, BadSite
from forensics.judge.verdicts import (
    BITS_DIFFER_KERNEL_UNKNOWN,
    IDENTICAL,
    INPUTS_DIFFER,
    NO_COUNTERPART,
    NO_DIFFERENCE_SEEN,
    NO_DIGEST,
    SAME_KERNEL_DIFFERENT_BITS,
    SELECTION_DIFFERS,
    compare_arms,
    toggle_report,
)
from tests.synthetic_captures import (
    DEFAULT_ALGO,
    SM90_BF16_F32OUT,
    SM90_BF16_SPLITK,
    SPLITK_REDUCE,
    Arm,
    Gemm,
    build_capture,
)

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)


def _every_class() -> list[Gemm]:
    """SYNTHETIC: one occurrence per classification, in this execution order (arm a2 vs a1)."""
    return [
        Gemm("gemm:TN:acc0:grad0", 256, 512, 256),  # #1 IDENTICAL
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512, d_type="float32", kernel=SM90_BF16_F32OUT,
             diverge_in=("a2",)),  # SAME KERNEL, DIFFERENT BITS (the origin)
        Gemm("gemm:NN:acc0:grad1", 256, 512, 256, inputs_differ_in=("a2",)),  # INPUTS DIFFER (receiver)
        Gemm("gemm:TN:acc0:grad0", 256, 512, 256, kernel_in={"a2": SM90_BF16_SPLITK},
             algo_in={"a2": dict(DEFAULT_ALGO, numSplitsK=2, reductionScheme="CUBLASLT_REDUCTION_SCHEME_INPLACE")},
             diverge_in=("a2",)),  # #2 SELECTION DIFFERS
        Gemm("gemm:NT:acc1:grad1", 256, 256, 512, d_type="float32", cupti=False,
             diverge_in=("a2",)),  # BITS DIFFER, KERNEL UNKNOWN
        Gemm("gemm:NN:acc1:grad1", 256, 512, 256, d_type="float32", only_in=("a1",)),  # NO COUNTERPART
        Gemm("gemm:TT:acc0:grad0", 256, 256, 256, no_hash_in=("a2",)),  # NO DIGEST
    ]


@pytest.fixture(scope="module")
def every_class_dir(tmp_path_factory):
    return build_capture(tmp_path_factory.mktemp("every") / "cap", _every_class(), [Arm("a1"), Arm("a2")])


@pytest.fixture(scope="module")
def every_class(every_class_dir):
    """The analysed capture (Evidence), loaded once for the module."""
    return load_evidence(every_class_dir)


def test_capture_is_labelled_synthetic(every_class_dir):
    manifest = yaml.safe_load((every_class_dir / "manifest.yaml").read_text())
    assert manifest["synthetic"] is True
    assert "SYNTHETIC" in (every_class_dir / "README.txt").read_text()


def test_each_classification(every_class):
    pair = compare_arms(every_class).pair("a2")
    assert pair.comparable and pair.reasons == []
    got = dict(zip(pair.occurrences["label"], pair.occurrences["classification"]))
    assert got == {
        "gemm:TN:acc0:grad0#1": IDENTICAL,
        "gemm:NT:acc0:grad1#1": SAME_KERNEL_DIFFERENT_BITS,
        "gemm:NN:acc0:grad1#1": INPUTS_DIFFER,
        "gemm:TN:acc0:grad0#2": SELECTION_DIFFERS,
        "gemm:NT:acc1:grad1#1": BITS_DIFFER_KERNEL_UNKNOWN,
        "gemm:NN:acc1:grad1#1": NO_COUNTERPART,
        "gemm:TT:acc0:grad0#1": NO_DIGEST,
    }
    sel = pair.occurrences.set_index("label").loc["gemm:TN:acc0:grad0#2"]
    assert sel["kernel_baseline"] != sel["kernel_arm"] and "num_splits_k=2" in sel["algo_arm"]
    assert sel["detail"].startswith(f"kernel/grid/block differs: a1 ran {sel['kernel_baseline']} @ ")
    assert f", {pair.arm} ran {sel['kernel_arm']} @ " in sel["detail"] and "; algo differs too" in sel["detail"]
    unknown = pair.occurrences.set_index("label").loc["gemm:NT:acc1:grad1#1"]
    assert pd.isna(unknown["kernel_baseline"]) and "algo descriptor identical" in unknown["detail"]


def test_first_divergence_is_the_origin_in_execution_order(every_class):
    first = compare_arms(every_class).pair("a2").first_divergence
    assert set(first) == {0}
    assert first[0]["label"] == "gemm:NT:acc0:grad1#1"
    assert first[0]["role"] == "origin" and first[0]["classification"] == SAME_KERNEL_DIFFERENT_BITS


def test_first_divergence_per_rank_and_receiver(tmp_path):
    gemms = [  # SYNTHETIC: rank 1 diverges at the first GEMM, rank 0 only receives a bad value later
        Gemm("gemm:TN:acc0:grad0", 256, 512, 256, diverge_in=("a2",), on_ranks=(1,)),
        Gemm("gemm:NN:acc0:grad1", 256, 512, 256, inputs_differ_in=("a2",), on_ranks=(0,)),
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512, diverge_in=("a2",), on_ranks=(0,)),
    ]
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1", ranks=(0, 1)), Arm("a2", ranks=(0, 1))])
    first = compare_arms(cap).pair("a2").first_divergence
    assert first[0]["label"] == "gemm:NN:acc0:grad1#1" and first[0]["role"] == "receiver"
    assert first[1]["label"] == "gemm:TN:acc0:grad0#1" and first[1]["role"] == "origin"


def test_identical_arms_have_no_divergence(tmp_path):
    cap = build_capture(tmp_path / "cap", _every_class()[:1] * 3, [Arm("a1"), Arm("a2")])
    comp = compare_arms(cap)
    assert comp.pair("a2").counts() == {IDENTICAL: 3}
    assert comp.pair("a2").first_divergence == {} and not comp.diverged()


NOT_COMPARABLE = [  # (arm, what the reason must say)
    (Arm("b0", versions={"torch": "2.8.0+cu126"}), "version torch differs"),
    (Arm("b1", command="python other.py"), "command differs"),
    (Arm("b2", world_size=8), "world_size differs"),
    (Arm("b3", env={"NVTE_ALLOW_NONDETERMINISTIC_ALGO": "0"}), "knob NVTE_ALLOW_NONDETERMINISTIC_ALGO differs"),
    (Arm("b4", env={"CUBLAS_WORKSPACE_CONFIG": ":16:8"}, toggle={"TORCH_BLAS_PREFER_CUBLASLT": "1"}),
     "knob CUBLAS_WORKSPACE_CONFIG differs outside the declared toggle"),
]


def test_not_comparable_arms_are_not_diffed(tmp_path):
    cap = build_capture(tmp_path / "cap", _every_class(), [Arm("a1")] + [arm for arm, _ in NOT_COMPARABLE])
    ev = load_evidence(cap)
    comparison, forced = compare_arms(ev), compare_arms(ev, force=True)
    for arm, needle in NOT_COMPARABLE:
        pair = comparison.pair(arm.name)
        assert not pair.comparable, arm.name
        assert any(needle in r for r in pair.reasons), pair.reasons
        assert len(pair.reasons) == 1, pair.reasons  # nothing else is blamed
        assert pair.occurrences.empty and pair.first_divergence == {}
        assert not forced.pair(arm.name).comparable and len(forced.pair(arm.name).occurrences) == 7


def test_instrument_settings_do_not_break_comparability(tmp_path):
    arm = Arm("a2", env={"CUBLASLT_LOG_FILE": "/elsewhere/cublaslt.%i.log", "FORENSICS_CONFIG": "/tmp/x.json"})
    cap = build_capture(tmp_path / "cap", _every_class(), [Arm("a1"), arm])
    assert compare_arms(cap).pair("a2").comparable


def test_site_and_occurrence_filters(every_class):
    occ = compare_arms(every_class, site="gemm:TN:acc0:grad0").pair("a2").occurrences
    assert list(occ["label"]) == ["gemm:TN:acc0:grad0#1", "gemm:TN:acc0:grad0#2"]
    occ = compare_arms(every_class, site="gemm:TN:acc0:grad0#2").pair("a2").occurrences
    assert list(occ["classification"]) == [SELECTION_DIFFERS]
    with pytest.raises(BadSite):
        compare_arms(every_class, site="gemm:XX:acc0:grad1")


def test_accepts_an_analysis_and_ignores_pass_folders(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, extra_kernels=(SPLITK_REDUCE,), diverge_in=("a2",))]
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2"), Arm("kineto", pass_of="a1")])
    comp = compare_arms(analyze(cap))
    assert [p.arm for p in comp.pairs] == ["a2"]  # a pass is not an arm
    row = comp.pair("a2").occurrences.iloc[0]
    assert row["classification"] == SAME_KERNEL_DIFFERENT_BITS
    assert row["kernel_baseline"].count("+") == 1  # main kernel + splitKreduce, not doubled by the pass
    assert len(comp.pair("a2").occurrences) == 1


def _toggle_capture(tmp_path):
    gemms = [  # SYNTHETIC: ws0 changes the wgrad's kernel and algo (split-K); lt1 changes nothing
        Gemm("gemm:TN:acc0:grad0", 256, 512, 256),
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512, d_type="float32", kernel=SM90_BF16_F32OUT,
             diverge_in=("a2", "ws0"), kernel_in={"ws0": SM90_BF16_SPLITK},
             algo_in={"ws0": dict(DEFAULT_ALGO, numSplitsK=4, reductionScheme="CUBLASLT_REDUCTION_SCHEME_INPLACE")}),
    ]
    arms = [Arm("a1"), Arm("a2"), Arm("ws0", toggle={"CUBLAS_WORKSPACE_CONFIG": ":0:0"}),
            Arm("lt1", toggle={"TORCH_BLAS_PREFER_CUBLASLT": "1"})]
    return build_capture(tmp_path / "cap", gemms, arms)


def test_toggle_that_changes_the_kernel_and_one_that_does_not(tmp_path):
    report = toggle_report(_toggle_capture(tmp_path), site="gemm:NT:acc0:grad1")
    ws0, = report.for_knob("CUBLAS_WORKSPACE_CONFIG")
    lt1, = report.for_knob("TORCH_BLAS_PREFER_CUBLASLT")
    assert (ws0.kernel_changed, ws0.algo_changed, ws0.bits_changed) == (True, True, True)
    assert (lt1.kernel_changed, lt1.algo_changed, lt1.bits_changed) == (False, False, False)
    assert ws0.summary() == ("CUBLAS_WORKSPACE_CONFIG=:0:0: kernel CHANGED (a1 ran "
                             "sm90_xmma_gemm_bf16bf16_f32f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
                             "segment_k_off_kernel__5x_cublas, ws0 ran sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize"
                             "64x128x64_warpgroupsize1x1x1_execute_segment_k_on_kernel__5x_cublas), algo CHANGED, bits "
                             "CHANGED (vs a1)")
    assert "kernel unchanged, algo unchanged, bits unchanged" in lt1.summary()
    assert "differ from a1 in 1 occurrence" in ws0.baseline_run_to_run
    per = ws0.occurrences.set_index("label")
    assert bool(per.loc["gemm:NT:acc0:grad1#1", "kernel_changed"]) is True
    json.dumps(report.to_dict())  # machine-readable for `forensics knob`


def test_toggle_unknown_when_not_captured(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, cupti=False, cublaslt=False)]  # SYNTHETIC: digests only
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("t", toggle={"NVTE_EXT_MARGIN_SM": "8"})])
    res, = toggle_report(cap).results
    assert res.kernel_changed is None and res.algo_changed is None and res.bits_changed is False
    assert "kernel unknown, algo unknown, bits unchanged" in res.summary()


def test_toggle_names_filter_and_non_comparable_toggle(tmp_path):
    arms = [Arm("a1"), Arm("t", toggle={"NVTE_EXT_MARGIN_SM": "8"}, versions={"cublas": "12.9.1.4"})]
    cap = build_capture(tmp_path / "cap", _every_class()[:2], arms)
    report = toggle_report(cap)
    assert report.for_knob("CUBLAS_WORKSPACE_CONFIG") == []
    res, = report.for_knob("NVTE_EXT_MARGIN_SM")
    assert not res.comparable and "NOT COMPARABLE" in res.summary() and "cublas" in res.summary()
    assert toggle_report(cap, names=["OTHER"]).results == []


def test_compare_cli(every_class_dir, tmp_path, capsys):
    out = tmp_path / "compare.json"
    assert main(["compare", str(every_class_dir), "--json", str(out)]) == EXIT_NOT_NAMED  # a divergence
    text = capsys.readouterr().out
    assert "a2 (replica) vs a1:" in text
    assert "rank 0: first divergence gemm:NT:acc0:grad1#1: SAME KERNEL, DIFFERENT BITS (origin)" in text
    data = json.loads(out.read_text())
    assert data["comparison"]["pairs"][0]["first_divergence"]["0"]["role"] == "origin"
    assert main(["compare", str(every_class_dir), "--json", str(out)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "exists" in err
    assert main(["compare", str(every_class_dir), "--site", "gemm:TN:acc0:grad0#1"]) == EXIT_OK


# --------------------------------------------------------------------------- evidence of equality
def test_equal_xor_digests_are_no_difference_seen_never_identical(tmp_path):
    """SYNTHETIC: torch.hash_tensor (an XOR of the bits) alone cannot prove two outputs equal."""
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, xor_only_in=("a1", "a2", "t")),  # older records: hash only
             Gemm("gemm:NT:acc0:grad1", 256, 256, 512, xor_only_in=("a2",)),  # one side has no ohash
             Gemm("gemm:NN:acc0:grad1", 256, 512, 256, xor_only_in=("a1", "a2", "t"), diverge_in=("a2",)),
             Gemm("gemm:TT:acc0:grad0", 256, 256, 256)]  # ohash on both sides: proven
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2"), Arm("t", toggle={"NVTE_EXT_MARGIN_SM": "8"})])
    pair = compare_arms(cap).pair("a2")
    got = dict(zip(pair.occurrences["label"], pair.occurrences["classification"]))
    assert got == {"gemm:TN:acc0:grad0#1": NO_DIFFERENCE_SEEN, "gemm:NT:acc0:grad1#1": NO_DIFFERENCE_SEEN,
                   "gemm:NN:acc0:grad1#1": SAME_KERNEL_DIFFERENT_BITS,
                   "gemm:TT:acc0:grad0#1": IDENTICAL}
    first = pair.first_divergence[0]
    assert first["label"] == "gemm:NN:acc0:grad1#1" and first["role"] == "origin, unproven"
    assert "inputs equal by an order-independent digest only (unproven)" in first["detail"]
    tog, = toggle_report(cap).results
    assert tog.bits_changed is False and not tog.bits_unchanged_proven
    assert "bits: no change seen (order-independent digests only: unproven)" in tog.summary()
    assert "bits unchanged" not in tog.summary()


def test_a_permutation_is_caught_by_the_order_sensitive_digest(tmp_path):
    """SYNTHETIC: same XOR hash, different ohash (the arm's output is a permutation): bits differ, proven."""
    gemms = [Gemm("gemm:NT:acc0:grad1", 256, 256, 512, permuted_in=("a2",))]
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")])
    occ = compare_arms(cap).pair("a2").occurrences.iloc[0]
    assert occ["classification"] == SAME_KERNEL_DIFFERENT_BITS and bool(occ["bits_differ"]) and bool(occ["bits_proven"])
    assert compare_arms(cap).pair("a2").first_divergence[0]["role"] == "origin"


def test_cli_never_says_identical_on_xor_digests(tmp_path, capsys):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, xor_only_in=("a1", "a2"))]
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")])
    assert main(["compare", str(cap)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "a2 (replica) vs a1: NO DIFFERENCE SEEN 1" in out and "IDENTICAL" not in out
