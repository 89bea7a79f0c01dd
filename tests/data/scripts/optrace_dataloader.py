"""A CPU training loop fed by a DataLoader with two worker processes (fork), for `forensics trace`.

``--slow-worker W`` makes worker W sleep before its first batch, so the batches reach the training
process in a chosen order: with ``--slow-worker 0`` batch 1 arrives before batch 0, with
``--slow-worker 1`` the other way round. The training process rebuilds each batch from the
worker's shared memory as it arrives (``aten.set_.source_Storage_storage_offset``); the loop
consumes them in order, so two runs with different slow workers train identically.
``--noisy-sample I`` adds run-to-run noise to sample I (the data really differ). Each iteration
also allocates an uninitialised buffer and views it (the differ must follow the garbage: the
received batches' own ``empty``s must not shift the occurrence numbers of the program's)."""
import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

p = argparse.ArgumentParser()
p.add_argument("--slow-worker", type=int, default=None)
p.add_argument("--noisy-sample", type=int, default=None)
args = p.parse_args()
torch.manual_seed(0)
torch.set_num_threads(1)


class Samples(Dataset):
    def __init__(self) -> None:
        self.x = torch.randn(128, 16)
        self.y = torch.randint(0, 4, (128,))
        self.slept = False

    def __len__(self) -> int:
        return 128

    def __getitem__(self, i: int):
        info = get_worker_info()
        if info is not None and info.id == args.slow_worker and not self.slept:
            self.slept = True  # this worker's copy of the dataset: once per worker
            time.sleep(1.0)
        x = self.x[i]
        if i == args.noisy_sample:
            x = x + int.from_bytes(os.urandom(2), "little") / 1e6 + 1e-3  # never equal twice
        return x, self.y[i]


loader = DataLoader(Samples(), batch_size=16, num_workers=2, shuffle=False)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    scratch = torch.empty(64)  # uninitialised, as DDP's gradient buckets are: read through a view below
    scratch.view(8, 8)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
print("loss", float(torch.nn.functional.cross_entropy(model(x), y)))
