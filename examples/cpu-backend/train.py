"""Two tiny CPU training jobs for ``forensics kernel --device cpu`` (docs/cpu-backend.md).

``--model conv1d``: a 1x1 ``Conv1d`` over a batch of 4 (< 16). PyTorch picks the convolution
implementation from the intra-op thread count (pytorch/pytorch#116369): with one thread the thnn
path (``aten::_slow_conv2d_forward``, one oneMKL ``SGEMM`` per sample), with two the oneDNN path
(``aten::mkldnn_convolution``, a ``jit_1x1`` primitive)::

    OMP_NUM_THREADS=1 forensics kernel --device cpu --site aten.convolution.default \\
        --toggle OMP_NUM_THREADS=2 -- python examples/cpu-backend/train.py --model conv1d

``--model mm``: a two-layer MLP written with ``torch.mm`` (every GEMM is an ``aten.mm`` call that
oneMKL serves as ``SGEMM``); ``MKL_CBWR`` sets oneMKL's conditional-numerical-reproducibility
branch, which its verbose log prints on every call (``CNR:...``)::

    forensics kernel --device cpu --site aten.mm.default --toggle MKL_CBWR=COMPATIBLE \\
        -- python examples/cpu-backend/train.py --model mm

Seeds, data and sizes are fixed; nothing here reads an environment variable itself (the thread
count comes from ``OMP_NUM_THREADS`` through torch, the CNR branch from ``MKL_CBWR`` through oneMKL).
"""
from __future__ import annotations

import argparse

import torch


def conv1d_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv1d(8, 16, kernel_size=1), torch.nn.ReLU(), torch.nn.Conv1d(16, 4, 1))


class MLP(torch.nn.Module):
    """y = relu(x W1^T) W2^T with explicit ``torch.mm`` calls."""

    def __init__(self, d_in: int = 32, d_hidden: int = 64, d_out: int = 8):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(d_hidden, d_in) * 0.1)
        self.w2 = torch.nn.Parameter(torch.randn(d_out, d_hidden) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(torch.relu(torch.mm(x, self.w1.t())), self.w2.t())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("conv1d", "mm"), default="conv1d")
    p.add_argument("--steps", type=int, default=4, help="optimizer steps (the capture window defaults to steps 1-2)")
    a = p.parse_args()
    torch.manual_seed(0)
    if a.model == "conv1d":
        model = conv1d_model()
        x, target = torch.randn(4, 8, 8), torch.randn(4, 4, 8)
    else:
        model = MLP()
        x, target = torch.randn(16, 32), torch.randn(16, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(a.steps):
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        print(f"step {step} loss={loss.item():.10f}", flush=True)
        opt.step()
    print(f"model={a.model} threads={torch.get_num_threads()} loss={loss.item():.10f}")


if __name__ == "__main__":
    main()
