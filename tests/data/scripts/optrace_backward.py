"""Workload whose first difference is in the backward pass: ``y = x * v`` with a 1-element ``v``
broadcast over 4M elements, then ``y.backward(g)``. The gradient of ``v`` is a float32 sum over 4M
elements (g = 1), whose summation order depends on the intra-op thread count (``--threads``; 1 vs 2
differ on torch 2.13 CPU); nothing in the forward pass reduces.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
x = torch.randn(1 << 22)
g = torch.ones(1 << 22)  # dL/dy = 1: grad(v) = x.sum(), a 4M-element float32 reduction
v = torch.ones(1, requires_grad=True)
y = x * v
y.backward(g)
print(f"grad {v.grad.item():.10f}")
