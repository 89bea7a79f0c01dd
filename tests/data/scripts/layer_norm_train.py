"""A CPU training loop whose LayerNorm backward runs ATen's own kernel (no library logs it) and
whose grad_weight/grad_bias reductions split by intra-op thread count (64 rows of 512): the site
of tests/test_knob_threads_real.py and tests/test_bundle_cpu_native.py."""
import torch

torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.LayerNorm(512), torch.nn.Linear(512, 8))
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(2):
    opt.zero_grad()
    m(torch.randn(64, 256)).pow(2).mean().backward()
    opt.step()
