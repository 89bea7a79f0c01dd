"""Workload for the op tracer tests: a reduction whose bits depend on the intra-op thread count.

``--threads N`` sets torch.set_num_threads(N). A float32 sum over 4M elements is split across
threads, so 1 vs 2 threads changes the summation order (verified: torch 2.13 CPU); every op
before it (randn, mul, add, mm) gives the same bits. ``--empty`` adds a padding buffer from
torch.empty (uninitialised, differs between processes) that is concatenated and sliced away.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--empty", action="store_true")
p.add_argument("--steps", type=int, default=2)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)

model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
big = torch.randn(1 << 22)
for _ in range(args.steps):
    x = torch.randn(32, 64)
    h = model(x).relu()
    if args.empty:
        pad = torch.empty(5000)  # uninitialised: whatever the allocator left there
        h = torch.cat([h.reshape(-1), pad])[: 32 * 64].reshape(32, 64)
    scale = big.sum() * 1e-3  # thread-count-dependent summation order (1 vs 2 threads differ)
    loss = (h * scale).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"loss {loss.item():.10f}")
