"""The standalone ``repro.py`` of a batch-invariance sweep: the anchor-row check, torch only."""
from __future__ import annotations

import json
from typing import Any

_TEMPLATE = '''#!/usr/bin/env python3
"""Anchor-row check of {label} ({op}), written by forensics kernel --rows.

Needs only torch and the two files next to this script: site-inputs.pt (sweep-site-inputs.pt in a
bundle: the site's inputs, kept at its first occurrence) and sweep-plan.json (which operands are cut to their first m rows). For each
row count m it calls the op on the first m rows and compares the bits with the first m rows of
the call on all {full} rows. Exit 0: every size equal (batch-invariant over them); 1: some differ.

    python repro.py                 # the sizes the sweep tried: {rows}
    python repro.py 1 2 3 100       # other sizes
"""
import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
THREADS = {threads!r}  # intra-op threads the program had at the site


def main():
    plan = json.loads((HERE / "sweep-plan.json").read_text())
    inputs = HERE / "site-inputs.pt"
    if not inputs.is_file():
        inputs = HERE / "sweep-site-inputs.pt"  # the name in a forensics bundle
    kept = torch.load(inputs, weights_only=True)
    if THREADS and torch.get_num_threads() != THREADS:
        torch.set_num_threads(THREADS)
    parts = kept["op"].split(".")
    op = getattr(getattr(torch.ops.aten, parts[1]), parts[2] if len(parts) > 2 else "default")
    args, kwargs = list(kept["args"]), dict(kept["kwargs"])
    sizes = [int(x) for x in sys.argv[1:]] or {rows!r}
    full_rows = plan["full_rows"]
    with torch.no_grad():
        full = op(*args, **kwargs)
    fulls = full if isinstance(full, (list, tuple)) else [full]
    fulls = [t for t in fulls if isinstance(t, torch.Tensor)]
    varying = []
    for m in sizes:
        if m > full_rows:
            print(f"{{m}} rows: skipped (the site has {{full_rows}})")
            continue
        cut = list(args)
        for i, dim in plan["sliced"]:
            cut[i] = cut[i].narrow(dim, 0, m)
        with torch.no_grad():
            part = op(*cut, **kwargs)
        parts_ = part if isinstance(part, (list, tuple)) else [part]
        parts_ = [t for t in parts_ if isinstance(t, torch.Tensor)]
        same = True
        for a, b in zip(parts_, fulls):
            b = b.narrow(plan["out_dim"], 0, m) if b.dim() > plan["out_dim"] and b.shape[plan["out_dim"]] == full_rows else b
            if a.shape != b.shape or not torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)):
                same = False
        print(f"{{m}} rows: {{'EQUAL' if same else 'DIFFER'}}")
        if not same:
            varying.append(m)
    if varying:
        print(f"VARIANT: first varying size {{varying[0]}} (differ at {{', '.join(map(str, varying))}})")
        return 1
    print("BATCH-INVARIANT over the sizes tried")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''


def render_repro(plan: Any, rows: list[int], kept: dict[str, Any]) -> str:
    return _TEMPLATE.format(label=kept.get("label"), op=plan.op, full=plan.full_rows,
                            rows=[int(r) for r in rows], threads=kept.get("threads"))
