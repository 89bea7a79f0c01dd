"""repro.py generation: problem descriptors from captured records (SYNTHETIC digests and cuBLASLt rows).

The generated script is executed in-process here (its functions, not ``main``); test_bundle.py runs
a bundle's repro.py on the CPU in a subprocess as a new user would.
"""
from __future__ import annotations

import pytest
import torch

from forensics.evidence.repro import GemmProblem, gemm_problem, render_repro, repro_knobs
from tests.synthetic_captures import Gemm, operand_shapes


def _site_row(g: Gemm) -> dict:
    """SYNTHETIC site record digests for one GEMM, in the site-record digest shape (docs/parsers/sites-jsonl.md)."""
    a, b, d = operand_shapes(g)
    ins = [{"shape": list(a), "dtype": g.a_type, "numel": a[0] * a[1], "hash": 1},
           {"shape": list(b), "dtype": g.a_type, "numel": b[0] * b[1], "hash": 2}]
    return {"in_digests": ins, "out_digests": [{"shape": list(d), "dtype": g.d_type, "numel": d[0] * d[1], "hash": 3}]}


def _load(problem: GemmProblem, knobs: dict | None = None) -> dict:
    namespace: dict = {"__name__": "repro_under_test"}
    exec(compile(render_repro(problem, knobs or {}, "a1", "cap", problem.label), "repro.py", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("site, m, n, k", [("gemm:TN:acc0:grad0", 48, 32, 16), ("gemm:NN:acc0:grad1", 16, 32, 48),
                                          ("gemm:NT:acc0:grad1", 16, 48, 32)])
def test_problem_from_digests_matches_captured_shapes(site, m, n, k):
    g = Gemm(site, m, n, k)
    p = gemm_problem(f"{site}#1", _site_row(g), None, "NVIDIA H200")
    assert (p.m, p.n, p.k, p.transa + p.transb) == (m, n, k, site.split(":")[1])
    assert [p.a_shape, p.b_shape] == [d["shape"] for d in _site_row(g)["in_digests"]]
    assert p.source == "site digests" and p.out_shape == [n, m]


def test_problem_from_cublaslt_call_wins_over_digests():
    g = Gemm("gemm:NT:acc1:grad1", 16, 48, 32, d_type="float32")
    call = {"m": 16, "n": 48, "k": 32, "transa": "N", "transb": "T", "a_type": "R_16BF", "b_type": "R_16BF",
            "c_type": "R_32F", "d_type": "R_32F", "compute_type": "COMPUTE_32F", "beta": "1", "algo_id": 66,
            "tile": "MATMUL_TILE_128x128", "num_splits_k": None}
    p = gemm_problem("gemm:NT:acc1:grad1#1", _site_row(g), call)
    assert p.source == "cuBLASLt log" and p.out_dtype == "float32" and p.a_dtype == "bfloat16"
    assert p.accumulate is True and p.algo == {"algo_id": "66", "tile": "MATMUL_TILE_128x128"}


def test_wgrad_layout_is_dy_transposed_times_x():
    """NT wgrad: dW(n, m) = dy^T @ x with x (k, m) and dy (k, n), the campaign's wgrad."""
    g = Gemm("gemm:NT:acc0:grad1", 16, 24, 40, a_type="float32", d_type="float32")
    ns = _load(gemm_problem("gemm:NT:acc0:grad1#1", _site_row(g)))
    am, bm, c = ns["operands"](torch.device("cpu"), 0)
    x, dy = am, bm.t()  # stored operands: x (k, m), dy (k, n)
    assert list(x.shape) == [40, 16] and list(dy.shape) == [40, 24] and not bm.is_contiguous()
    d, notes = ns["gemm"](am, bm, c)
    torch.testing.assert_close(d, dy.t() @ x)
    assert notes == []


def test_mixed_output_dtype_and_accumulate_are_said_when_emulated():
    g = Gemm("gemm:NT:acc1:grad1", 16, 24, 40, d_type="float32")
    ns = _load(gemm_problem("gemm:NT:acc1:grad1#1", _site_row(g)))
    am, bm, c = ns["operands"](torch.device("cpu"), 0)
    d, notes = ns["gemm"](am, bm, c)
    assert d.dtype == torch.float32 and list(d.shape) == [24, 16]
    torch.testing.assert_close(d, c + bm.float() @ am.float(), rtol=1e-2, atol=1e-2)
    assert any("accumulate" in n for n in notes)
    assert ns["digest"](d) == ns["digest"](d.clone())
    # order-sensitive: a permutation of the same elements (same torch.hash_tensor) is a different result
    assert ns["digest"](d) != ns["digest"](d.flip(0))


def test_knobs_set_before_torch_and_instrument_settings_dropped():
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "CUBLASLT_LOG_LEVEL": "5", "CUBLASLT_LOG_FILE": "/x/%i.log",
           "FORENSICS_CONFIG": "/tmp/p.json", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz", "NVTE_FLASH_ATTN": "0",
           "HOME": "/root"}
    knobs = repro_knobs(env)
    assert knobs == {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NVTE_FLASH_ATTN": "0"}
    g = Gemm("gemm:TN:acc0:grad0", 16, 24, 40)
    src = render_repro(gemm_problem("gemm:TN:acc0:grad0#1", _site_row(g)), knobs, "a1", "cap", "x")
    assert src.index("os.environ[_name] = _value") < src.index("import torch")
    assert "'CUBLAS_WORKSPACE_CONFIG': ':4096:8'" in src


def test_non_gemm_site_gets_an_honest_stub():
    row = {"in_digests": [{"shape": [8], "dtype": "int64", "hash": 1}], "out_digests": [{"shape": [4], "hash": 2}]}
    assert gemm_problem("index_add:acc1:grad0#1", row) is None
    src = render_repro(None, {}, "a1", "cap", "index_add:acc1:grad0#1")
    assert "no problem descriptor was captured" in src
    compile(src, "repro.py", "exec")
