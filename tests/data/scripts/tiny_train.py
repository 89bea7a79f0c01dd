"""A small CPU training script for probe tests (runs alone or under torchrun with gloo).

Each step: y = x W^T (fprop, gemm:TN:acc0:grad0), backward dgrad dx = dy W (gemm:NN:acc0:grad1,
only when x requires grad: the second layer's input) and wgrad dW = dy^T x (gemm:NT:acc0:grad1),
for two bias-free linear layers, then an SGD step. Per step and rank: 2 TN fprop, 1 NN dgrad,
2 NT wgrad. With --world-size > 1 (torchrun) gradients are all-reduced with gloo.
"""
import argparse
import os

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
a = p.parse_args()

distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
if distributed:
    import torch.distributed as dist

    dist.init_process_group("gloo")
torch.manual_seed(0)
w1 = torch.nn.Parameter(torch.randn(16, 8) * 0.1)
w2 = torch.nn.Parameter(torch.randn(4, 16) * 0.1)
opt = torch.optim.SGD([w1, w2], lr=0.1)
for step in range(a.steps):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(32, 8, generator=g)
    h = F.linear(x, w1)  # mm(x, w1.t()): TN fprop
    y = F.linear(torch.relu(h), w2)  # TN fprop
    loss = (y.float() ** 2).mean()
    opt.zero_grad()
    loss.backward()  # w2: NT wgrad + NN dgrad; w1: NT wgrad
    if distributed:
        for w in (w1, w2):
            dist.all_reduce(w.grad)
    opt.step()
if distributed:
    dist.destroy_process_group()
print("done", os.environ.get("RANK", "0"))
