"""SYNTHETIC Megatron-Core determinism trace fixtures (schema version 1) -- regenerate with
``python tests/data/megatron/make_fixtures.py`` (refuses to overwrite existing files).

The ``megatron-core`` wheel and sdist on PyPI (0.16.1, checked 2026-11-29) do not ship
``megatron/core/determinism``, so these records are written here, NOT by Megatron's recorder.
They follow the record layout and the evidence rules of NVIDIA/Megatron-LM
``megatron/core/determinism/trace.py`` (commit 01768e17f13f715e4d64c1daa88c83a571e7b127) and
``trace_schema.py`` (commit 3fdf4997182a6a70ff51c46574971291992f2b56): one compact JSON object per
line with sorted keys, ``rank_<6 digits>.jsonl`` per rank, 0-based occurrence per
(event, name, iteration, microbatch, phase), sequence per rank, and for full/sampled tensors a
SHA-256 over ``json({"dtype","mode","schema_version","shape"[,"sample_indices"]})`` + NUL + the
tensor's bytes, computed here from real CPU tensors exactly as ``_resolve_tensor`` does.
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent


def tensor_evidence(t: torch.Tensor, mode: str, sample_count: int = 8) -> dict:
    meta = {"device_type": t.device.type, "dtype": str(t.dtype).removeprefix("torch."),
            "layout": "strided", "numel": t.numel(), "requires_grad": False,
            "shape": list(t.shape), "stride": list(t.stride())}
    ev = dict(meta, mode=mode, value_observed=mode != "metadata", exact_value_certificate=mode == "full")
    if mode == "metadata":
        return ev
    if mode == "summary":
        v = t.double()
        ev["summary"] = {"all_finite": bool(torch.isfinite(v).all()), "l2_norm": float(v.norm()),
                         "maximum": float(v.max()), "mean": float(v.mean()), "minimum": float(v.min())}
        return ev
    header = {"dtype": meta["dtype"], "mode": mode, "schema_version": 1, "shape": meta["shape"]}
    if mode == "sampled":
        n = t.numel()
        c = min(n, sample_count)
        idx = [0] if c == 1 else [(i * (n - 1)) // (c - 1) for i in range(c)]
        header["sample_indices"] = idx
        payload = t.reshape(-1)[idx]
        ev["sample_indices"] = idx
    else:
        payload = t
    h = hashlib.sha256()
    h.update(json.dumps(header, separators=(",", ":"), sort_keys=True).encode())
    h.update(b"\0")
    h.update(payload.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    ev.update(sha256=h.hexdigest(), captured_numel=payload.numel(), all_finite=bool(torch.isfinite(payload).all()))
    return ev


class Writer:
    """Mimics RankLocalTrace's record layout (sequence and occurrence counters)."""

    def __init__(self, rank: int):
        self.rank, self.seq, self.occ, self.lines = rank, 0, {}, []

    def _rec(self, event, name, it, mb, phase):
        key = (event, name, it, mb, phase)
        occ = self.occ.get(key, 0)
        self.occ[key] = occ + 1
        rec = {"event": event, "iteration": it, "microbatch": mb, "name": name, "occurrence": occ,
               "phase": phase, "rank": self.rank, "schema_version": 1, "sequence": self.seq}
        self.seq += 1
        return rec

    def event(self, name, fields, it, mb=None, phase="unspecified"):
        rec = self._rec("event", name, it, mb, phase)
        rec["fields"] = fields
        self.lines.append(rec)

    def tensor(self, name, t, it, mb=0, phase="forward", mode="full", metadata=None):
        rec = self._rec("tensor", name, it, mb, phase)
        rec["metadata"] = metadata or {}
        rec["tensor"] = tensor_evidence(t, mode)
        self.lines.append(rec)

    def write(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"rank_{self.rank:06d}.jsonl", "x", encoding="utf-8") as f:
            for rec in self.lines:
                f.write(json.dumps(rec, allow_nan=False, separators=(",", ":"), sort_keys=True) + "\n")


def run(folder: str, *, wgrad_differs: bool = False, input_differs_rank: int | None = None) -> None:
    """One iteration, one microbatch, two ranks: a layer (input/output), a TE wgrad GEMM
    (two inputs, one output), then the reported loss."""
    for rank in (0, 1):
        g = torch.Generator().manual_seed(100 + rank)
        x = torch.randn(8, 16, generator=g)
        w = torch.randn(4, 16, generator=g)
        go = torch.randn(8, 4, generator=g)
        if input_differs_rank == rank:
            x = x.clone()
            x[0, 0] += 0.5  # arrived different (e.g. over a collective): every consumer differs
        y = x @ w.t()
        dw = go.t() @ x
        if wgrad_differs:
            dw = dw.clone()
            dw[1, 2] = torch.nextafter(dw[1, 2], torch.tensor(float("inf")))  # one ULP: an order change
        loss = float((y.double() ** 2).mean()) + (1e-12 if (wgrad_differs or input_differs_rank == rank) else 0.0)
        t = Writer(rank)
        t.event("iteration_start", {"iteration": 1}, 1)
        t.tensor("decoder.layer0.input", x, 1)
        t.tensor("decoder.layer0.output", y, 1)
        name = "decoder.layers.0.mlp.linear_fc1.wgrad"
        t.tensor(f"{name}.input0", x, 1, phase="backward", metadata={"accumulate": False})
        t.tensor(f"{name}.input1", go, 1, phase="backward")
        t.tensor(f"{name}.output", dw, 1, phase="backward")
        t.tensor("decoder.layers.0.mlp.linear_fc1.weight.main_grad", dw, 1, phase="backward", mode="summary")
        t.event("reported_loss", {"value": loss}, 1, phase="result")
        t.write(HERE / folder)


def _records(folder: str) -> list[dict]:
    out = []
    for f in sorted((HERE / folder).glob("rank_*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


def report_v1(left: str, right: str, name: str) -> None:
    """SYNTHETIC compare_traces.py report, version 1 layout (tools/determinism/trace_comparison.py,
    NVIDIA/Megatron-LM commit 1fdd5fb1e7cbceeb542bbd3ff65998c990dff5ab): semantic keys visited in
    (iteration, microbatch, rank, phase, event, name, occurrence) order -- lexical, not causal."""
    keyf = ("rank", "iteration", "microbatch", "phase", "event", "name", "occurrence")
    a = {tuple(r[k] for k in keyf): r for r in _records(left)}
    b = {tuple(r[k] for k in keyf): r for r in _records(right)}
    order = sorted(set(a) | set(b), key=lambda k: (k[1], -1 if k[2] is None else k[2], k[0], k[3], k[4], k[5], k[6]))
    first, compared = None, 0
    for k in order:
        sa = {x: y for x, y in a[k].items() if x != "sequence"}
        sb = {x: y for x, y in b[k].items() if x != "sequence"}
        if sa != sb:
            first = {"differing_fields": sorted(f for f in set(sa) | set(sb) if sa.get(f) != sb.get(f)),
                     "key": dict(zip(keyf, k)), "kind": "content_mismatch", "left": sa, "right": sb}
            break
        compared += 1
    modes = lambda rs: {m: sum(1 for r in rs if r["event"] == "tensor" and r["tensor"]["mode"] == m)  # noqa: E731
                        for m in sorted({r["tensor"]["mode"] for r in rs if r["event"] == "tensor"})}
    rep = {"compared_records_before_divergence": compared, "first_divergence": first,
           "left": {"path": left, "records": len(a), "tensor_modes": modes(list(a.values()))},
           "match": first is None, "match_strength": "none" if first else "diagnostic_tensor_match",
           "right": {"path": right, "records": len(b), "tensor_modes": modes(list(b.values()))},
           "schema_version": 1, "status": "diverged" if first else "match"}
    with open(HERE / name, "x", encoding="utf-8") as f:
        f.write(json.dumps(rep, indent=2, sort_keys=True) + "\n")


def report_v2_missing_event(name: str) -> None:
    """SYNTHETIC compare_traces.py report, version 2 as Megatron's docs/.../determinism_tracing.md
    describes it (rank_results keyed by decimal rank; each with match, first_divergence,
    compared_records_before_divergence; candidates carry left_sequence/right_sequence): rank 1
    recorded an event the other run did not (a control-flow divergence)."""
    key = {"event": "tensor", "iteration": 1, "microbatch": 0, "name": "decoder.layer0.recompute.output",
           "occurrence": 0, "phase": "forward", "rank": 1}
    rep = {"match": False, "report_version": 2, "schema_version": 1, "status": "diverged",
           "left": {"path": "run_a", "ranks": [0, 1]}, "right": {"path": "run_x", "ranks": [0, 1]},
           "rank_results": {
               "0": {"match": True, "first_divergence": None, "compared_records_before_divergence": 8},
               "1": {"match": False, "compared_records_before_divergence": 3,
                     "first_divergence": {"kind": "missing_event", "key": key, "missing_from": "left",
                                          "left_sequence": None, "right_sequence": 3}}}}
    with open(HERE / name, "x", encoding="utf-8") as f:
        f.write(json.dumps(rep, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    if any((HERE / d).exists() for d in ("run_a", "run_a2", "run_b_wgrad", "run_c_receiver")):
        sys.exit("fixtures exist; delete them first (nothing is overwritten)")
    run("run_a")
    run("run_a2")  # control: an identical rerun
    run("run_b_wgrad", wgrad_differs=True)
    run("run_c_receiver", input_differs_rank=0)
    report_v1("run_a", "run_b_wgrad", "compare_v1_wgrad.json")
    report_v2_missing_event("compare_v2_missing_event.json")
