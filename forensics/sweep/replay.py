"""The replay program of a sweep: ``python -m forensics.sweep.replay INPUTS.pt``.

Run by ``forensics kernel --rows`` / ``--repeat`` once per setting (as run, or a knob's value): one
fresh process under the instruments (the probes enter through the environment, as for any
command), whatever the number of sizes and repeats. It

1. loads the kept inputs of the site occurrence (``site-inputs.pt``) and the plan
   (``sweep-plan.json`` next to them), pins the intra-op thread count the program had at the site
   (unless ``FORENSICS_SWEEP_THREADS=env``: a thread knob's arm, whose value must win);
2. inside the step window, for each row count of ``FORENSICS_SWEEP_SIZES`` (ascending, the full
   count last), calls the op on the first m rows ``FORENSICS_SWEEP_REPEAT`` times (the full count at
   least twice): the occurrences ``OP#1``, ``OP#2``... the instruments see, in that order (an op that
   writes into an argument gets a fresh clone of it per call); then closes the window
   (``probes.step()``);
3. outside the window (seen by no instrument) compares, bit for bit and by order-sensitive
   digests, every repeat with the first at its size (determinism), and the first call on m rows
   with the first m rows of the first full call (batch invariance);
4. writes ``FORENSICS_SWEEP_RESULT`` (JSON, created exclusively).

Nothing here reads the instruments: the sweep reads them from the capture afterwards.
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


def _written_args(op: Any) -> list[int]:
    """Positions of the arguments the op writes into (its schema's ``Tensor(a!)``)."""
    try:
        return [i for i, a in enumerate(op._schema.arguments) if a.alias_info is not None and a.alias_info.is_write]
    except AttributeError:
        return []


def _call(op: Any, args: tuple, kwargs: dict, written: list[int]) -> Any:
    if written:
        args = tuple(a.clone(memory_format=__import__("torch").preserve_format) if i in written and _is_t(a) else a
                     for i, a in enumerate(args))
    return op(*args, **kwargs)


def _is_t(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "stride")


def _ohash(t: Any) -> int:
    from probes.digests import ordered_device  # noqa: PLC0415

    return int(ordered_device(t).item()) % (1 << 64) if t.numel() else 0


def replay_sizes(op: Any, plan: Any, args: tuple, kwargs: dict, sizes: list[int], repeat: int,
                 step: Any = None) -> dict[str, Any]:
    """Run the calls (step() closes the window after them), then compare; the result JSON's body."""
    import torch  # noqa: PLC0415

    from forensics.sweep.rows import outputs, shared_rows, slice_call  # noqa: PLC0415

    written = _written_args(op)
    full_rows = plan.full_rows
    calls: list[tuple[int, list[Any]]] = []  # (rows, [outputs of each repeat])
    occurrence = 0
    labels: dict[int, list[int]] = {}
    with torch.no_grad():
        for m in sizes:
            n = max(repeat, 2) if m == full_rows else repeat
            s_args, s_kwargs = slice_call(plan, args, kwargs, m) if m != full_rows else (args, kwargs)
            outs = []
            for _ in range(n):
                outs.append(outputs(_call(op, s_args, s_kwargs, written)))
                occurrence += 1
                labels.setdefault(m, []).append(occurrence)
            calls.append((m, outs))
        if step is not None:
            step()  # the window closes: nothing after this is instrumented
    full = next(outs for m, outs in calls if m == full_rows)[0]
    result_sizes = []
    for m, outs in calls:
        first = outs[0]
        rep = [[_ohash(t) for t in o] for o in outs]
        differing = [i + 1 for i, o in enumerate(outs) if i and not all(
            torch.equal(_bits(a), _bits(b)) for a, b in zip(o, first))]
        entry: dict[str, Any] = {"rows": m, "occurrences": labels[m], "repeats": len(outs), "repeat_ohash": rep,
                                 "repeats_equal": not differing, "differing_repeats": differing}
        if m == full_rows:
            entry["outputs"] = [{"output": i, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
                                 "equal": True, "ohash_sliced": rep[0][i], "ohash_full_rows": rep[0][i]}
                                for i, t in enumerate(first)]
        else:
            entry["outputs"] = compare(first, shared_rows(plan, full, m))
        entry["equal"] = all(o.get("equal") for o in entry["outputs"])
        result_sizes.append(entry)
    return {"sizes": result_sizes}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1:
        sys.stderr.write("usage: python -m forensics.sweep.replay INPUTS.pt  (FORENSICS_SWEEP_SIZES, "
                         "FORENSICS_SWEEP_REPEAT, FORENSICS_SWEEP_RESULT in the environment)\n")
        return 2
    import torch  # noqa: PLC0415

    import probes  # noqa: PLC0415

    op, plan, args, kwargs, plan_d = _load(Path(argv[0]))
    pinned = _pin_threads(plan_d)
    sizes = sorted({int(x) for x in os.environ.get("FORENSICS_SWEEP_SIZES", str(plan.full_rows)).split(",")})
    repeat = max(1, int(os.environ.get("FORENSICS_SWEEP_REPEAT", "1")))
    body = replay_sizes(op, plan, args, kwargs, sizes, repeat, probes.step)
    result = {"full_rows": plan.full_rows, "op": plan.op, "device": plan_d.get("device", "cpu"), "repeat": repeat,
              "threads": torch.get_num_threads(), "threads_pinned": pinned, "pid": os.getpid(), **body}
    out = Path(os.environ["FORENSICS_SWEEP_RESULT"])
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "x") as f:
        f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
