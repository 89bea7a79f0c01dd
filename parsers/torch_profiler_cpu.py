"""torch.profiler CPU trace (Kineto Chrome JSON) -> one row per implementation op, tied to its site occurrence.

The CPU backend's launch counter (:mod:`probes.cpu` writes ``rank<R>/torchprof.<pid>.json.gz``).
Each site occurrence is a ``record_function`` range named ``SITE#N`` (a ``user_annotation``
event); the ops the profiler recorded inside it on the same thread are the op's implementation
below the dispatcher. Rows are the *implementation ops* (:func:`forensics.core.cpu_ops.is_implementation_op`:
the ops a CPU library serves, ``aten::mkldnn_convolution``, ``aten::_slow_conv2d_forward``,
``aten::mm``...), outermost only (an implementation op inside another counts once, as the outer
one; the op that *is* the site, recorded around the range by the dispatcher, lies outside it and
belongs to no scope). Columns follow the launch frame (``forensics.core.model.LAUNCH_COLUMNS``): ``kernel`` is the op
name, ``start_ns``/``end_ns`` on the trace's clock (``baseTimeNanoseconds`` added when present),
``site_label`` the innermost ``SITE#N`` range holding the op on its thread; plus ``tid`` and
``input_dims``, ``input_types`` and ``input_strides`` (the profiler's own record of the inputs'
shapes, dtypes and strides: ``record_shapes=True``).

Pure (no torch import); bad input is :class:`~forensics.core.errors.BadInput` from the Kineto reader.
"""
from __future__ import annotations

from os import PathLike

import pandas as pd

from forensics.core.cpu_ops import is_implementation_op
from forensics.core.model import LAUNCH_COLUMNS, conform
from forensics.core.site import is_occurrence_label
from parsers import kineto


def read_ops(path: str | PathLike[str]) -> pd.DataFrame:
    """Implementation ops of one CPU profiler trace (launch frame + ``tid``, ``input_dims``,
    ``input_types``, ``input_strides``)."""
    trace = kineto.read_trace(path)
    ops, ann = trace.cpu_ops, trace.annotations
    base = trace.meta.get("baseTimeNanoseconds")
    base = int(base) if isinstance(base, (int, float)) and not isinstance(base, bool) else 0
    rows = []
    if len(ops):
        ann = ann[[is_occurrence_label(n) for n in ann["name"]]] if len(ann) else ann
        ranges = {}
        for r in ann.itertuples(index=False):
            ranges.setdefault(r.tid, []).append((int(r.start_ns), int(r.end_ns) if pd.notna(r.end_ns) else None, r.name))
        impl = ops[[is_implementation_op(n) for n in ops["name"]]].sort_values(["tid", "start_ns"], kind="stable")
        open_until: dict[tuple, int] = {}  # (tid, site label) -> end of the outermost implementation op seen
        for r in impl.itertuples(index=False):
            start = int(r.start_ns)
            end = int(r.end_ns) if pd.notna(r.end_ns) else start
            label = None
            best = None
            for a_start, a_end, name in ranges.get(r.tid, ()):
                if a_start <= start and (a_end is None or end <= a_end) and (best is None or a_start >= best):
                    best, label = a_start, name
            if start < open_until.get((r.tid, label), -1):
                continue  # nested inside another implementation op of the same scope: that one is the implementation
            open_until[(r.tid, label)] = end
            args = r.args if isinstance(r.args, dict) else {}
            rows.append({"kernel": r.name, "short_name": r.name, "start_ns": start + base, "end_ns": end + base,
                         "launch_ns": start + base, "pid": r.pid, "tid": r.tid, "site_label": label,
                         "input_dims": args.get("Input Dims"), "input_types": args.get("Input type"),
                         "input_strides": args.get("Input Strides"), "sequence_number": r.sequence_number})
    df = pd.DataFrame(rows, columns=["kernel", "short_name", "start_ns", "end_ns", "launch_ns", "pid", "tid",
                                     "site_label", "input_dims", "input_types", "input_strides", "sequence_number"])
    df = conform(df, LAUNCH_COLUMNS)
    df.attrs["problems"] = []
    return df
