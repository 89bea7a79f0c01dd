"""A forward pass with no optimizer step: a tanh, then two scatter-adds into 64 bins.

    forensics kernel --site aten.tanh.default --steps 0 --rows 1,2,3,8 -- python accumulate_infer.py
    forensics kernel --site aten.index_put_.default --steps 0 --repeat 8 -- python accumulate_infer.py
    forensics kernel --site aten.index_add_.default --steps 0 --repeat 8 -- python accumulate_infer.py

``index_put_(accumulate=True)`` on the CPU adds in parallel over the intra-op threads, so the order
of the float additions into a bin depends on thread timing: with 2 threads and 4M additions into 64
bins its bits change from call to call, even on a loaded machine (at 256K additions the two threads
rarely overlap there, and the race hides); ``index_add_`` adds in an order fixed by the indices.
"""
import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--rows", type=int, default=64)
    a = ap.parse_args()
    torch.manual_seed(0)
    x = torch.randn(a.rows, 256)
    h = torch.tanh(x)
    src = torch.randn(a.n)
    idx = torch.randint(0, 64, (a.n,))
    racy = torch.zeros(64).index_put_((idx,), src, accumulate=True)
    stable = torch.zeros(64).index_add_(0, idx, src)
    print(f"tanh {h.sum().item():.6f} index_put_ {racy.sum().item():.6f} index_add_ {stable.sum().item():.6f}")


if __name__ == "__main__":
    main()
