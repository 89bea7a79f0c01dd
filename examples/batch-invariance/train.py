"""A small training script whose first linear layer is the batch-invariance example.

    forensics kernel --site 'gemm:TN:acc0:grad0#1' --steps 0 --rows auto -- \
        python examples/batch-invariance/train.py

Two linear layers (4096 -> 1024 -> 16) trained with SGD on a fixed random batch of 256 rows
(``--batch``); the first layer's fprop ``x @ W^T + b`` is an ``aten.addmm`` that oneMKL serves
as an ``SGEMM`` on the CPU.
"""
import argparse

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--features", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = torch.nn.Sequential(torch.nn.Linear(a.features, a.hidden), torch.nn.ReLU(), torch.nn.Linear(a.hidden, 16))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(a.batch, a.features)
    y = torch.randn(a.batch, 16)
    for step in range(a.steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
