"""The CPU backend's judging rules: which site occurrence a library log line belongs to, and how a
scope's library calls confirm the implementation ops the profiler saw there.

:mod:`forensics.judge.analysis` calls :func:`match` for every call log whose instrument says
``per_execution`` (``onednn``, ``mkl``), so it runs the same two-instrument rule on both backends.

**Attribution** (the instrument modules' own, called through ``Instrument.attribute``:
:func:`forensics.instruments.onednn.attribute`, :func:`forensics.instruments.mkl.attribute`). The
library logs carry no NVTX range and no correlation id; the site probe records, for every
occurrence, what the logs can be compared with (``cpu`` in ``sites.jsonl``: ``t0_ns``/``t1_ns``
from ``time.time_ns()`` around the call, the calling thread, and the size of the process's oneMKL
log before and after the call). A oneDNN line belongs to the occurrence whose ``[t0_ns, t1_ns]`` holds its timestamp
(``ONEDNN_VERBOSE_TIMESTAMP``: the primitive's start, same clock); a oneMKL line to the
occurrence whose recorded byte range of ``mkl.<pid>.log`` holds it (oneMKL writes each line when
the call returns). Only the same process's occurrences are considered (pid from the file name).
Every call keeps ``attributed_by``; a line outside every occurrence stays unattributed.

**Unit compared** (:func:`match`). One implementation op may issue several library calls (the
thnn path of a 1x1 Conv1d over a batch of 4: four ``SGEMM`` under one
``aten::_slow_conv2d_forward``; ``aten::mkldnn_convolution``: reorder, convolution, reorder).
So the unit both instruments count is **implementation-op executions**: the profiler counts the
op's events in the scope; the library log counts the executions its calls were issued under. With
one confirmable execution in the scope, all the scope's calls of that library are its calls (one
group). With several, the calls can be split only when there is one call per execution (then
they pair in order); otherwise the log cannot say which execution issued which call and the
scope is reported as not one to one (DISAGREE, with the counts). The verdict says the unit and
how many library calls stood behind each execution.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd

from forensics.core.cpu_ops import LIBRARY


# --------------------------------------------------------------------------- matching
def describe_calls(calls: pd.DataFrame, instrument: str) -> str:
    """``SGEMM(N,N,8,16,8) CNR:OFF NThr:1 x4`` / ``convolution jit_1x1:avx2 forward_training x1 + reorder jit:blk x2``."""
    if not len(calls):
        return "no calls"
    items: Counter[str] = Counter()
    for r in calls.to_dict("records"):
        if instrument == "mkl":
            desc = f"{r.get('routine')}"
            if r.get("m") is not None and not pd.isna(r.get("m")):
                t = ",".join(str(x) for x in (r.get("transa"), r.get("transb")) if isinstance(x, str))
                dims = ",".join(str(int(r[x])) for x in ("m", "n", "k") if r.get(x) is not None and not pd.isna(r[x]))
                desc += f"({t},{dims})" if t else f"({dims})"
            desc += f" CNR:{r.get('cnr')} NThr:{r.get('nthr')}"
        else:
            desc = f"{r.get('primitive')} {r.get('implementation')}"
            if r.get("prop_kind") not in (None, "undef") and not pd.isna(r.get("prop_kind")):
                desc += f" {r.get('prop_kind')}"
        items[desc] += 1
    ordered = sorted(items.items(), key=lambda kv: (" reorder " in f" {kv[0]} ", -kv[1]))
    return " + ".join(f"{d} x{n}" for d, n in ordered)


def main_call(calls: pd.DataFrame, instrument: str) -> str | None:
    """The library implementation a verdict names: oneMKL's routine, oneDNN's compute primitive (not a reorder)."""
    if not len(calls):
        return None
    if instrument == "onednn":
        compute = calls[calls["primitive"] != "reorder"]
        row = (compute if len(compute) else calls).iloc[0]
        return f"oneDNN {row['primitive']} {row['implementation']}"
    row = calls.iloc[0]
    return f"oneMKL {row['routine']}"


def match(inst: Any, launches: pd.DataFrame, calls: pd.DataFrame) -> dict[str, Any]:
    """Match one scope's library calls (host order) to the implementation-op executions the profiler saw.

    ``launches``: the scope's launch-counter rows in launch order; ``calls``: the scope's calls of
    ``inst``. Returns ``matched`` ({launch key: executions confirmed}), ``calls`` (call groups: one
    per execution the calls were issued under), ``groups`` (confirmable executions), ``detail`` and
    ``pairs`` ([(key, launch, [call rows])]: what the identity check compares).
    """
    role = inst.launch_role
    names = [k if not isinstance(n, str) or not n else n for k, n in zip(launches.get("key", []), launches.get("kernel", []))]
    conf = [i for i, name in enumerate(names) if role is not None and role(name) is not None]
    lib = LIBRARY.get(inst.name, inst.name)
    n_calls = len(calls)
    out: dict[str, Any] = {"matched": {}, "calls": 0, "groups": len(conf), "library_calls": n_calls, "detail": ""}
    if not n_calls:
        return out
    how = ""
    if "attributed_by" in calls.columns and calls["attributed_by"].notna().any():
        how = f"; {lib} lines attributed by {calls['attributed_by'].dropna().iloc[0].split(' (')[0]}"
    call_rows = calls.to_dict("records")

    def launch(i: int) -> dict[str, Any]:
        row = launches.iloc[i]
        return {"kernel": names[i], **{c: row.get(c) if c in launches.columns else None
                                       for c in ("input_dims", "input_types", "input_strides")}}

    if len(conf) == 1:
        key = launches["key"].iloc[conf[0]]
        out["matched"] = {key: 1}
        out["pairs"] = [(key, launch(conf[0]), call_rows)]
        out["calls"] = 1
        out["detail"] = (f"unit compared: implementation-op executions; {lib} issued {n_calls} call(s) under "
                         f"{names[conf[0]]}: {describe_calls(calls, inst.name)}{how}")
        out["implementation"] = main_call(calls, inst.name)
        return out
    if len(conf) > 1 and n_calls == len(conf):
        out["pairs"] = []
        for i, row in zip(conf, call_rows):
            k = launches["key"].iloc[i]
            out["matched"][k] = out["matched"].get(k, 0) + 1
            out["pairs"].append((k, launch(i), [row]))
        out["calls"] = n_calls
        out["detail"] = (f"unit compared: implementation-op executions; one {lib} call per execution, in order: "
                         f"{describe_calls(calls, inst.name)}{how}")
        out["implementation"] = main_call(calls, inst.name)
        return out
    out["calls"] = 1 if conf else n_calls
    if not conf:
        out["detail"] = (f"{lib} also logged {n_calls} call(s) in this scope ({describe_calls(calls, inst.name)}) that "
                         f"no implementation op the profiler saw here calls{how}")
        return out
    out["detail"] = (f"{lib} logged {n_calls} call(s) ({describe_calls(calls, inst.name)}) in a scope with "
                     f"{len(conf)} execution(s) it can serve: the log cannot tell which execution issued which call")
    return out
