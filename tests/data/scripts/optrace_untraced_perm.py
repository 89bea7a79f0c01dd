"""Workload for an untraced upstream permutation: NumPy reorders a tensor's values outside the
PyTorch dispatcher (the op tracer never sees it), then an order-dependent op (cumsum) reads them.

``--seed`` picks NumPy's permutation; everything else is seeded with 0. The permuted tensor holds
the same values in another order, so its whole-tensor XOR digest is identical in both runs: with
XOR input digests alone, cumsum looks like an op that made a difference from equal inputs. Its
order-sensitive input digest differs, so cumsum is a RECEIVER of a difference made upstream.
"""
import argparse

import numpy as np
import torch

p = argparse.ArgumentParser()
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
x = torch.randn(4096) * 2.0
order = np.random.default_rng(args.seed).permutation(4096)
y = torch.from_numpy(x.numpy()[order])  # the untraced producer: a NumPy gather
z = torch.cumsum(y, 0)
print(f"last {z[-8:].sum().item():.10f}")
