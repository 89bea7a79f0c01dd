"""An in-place GEMM on the CPU backend, for real: ``main_grad.addmm_(dy.t(), x)`` (a wgrad accumulated
into a main grad) runs one oneMKL SGEMM under the profiler op ``aten::addmm_``, no ``aten::addmm``
below it. core/cpu_ops.py's sets lacked the in-place variants (core/ops.GEMM had them): the profiler
column read '-' and the site SINGLE-SOURCE; both instruments now see it and agree on who ran."""
from __future__ import annotations

import sys

import pytest

from forensics.cli import main
from forensics.core.cpu_ops import check_op, is_implementation_op, op_kind, serves_mkl
from forensics.core.kernel_names import CONSISTENT
from forensics.judge.analysis import NAMED, analyze

SITE = "aten.addmm_.default"
PROGRAM = '''import torch

torch.manual_seed(0)
torch.set_num_threads(1)
x, dy = torch.randn(256, 128), torch.randn(256, 64)
main_grad = torch.zeros(64, 128)
for step in range(2):
    main_grad.addmm_(dy.t(), x)
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1).step()
print(float(main_grad.sum()))
'''


@pytest.mark.parametrize("op", ["aten::addmm_", "aten::baddbmm_", "aten::addbmm_"])
def test_in_place_gemms_are_implementation_ops(op):
    assert serves_mkl(op) and is_implementation_op(op) and op_kind(op) == "gemm"


def test_in_place_addmm_problem_size_and_layout_are_checked():
    """The shapes and strides a profiler row carries for addmm_(self, dy.t(), x) vs the SGEMM line."""
    launch = {"kernel": "aten::addmm_", "input_dims": [[64, 128], [64, 256], [256, 128], [], []],
              "input_strides": [[128, 1], [1, 64], [128, 1], [], []], "input_types": ["float"] * 3}
    call = {"routine": "SGEMM", "transa": "N", "transb": "T", "m": 128, "n": 64, "k": 256}
    checks = {c.field: c.status for c in check_op(launch, [call], "mkl")}
    assert checks["problem size"] == CONSISTENT and checks["layout"] == CONSISTENT, checks


@pytest.mark.slow
def test_in_place_wgrad_is_named_by_profiler_and_onemkl(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(PROGRAM)
    out = tmp_path / "cap"
    code = main(["kernel", "--device", "cpu", "--site", SITE, "--steps", "0", "--out", str(out), "-q",
                 "--timeout", "300", "--", sys.executable, str(script)])
    text = capsys.readouterr().out
    assert code == 0 and "verdict: 1 implementation(s) NAMED" in text, text
    rows = analyze(out, site=SITE).verdicts
    assert set(rows["verdict"]) == {NAMED} and set(rows["kernel"]) == {"aten::addmm_"} and len(rows) == 2
    for reason in rows["reason"]:  # who ran, not only how often
        assert "checked: operation, problem size, layout, precision" in reason and "SGEMM(N,T,128,64,256)" in reason
