"""A tiny CPU training job whose bits depend on the thread count (a real CPU source of difference).

    forensics trace --out runA -- python examples/cpu-divergence/train.py --threads 1
    forensics trace --out runB -- python examples/cpu-divergence/train.py --threads 2
    forensics diff runA runB

The float reductions inside the GEMMs are blocked differently with 1 and 2 threads, so the first
op whose inputs match and whose output differs is a backward GEMM (a wgrad): the differ names it.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=3)
args = p.parse_args()

torch.manual_seed(0)
torch.set_num_threads(args.threads)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4096, 256)
y = torch.randint(0, 10, (4096,))
for _ in range(args.steps):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"threads={args.threads} loss={loss.item():.10f}")
