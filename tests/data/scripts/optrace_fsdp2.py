"""A 2-rank FSDP2 (fully_shard) training loop on the CPU with gloo, for `forensics trace` under torchrun.
FSDP2 frees each unsharded parameter's storage after use (``storage.resize_(0)``) and its
parameters are DTensors: the tracer must neither make a storage unresizable nor read a DTensor's
memory in place (tests/test_trace_fsdp_real.py)."""
import os, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo")
torch.manual_seed(0); torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
for m in model:
    if isinstance(m, torch.nn.Linear):
        fully_shard(m)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(dist.get_rank())
for _ in range(2):
    x = torch.randn(8, 16, generator=g)
    opt.zero_grad(); model(x).pow(2).mean().backward(); opt.step()
dist.destroy_process_group()
