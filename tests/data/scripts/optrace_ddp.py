"""Two-rank gloo workload for the op tracer: data-parallel SGD with a hand-written grad all_reduce.

``--threads N`` applies to rank 0 only (rank 1 always uses 1 thread); ``--threads 0`` leaves every
rank's thread count to ``OMP_NUM_THREADS`` (a knob flipped on all ranks). Rank 0's loss scale is a
float32 sum over 4M elements whose summation order depends on the thread count (verified on
torch 2.13 CPU), so 1 vs 2 threads changes rank 0's values; rank 1 computes the same bits in both
runs until the gradient all_reduce hands it rank 0's difference.
"""
import argparse

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=1)
args = p.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
if args.threads:
    torch.set_num_threads(args.threads if rank == 0 else 1)
torch.manual_seed(0)

model = torch.nn.Linear(32, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
big = torch.randn(1 << 22)
for _ in range(args.steps):
    x = torch.randn(16, 32)
    scale = big.sum() * 1e-3  # thread-count dependent on rank 0
    loss = (model(x) * scale).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for prm in model.parameters():
        dist.all_reduce(prm.grad)
        prm.grad /= dist.get_world_size()
    opt.step()
print(f"rank {rank} loss {loss.item():.10f}")
dist.destroy_process_group()
