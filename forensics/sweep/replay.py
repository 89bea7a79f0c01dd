"""The replay program of one sweep arm: ``python -m forensics.sweep.replay INPUTS.pt``.

Run by ``forensics kernel --rows`` once per row count, each in a fresh process under the
instruments (the probes enter through the environment, as for any command). It

1. loads the kept inputs of the site occurrence (``site-inputs.pt``) and the row plan
   (``sweep-plan.json`` next to them), pins the intra-op thread count the program had at the site
   (unless ``FORENSICS_SWEEP_THREADS=env``: a thread knob's arm, whose value must win);
2. calls the op on the first ``FORENSICS_SWEEP_ROWS`` rows: the one occurrence the instruments see
   (``SITE#1``), then closes the step window (``probes.step()``);
3. calls the op on every row (outside the window, seen by no instrument) and compares the shared
   rows' bits with the sliced call's: bit for bit and by order-sensitive digests;
4. writes ``FORENSICS_SWEEP_RESULT`` (JSON, created exclusively).

Nothing here reads the instruments: the sweep reads them from the capture afterwards.
``--discover INPUTS 1,2,4,...`` (``--rows auto``) scans sizes in one plain process instead, to pick
the sizes on both sides of each flip for the instrumented arms.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def _bits(t: Any) -> Any:
    import torch  # noqa: PLC0415

    return t.detach().contiguous().view(torch.uint8) if t.numel() else t.detach().reshape(-1).to(torch.uint8)


def compare(sliced: list[Any], shared: list[Any]) -> list[dict[str, Any]]:
    """Per output: equal bits, both order-sensitive digests, differing elements and the largest difference."""
    import torch  # noqa: PLC0415

    from probes.digests import ordered_device  # noqa: PLC0415

    rows = []
    for i, (a, b) in enumerate(zip(sliced, shared)):
        entry: dict[str, Any] = {"output": i, "shape": list(a.shape), "dtype": str(a.dtype).replace("torch.", "")}
        if list(a.shape) != list(b.shape) or a.dtype != b.dtype:
            entry.update(equal=False, why=f"shape/dtype {list(a.shape)} {a.dtype} vs {list(b.shape)} {b.dtype}")
            rows.append(entry)
            continue
        entry["ohash_sliced"] = int(ordered_device(a).item()) % (1 << 64) if a.numel() else 0
        entry["ohash_full_rows"] = int(ordered_device(b).item()) % (1 << 64) if b.numel() else 0
        equal = bool(torch.equal(_bits(a), _bits(b)))
        entry["equal"] = equal
        if not equal:
            if a.is_floating_point() or a.is_complex():
                diff = (a.double() - b.double()).abs()
                entry["differing_elements"] = int((a != b).sum().item() + (a.isnan() ^ b.isnan()).sum().item())
                entry["max_abs_diff"] = float(diff.nan_to_num(0).max().item()) if diff.numel() else 0.0
            else:
                entry["differing_elements"] = int((a != b).sum().item())
        rows.append(entry)
    return rows


def _load(inputs: Path) -> tuple[Any, Any, tuple, dict, dict]:
    """(op, plan, args, kwargs, plan JSON) of the kept call, tensors on the site's device."""
    import torch  # noqa: PLC0415

    from forensics.sweep.rows import RowPlan  # noqa: PLC0415

    plan_d = json.loads((inputs.parent / "sweep-plan.json").read_text())
    plan = RowPlan(plan_d["op"], int(plan_d["full_rows"]), [tuple(s) for s in plan_d["sliced"]], plan_d["what"],
                   int(plan_d.get("out_dim", 0)), list(plan_d.get("kept_whole", [])))
    kept = torch.load(inputs, weights_only=True)
    parts = kept["op"].split(".")
    op = getattr(getattr(torch.ops.aten, parts[1]), parts[2] if len(parts) > 2 else "default")
    args, kwargs = tuple(kept["args"]), dict(kept["kwargs"])
    device = plan_d.get("device", "cpu")
    if device != "cpu":  # kept on the CPU; the site ran on a GPU: back to it (strides kept: preserve_format)
        from torch.utils._pytree import tree_map  # noqa: PLC0415

        args, kwargs = tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, (args, kwargs))
    return op, plan, args, kwargs, plan_d


def _pin_threads(plan_d: dict[str, Any]) -> int | None:
    """The program's intra-op thread count at the site, set when this process has another (None: left alone)."""
    import torch  # noqa: PLC0415

    want = plan_d.get("threads")
    if os.environ.get("FORENSICS_SWEEP_THREADS", "") != "env" and want and torch.get_num_threads() != int(want):
        torch.set_num_threads(int(want))  # the program ran the site with another count (torch.set_num_threads)
        return int(want)
    return None


def discover(inputs: Path, sizes: list[int]) -> dict[str, Any]:
    """The row counts worth instrumenting, from a plain scan in this one process (no instrument).

    Each size of ``sizes`` is checked (shared rows of the sliced call vs the full call's); between
    two neighbours that disagree, a bisection finds a pair m-1, m that disagree. It only *chooses*
    sizes (a bisection assumes one flip inside the interval): the instrumented arms decide.
    """
    import torch  # noqa: PLC0415

    from forensics.sweep.rows import outputs, shared_rows, slice_call  # noqa: PLC0415

    op, plan, args, kwargs, plan_d = _load(inputs)
    _pin_threads(plan_d)
    with torch.no_grad():
        full = op(*args, **kwargs)
    cache: dict[int, bool] = {}

    def equal(m: int) -> bool:
        if m not in cache:
            s_args, s_kwargs = slice_call(plan, args, kwargs, m)
            with torch.no_grad():
                part = op(*s_args, **s_kwargs)
            cache[m] = all(torch.equal(_bits(a), _bits(b)) for a, b in zip(outputs(part), shared_rows(plan, full, m)))
        return cache[m]

    sizes = sorted(set(sizes))
    found = []
    for lo, hi in zip(sizes, sizes[1:]):
        if hi - lo < 2 or equal(lo) == equal(hi):
            continue
        a, b = lo, hi
        while b - a > 1:
            mid = (a + b) // 2
            if equal(mid) == equal(a):
                a = mid
            else:
                b = mid
        found += [a, b]
    return {"boundaries": sorted(set(found) - set(sizes)), "checked": {str(k): v for k, v in sorted(cache.items())}}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 3 and argv[0] == "--discover":  # python -m forensics.sweep.replay --discover INPUTS 1,2,4,...
        sys.stdout.write(json.dumps(discover(Path(argv[1]), [int(x) for x in argv[2].split(",")])) + "\n")
        return 0
    if len(argv) != 1:
        sys.stderr.write("usage: python -m forensics.sweep.replay INPUTS.pt  (FORENSICS_SWEEP_ROWS, "
                         "FORENSICS_SWEEP_RESULT in the environment)\n")
        return 2
    import torch  # noqa: PLC0415

    import probes  # noqa: PLC0415
    from forensics.sweep.rows import outputs, shared_rows, slice_call  # noqa: PLC0415

    m = int(os.environ["FORENSICS_SWEEP_ROWS"])
    op, plan, args, kwargs, plan_d = _load(Path(argv[0]))
    pinned = _pin_threads(plan_d)
    s_args, s_kwargs = slice_call(plan, args, kwargs, m)
    with torch.no_grad():
        sliced = op(*s_args, **s_kwargs)  # SITE#1: the call the instruments see
        probes.step()  # the window closes: nothing after this is instrumented
        full = op(*args, **kwargs)
    result = {"rows": m, "full_rows": plan.full_rows, "op": plan.op, "device": plan_d.get("device", "cpu"),
              "threads": torch.get_num_threads(), "threads_pinned": pinned,
              "sliced_shapes": [list(t.shape) for t in s_args if hasattr(t, "shape")],
              "outputs": compare(outputs(sliced), shared_rows(plan, full, m))}
    result["equal"] = all(o.get("equal") for o in result["outputs"])
    out = Path(os.environ["FORENSICS_SWEEP_RESULT"])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "x") as f:
        f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
