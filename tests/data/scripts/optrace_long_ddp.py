"""Two-rank gloo workload that runs until it is killed (for the kill tests): data-parallel SGD
with a gradient all_reduce, many small steps. It writes ``<--ready>.<rank>`` once ``--ready-after``
steps are done, so a test knows records have been flushed before it kills the job.
"""
import argparse
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--ready", default=None)
p.add_argument("--ready-after", type=int, default=40)
args = p.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    x = torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    for prm in model.parameters():
        dist.all_reduce(prm.grad)
        prm.grad /= dist.get_world_size()
    opt.step()
    if args.ready and step + 1 == args.ready_after:
        open(f"{args.ready}.{rank}", "w").close()
    time.sleep(0.005)
dist.destroy_process_group()
