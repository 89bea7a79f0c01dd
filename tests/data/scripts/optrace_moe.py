"""A tiny transformer + MoE training step on the CPU, traced by tests/test_trace_moe_real.py:
an embedding, multi-head attention with a causal mask and dropout, bfloat16 autocast, top-k
routing with nonzero/index_select/index_add (chunked ops), LayerNorm, AdamW. Two steps."""
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--threads", type=int, default=1)
p.add_argument("--steps", type=int, default=2)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
V, D, S, B, E = 1000, 64, 16, 4, 4

class MoE(nn.Module):
    def __init__(self):
        super().__init__()
        self.router = nn.Linear(D, E)
        self.experts = nn.ModuleList(nn.Linear(D, D) for _ in range(E))
    def forward(self, x):
        flat = x.reshape(-1, D)
        w, idx = self.router(flat).softmax(-1).topk(2, dim=-1)
        out = torch.zeros_like(flat)
        for e in range(E):
            rows, slot = (idx == e).nonzero(as_tuple=True)
            if rows.numel():
                y = self.experts[e](flat.index_select(0, rows)) * w[rows, slot].unsqueeze(-1)
                out = out.index_add(0, rows, y.to(out.dtype))
        return out.reshape_as(x)

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.attn = nn.MultiheadAttention(D, 4, dropout=0.1, batch_first=True)
        self.moe = MoE()
        self.ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, V)
    def forward(self, tok):
        x = self.emb(tok)
        mask = torch.triu(torch.ones(S, S, dtype=torch.bool), 1)
        h, _ = self.attn(x, x, x, attn_mask=mask)
        x = self.ln(x + h)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            x = x + self.moe(x)
        return self.head(x.float())

m = Block()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
for step in range(a.steps):
    tok = torch.randint(0, V, (B, S))
    loss = F.cross_entropy(m(tok).reshape(-1, V), tok.roll(1, 1).reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", float(loss.detach()))
