"""The bundled example: a Transformer-Engine-style bf16 linear layer trained for a few steps.

``forensics kernel --site gemm:NT:acc0:grad1`` with no command runs this. Every GEMM is an
explicit aten call, so each one is a site in TE's naming:

=========================  ==========================  =====================
GEMM                        PyTorch call                 site
=========================  ==========================  =====================
fprop   y  = x W^T          ``mm(x, W.t())``             ``gemm:TN:acc0:grad0``
dgrad   dx = dy W           ``mm(dy, W)``                ``gemm:NN:acc0:grad1``
wgrad   dW = dy^T x         ``mm(dy.t(), x)``            ``gemm:NT:acc0:grad1``
wgrad into fp32 main_grad   ``main_grad.addmm_(dy.t(), x)``  ``gemm:NT:acc1:grad1``
=========================  ==========================  =====================

Layer 1 returns its weight gradient (plain wgrad), layer 2 accumulates it into an fp32
``main_grad`` (TE's ``fuse_wgrad_accumulation``); an SGD step follows each iteration, which is
what advances the probes' step window. On CUDA the layers are bf16. ``--cpu`` runs the same
logic on the CPU at a small size, in fp32 by default: the CPU backend's example (``forensics
kernel --device cpu`` with no command), whose GEMMs the wheel's oneMKL serves as ``SGEMM``
(bf16 GEMMs on a CPU without AVX512-BF16 run in native ATen kernels that no library log sees:
``--dtype bfloat16`` shows that honestly as SINGLE-SOURCE).
"""
from __future__ import annotations

import argparse
import sys

EXIT_UNAVAILABLE = 4


def build(torch, dev: str, hidden: int, dtype=None):  # noqa: ANN001
    """The two layers' weights (bf16 unless ``dtype``) and layer 2's fp32 main_grad."""
    dtype = dtype or torch.bfloat16
    g = torch.Generator(device="cpu").manual_seed(0)
    w1 = torch.nn.Parameter((torch.randn(hidden, hidden, generator=g) * 0.02).to(dev, dtype))
    w2 = torch.nn.Parameter((torch.randn(hidden, hidden, generator=g) * 0.02).to(dev, dtype))
    w2.main_grad = torch.zeros(hidden, hidden, device=dev, dtype=torch.float32)
    return w1, w2


def make_linear(torch):  # noqa: ANN001
    class TELinear(torch.autograd.Function):
        """y = x W^T with TE's three GEMMs; ``fuse`` accumulates wgrad into ``weight.main_grad``."""

        @staticmethod
        def forward(ctx, x, weight, fuse: bool):  # noqa: ANN001
            ctx.save_for_backward(x, weight)
            ctx.fuse = fuse
            return torch.mm(x, weight.t())  # fprop: gemm:TN:acc0:grad0

        @staticmethod
        def backward(ctx, dy):  # noqa: ANN001
            x, weight = ctx.saved_tensors
            dy = dy.contiguous()
            dx = torch.mm(dy, weight) if ctx.needs_input_grad[0] else None  # dgrad: gemm:NN:acc0:grad1
            if ctx.fuse:
                # wgrad into the fp32 main grad, beta = 1: gemm:NT:acc1:grad1
                weight.main_grad.addmm_(dy.t().float(), x.float())
                return dx, None, None
            return dx, torch.mm(dy.t(), x), None  # wgrad: gemm:NT:acc0:grad1

    return TELinear


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m forensics.capture.example_workload", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=4, help="training steps (the probes' window defaults to 1-2)")
    p.add_argument("--tokens", type=int, default=None, help="rows of x (default 2048 on CUDA, 64 on --cpu)")
    p.add_argument("--hidden", type=int, default=None, help="layer width (default 4096 on CUDA, 32 on --cpu)")
    p.add_argument("--cpu", action="store_true", help="run on the CPU at a small size (the CPU backend's example)")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default=None,
                   help="layer dtype (default bfloat16 on CUDA, float32 on --cpu)")
    a = p.parse_args(argv)
    import torch

    if not a.cpu and not torch.cuda.is_available():
        sys.stderr.write("forensics example: no CUDA device; use --cpu to run it on the CPU (what `forensics kernel "
                         "--device cpu` does with no command)\n")
        return EXIT_UNAVAILABLE
    dev = "cpu" if a.cpu else "cuda"
    tokens = a.tokens or (64 if a.cpu else 2048)
    hidden = a.hidden or (32 if a.cpu else 4096)
    dtype = getattr(torch, a.dtype or ("float32" if a.cpu else "bfloat16"))
    w1, w2 = build(torch, dev, hidden, dtype)
    linear = make_linear(torch)
    opt = torch.optim.SGD([w1, w2], lr=1e-3)
    for step in range(a.steps):
        g = torch.Generator(device="cpu").manual_seed(1000 + step)
        x = torch.randn(tokens, hidden, generator=g).to(dev, dtype).requires_grad_(False)
        h = linear.apply(x, w1, False)
        y = linear.apply(h, w2, True)
        loss = y.float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        w2.grad = w2.main_grad.to(dtype)  # the optimizer reads the fp32 accumulation
        opt.step()
        w2.main_grad.zero_()
    if dev == "cuda":
        torch.cuda.synchronize()
    print(f"example workload: {a.steps} steps on {dev} ({str(dtype).replace('torch.', '')}), loss {loss.item():.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
