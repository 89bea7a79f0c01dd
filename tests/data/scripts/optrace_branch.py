"""Workload with a control-flow difference, then a value difference: ``--extra`` runs three more
ops (a data-dependent branch taken in one run only) early in the program; ``--threads`` sets the
intra-op thread count of a later float32 sum over 4M elements (1 vs 2 threads give other bits).
"""
import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--extra", action="store_true")
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)
a = torch.randn(64, 64)
b = a.relu()
if args.extra:  # the branch only one run takes
    c = b.neg().exp()
    b = b + c * 0
h = b @ a
big = torch.randn(1 << 22)
s = big.sum()
out = (h * s).mean()
print(f"out {out.item():.10f}")
