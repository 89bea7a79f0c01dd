"""The oneMKL verbose log on the CPU backend, in the cuBLASLt log's part: switched on inside the
step window by the CPU probe (``mkl_verbose``, its output file named per process). oneMKL writes
each line when the call returns, so a line belongs to the site occurrence whose recorded byte
range of the same ``mkl.<pid>.log`` (its size before and after the call) holds it.
docs/cpu-backend.md."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.cpu_ops import mkl_launch_role
from forensics.instruments import _cpu_sites
from forensics.instruments.base import CALLS, CPU, Family, Instrument, Switch

FAMILY = Family("mkl", "oneMKL verbose log", "oneMKL", CPU,
                "no oneMKL verbose log (mkl.<pid>.log): no oneMKL call ran inside the window, or its log was off")


def read_calls(path: Any) -> Any:
    from parsers.mkl_verbose import read_calls as read  # heavy: pandas, only when a file is read

    return read(path)


def attribute(calls: Any, sites: Any) -> Any:
    """``site_label`` and ``attributed_by`` for oneMKL calls: the line lies in the byte range the
    occurrence recorded for the same file (its size before and after the call)."""
    calls, labels, how = _cpu_sites.blank(calls)
    occ = _cpu_sites.occurrences(sites)
    for key, g in _cpu_sites.by_process(calls):
        files = set(g["file"].map(lambda p: Path(str(p)).name))
        spans = [(o["mkl_span"][0], o["mkl_span"][1], o["label"]) for o in occ.get(key, [])
                 if isinstance(o.get("mkl_span"), list) and len(o["mkl_span"]) == 2 and None not in o["mkl_span"]
                 and (o.get("mkl_file") is None or o.get("mkl_file") in files)]
        if not spans:
            how.loc[g.index] = "unattributed: no site occurrence of this process recorded the oneMKL file's size"
            continue
        for idx, start, end in zip(g.index, g["offset"], g["end_offset"]):
            hit = [s for s in spans if s[0] <= int(start) and int(end) <= s[1]]
            if len(hit) == 1:
                labels.at[idx] = hit[0][2]
                how.at[idx] = "file offset within the size the occurrence recorded before and after its call"
            else:
                how.at[idx] = "unattributed: written outside every site occurrence" if not hit else \
                    f"unattributed: inside {len(hit)} overlapping occurrences"
    calls["site_label"] = labels
    calls["attributed_by"] = how
    return calls


MKL = Instrument(
    "mkl", CALLS, ("mkl.*.log", "mkl_*.log"), CPU, "mkl", read_calls,
    "oneMKL verbose log (MKL_VERBOSE, MKL_VERBOSE_OUTPUT_FILE)", unit="oneMKL calls",
    names=("BLAS routine (SGEMM, DGEMM, SGEMV...)", "problem descriptor (m, n, k, transposes, ld)",
           "CNR mode", "threads", "library version"),
    launch_role=mkl_launch_role, confirms="ops that call oneMKL (thnn convolution, BLAS GEMM/GEMV)",
    attributor=attribute, per_execution=True, algo_columns=("routine", "cnr", "nthr"),
    line_form=re.compile(rb"^MKL_VERBOSE ", re.M), line_why="text with MKL_VERBOSE lines",
    switch=Switch(order=30, probe="cpu"))

INSTRUMENTS = (MKL,)
