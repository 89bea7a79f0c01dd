"""One training step of the CPU example (examples/cpu-divergence/train.py's model, data and
optimizer) under torchtitan's numerics activation tracer, dumped as torchtitan's
``rank_0_activations.log`` (what ``--profiler.dump_numerics`` writes; read by compare_numerics.py).

torchtitan's tracer is not in its PyPI wheel (0.3.0): pass the path of
``agent_tooling/numerics_debugging/activation_tracer.py`` from a torchtitan checkout.

    python tests/data/scripts/torchtitan_numerics.py TRACER_PY OUT_DIR --threads N
"""
import argparse
import importlib.util

import torch

p = argparse.ArgumentParser()
p.add_argument("tracer")
p.add_argument("out")
p.add_argument("--threads", type=int, default=1)
args = p.parse_args()

spec = importlib.util.spec_from_file_location("activation_tracer", args.tracer)
tracer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tracer)

torch.manual_seed(0)
torch.set_num_threads(args.threads)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4096, 256)
y = torch.randint(0, 10, (4096,))
t = tracer.DebugModeTracer(model)
captures = t.__enter__()
loss = torch.nn.functional.cross_entropy(model(x), y)
opt.zero_grad()
loss.backward()
opt.step()
t.__exit__(None, None, None)
tracer.dump_captures_to_file(captures, f"{args.out}/rank_0_activations.log",
                             skipped_excluded_ops=set(t.skipped_excluded_ops))
print(f"threads={args.threads} loss={loss.item():.10f} captures={len(captures)}")
