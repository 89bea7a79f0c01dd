"""A 2-rank FSDP2 (fully_shard) training loop on the CPU with gloo, for `forensics trace` under torchrun.
FSDP2 frees each unsharded parameter's storage after use (``storage.resize_(0)``) and its
parameters are DTensors: the tracer must neither make a storage unresizable nor read a DTensor's
memory in place (tests/test_trace_fsdp_real.py). Before each later use FSDP2 grows the storage
again (``resize_(n)``, uninitialised bytes) and copies the all-gathered shards into it: two
identical runs read different garbage there, which is no divergence.

``--threads N`` sets the intra-op threads; ``--big`` uses shapes whose GEMMs the CPU blocks
differently with 1 and 2 threads (a real difference, found at its first op)."""
import argparse, gc, torch, torch.distributed as dist
from torch.distributed.fsdp import fully_shard
p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--big", action="store_true")
args = p.parse_args()
d_in, width, d_out, batch = (256, 512, 10, 4096) if args.big else (16, 32, 4, 8)
dist.init_process_group("gloo")
torch.manual_seed(0); torch.set_num_threads(args.threads)
model = torch.nn.Sequential(torch.nn.Linear(d_in, width), torch.nn.ReLU(), torch.nn.Linear(width, d_out))
for m in model:
    if isinstance(m, torch.nn.Linear):
        fully_shard(m)
fully_shard(model)
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
g = torch.Generator().manual_seed(dist.get_rank())
for _ in range(2):
    x = torch.randn(batch, d_in, generator=g)
    opt.zero_grad(); model(x).pow(2).mean().backward(); opt.step()
# the model and optimizer (FSDP2's state, which holds the process group) go before the group: left
# to interpreter exit, a rank aborted about once in 12 runs, untraced too ("terminate called without
# an active exception", SIGABRT, after destroy_process_group returned); 0 in 45 runs this way
del model, opt
gc.collect()
dist.destroy_process_group()
