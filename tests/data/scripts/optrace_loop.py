"""Single-process workload for the trace command's fault tests: small ops in a loop, one optimizer
step per iteration. ``--ready FILE`` is created after ``--ready-after`` steps (records flushed by
then); ``--kill-self SIG`` makes the process send itself that signal at that point; ``--fail``
raises before any op; ``--steps`` bounds the loop (default: until it is stopped).
"""
import argparse
import os
import signal
import time

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=10**9)
p.add_argument("--ready", default=None)
p.add_argument("--ready-after", type=int, default=30)
p.add_argument("--kill-self", default=None)
p.add_argument("--fail", action="store_true")
p.add_argument("--sleep", type=float, default=0.002)
args = p.parse_args()
if args.fail:
    raise SystemExit("optrace_loop: failing before any op, as asked")
import torch  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Linear(16, 16)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step + 1 == args.ready_after:
        if args.ready:
            open(args.ready, "w").close()
        if args.kill_self:
            os.kill(os.getpid(), getattr(signal, args.kill_self))
    time.sleep(args.sleep)
print("done")
