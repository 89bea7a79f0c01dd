"""A CPU training step with causal scaled-dot-product attention, an LSTM (oneDNN's RNN layer) and an
EmbeddingBag, for `forensics trace`: two identical runs must have no divergence. oneDNN's RNN
layer returns a workspace for the backward pass that it does not initialise in full, so the two
runs differ there; the differ passes it over (tests/test_trace_rnn_real.py)."""
import torch

torch.manual_seed(0)
proj = torch.nn.Linear(32, 96)
lstm = torch.nn.LSTM(32, 32, batch_first=True)
bag = torch.nn.EmbeddingBag(100, 32, mode="sum")
opt = torch.optim.Adam([*proj.parameters(), *lstm.parameters(), *bag.parameters()], lr=1e-3)
for _ in range(2):
    x = torch.randn(4, 16, 32)
    idx, offsets = torch.randint(0, 100, (64,)), torch.arange(0, 64, 16)
    qkv = proj(x).view(4, 16, 3, 2, 16).permute(2, 0, 3, 1, 4)
    att = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
    h, _ = lstm(x)
    loss = att.sum() + h.pow(2).mean() + bag(idx, offsets).pow(2).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
