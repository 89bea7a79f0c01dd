"""A 1x1 Conv1d trained two steps on a batch of 4, its intra-op thread count from ``--threads``
(default: whatever ``OMP_NUM_THREADS`` gave torch). PyTorch picks the convolution's implementation
from the thread count (pytorch/pytorch#116369): one thread runs ``_slow_conv2d_forward`` (oneMKL
SGEMM), two run ``mkldnn_convolution`` (a oneDNN ``jit_1x1`` primitive).

``--crash-on NAME=VALUE``: the process kills itself with SIGILL when the environment holds that
value, before its first op. It stands in for ``ATEN_CPU_CAPABILITY=avx512`` on a CPU without AVX-512
(which dies with SIGILL at its first vectorised op); the CPU these tests ran on has AVX-512."""
import argparse
import os
import signal

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=None)
p.add_argument("--crash-on", default=None)
args = p.parse_args()
if args.crash_on:
    name, value = args.crash_on.split("=", 1)
    if os.environ.get(name) == value:
        os.kill(os.getpid(), signal.SIGILL)
import torch  # noqa: E402
torch.manual_seed(0)
if args.threads is not None:
    torch.set_num_threads(args.threads)
model = torch.nn.Sequential(torch.nn.Conv1d(8, 16, kernel_size=1), torch.nn.ReLU(), torch.nn.Conv1d(16, 4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 8, 8)
for _ in range(2):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
