"""The oneDNN verbose log on the CPU backend, in the cuBLASLt log's part: switched on inside the
step window by the CPU probe (``mkldnn_set_verbose``), each line stamped with the primitive's start
(``ONEDNN_VERBOSE_TIMESTAMP=1``, set in every arm). A line belongs to the site occurrence whose
``[t0_ns, t1_ns]`` holds its timestamp (same clock, same process). docs/cpu-backend.md."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.cpu_ops import onednn_launch_role
from forensics.instruments import _cpu_sites
from forensics.instruments.base import CALLS, CPU, Family, Instrument, Switch

FAMILY = Family("onednn", "oneDNN verbose log", "oneDNN", CPU,
                "no oneDNN verbose log (onednn.<pid>.log): no oneDNN primitive ran inside the window, "
                "or its log was off")


def onednn_env(folder: Path | None = None) -> dict[str, str]:
    """oneDNN stamps each verbose line with the primitive's start (epoch ms): how lines meet site occurrences.

    Verbose itself is switched on only inside the step window, by the probe (``mkldnn_set_verbose``);
    so is oneMKL's (``mkl_verbose``), whose output file the probe names per process.
    """
    return {"ONEDNN_VERBOSE_TIMESTAMP": "1"}


def read_calls(path: Any) -> Any:
    from parsers.onednn_verbose import read_calls as read  # heavy: pandas, only when a file is read

    return read(path)


def attribute(calls: Any, sites: Any) -> Any:
    """``site_label`` and ``attributed_by`` for oneDNN primitive executions: timestamp inside an occurrence."""
    import pandas as pd  # heavy: only analysis, which has the frames, gets here

    calls, labels, how = _cpu_sites.blank(calls)
    occ = _cpu_sites.occurrences(sites)
    for key, g in _cpu_sites.by_process(calls):
        spans = [(o["t0_ns"], o["t1_ns"], o["label"]) for o in occ.get(key, []) if o.get("t0_ns") and o.get("t1_ns")]
        if not spans:
            how.loc[g.index] = "unattributed: no site occurrence of this process recorded a time bracket"
            continue
        for idx, ts in zip(g.index, g["ts_ns"]):
            if ts is None or pd.isna(ts):
                how.at[idx] = "unattributed: the line has no timestamp (ONEDNN_VERBOSE_TIMESTAMP was off)"
                continue
            hit = [s for s in spans if s[0] <= int(ts) <= s[1]]
            if len(hit) == 1:
                labels.at[idx] = hit[0][2]
                how.at[idx] = "timestamp within the occurrence's [t0, t1] (same process)"
            else:
                how.at[idx] = ("unattributed: timestamp outside every site occurrence" if not hit else
                               f"unattributed: timestamp inside {len(hit)} overlapping occurrences")
    calls["site_label"] = labels
    calls["attributed_by"] = how
    return calls


ONEDNN = Instrument(
    "onednn", CALLS, ("onednn.*.log", "onednn_*.log"), CPU, "onednn", read_calls,
    "oneDNN verbose log (ONEDNN_VERBOSE, ONEDNN_VERBOSE_TIMESTAMP)", unit="oneDNN primitive executions",
    names=("primitive implementation and ISA (jit_1x1:avx2)", "prop kind", "memory descriptors",
           "problem descriptor", "start time"),
    launch_role=onednn_launch_role, confirms="ops that call oneDNN (mkldnn_*, and GEMMs it may serve)",
    attributor=attribute, per_execution=True,
    algo_columns=("primitive", "implementation", "prop_kind", "dtypes", "attributes"),
    line_form=re.compile(rb"^(?:[\d.]+,)?(?:onednn|dnnl)_verbose,", re.M), line_why="text with onednn_verbose lines",
    switch=Switch(order=20, env=onednn_env, probe="cpu"))

INSTRUMENTS = (ONEDNN,)
