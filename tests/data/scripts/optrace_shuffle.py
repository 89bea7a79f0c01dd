"""Workload for the permutation-only case: the data order comes from ``--seed`` (a sampler
reseeding the default generator before its torch.randperm), everything else from seed 0. The permutation holds the same integers in another
order, so its whole-tensor XOR digest is identical in both runs; only per-chunk digests see it.
Downstream, per-row ops on permuted rows keep the XOR too, until a reduction over the batch mixes
rows in another order.
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
data = torch.randn(256, 16)
model = torch.nn.Linear(16, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
torch.manual_seed(args.seed)  # the sampler's epoch seed
order = torch.randperm(256)
batch = data[order]
loss = model(batch).pow(2).mean()
opt.zero_grad()
loss.backward()
opt.step()
print(f"loss {loss.item():.10f}")
