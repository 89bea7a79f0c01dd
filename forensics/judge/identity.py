"""Who ran: the identity rule. Counts that agree name a kernel only when the instruments also agree
on every descriptor both carry (:func:`identity_verdict`).

Its own module so that the count rule (:mod:`forensics.judge.analysis`) and the arm comparison
(:mod:`forensics.judge.verdicts`) both import it, and neither imports the other to reach it: the
judge's modules import in one direction (identity, runs <- analysis <- arm_evidence <- verdicts).
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from forensics import instruments as reg
from forensics.core.words import CONFLICT, NAMED


def missing(v: Any) -> bool:
    """None, NaN or pd.NA."""
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _field_summary(checks: list) -> dict[str, Any]:
    """Fields by outcome over every (launch, call) pair of one scope: a field is a conflict when
    any pair conflicts, consistent when some pair checked it and none conflicts, else unchecked."""
    from forensics.core.kernel_names import CONFLICTS, CONSISTENT  # noqa: PLC0415

    order: list[str] = []
    by: dict[str, list] = {}
    for c in checks:
        if c.field not in by:
            order.append(c.field)
        by.setdefault(c.field, []).append(c)
    conflicts, checked, unchecked = [], [], []
    for f in order:
        cs = by[f]
        bad = [c for c in cs if c.status == CONFLICTS]
        if bad:
            texts = list(dict.fromkeys(c.text() for c in bad))
            conflicts.append(f"{texts[0]}" + (f" (and {len(texts) - 1} other value(s))" if len(texts) > 1 else "")
                             + (f" in {len(bad)} of {len(cs)} launch(es)" if len(cs) > 1 else ""))
        elif any(c.status == CONSISTENT for c in cs):
            checked.append(f)
        else:
            unchecked.append(cs[0].text())
    return {"conflicts": conflicts, "checked": checked, "unchecked": list(dict.fromkeys(unchecked))}


def _launch_checks(launches: dict[str, list[dict]]) -> list:
    """Two launch counters (CUPTI family, ncu) on one kernel symbol: their grids and blocks, as
    multisets over the scope's launches, must be the same."""
    from forensics.core.kernel_names import CONFLICTS, CONSISTENT, UNCHECKED, FieldCheck  # noqa: PLC0415

    out = []
    fams = [f for f, rows in launches.items() if rows]
    for i, fa in enumerate(fams):
        for fb in fams[i + 1:]:
            out.append(FieldCheck("symbol", CONSISTENT, fa, fb))
            for col in ("grid", "block"):
                va = sorted(str(r.get(col)) for r in launches[fa] if not missing(r.get(col)))
                vb = sorted(str(r.get(col)) for r in launches[fb] if not missing(r.get(col)))
                if not va or not vb or len(va) != len(launches[fa]) or len(vb) != len(launches[fb]):
                    out.append(FieldCheck(col, UNCHECKED, None, None, f"{fa if not va else fb} recorded no {col}"))
                    continue
                out.append(FieldCheck(col, CONSISTENT if va == vb else CONFLICTS, f"{fa} {_multiset(va)}",
                                      f"{fb} {_multiset(vb)}"))
    return out


def _multiset(values: list[str]) -> str:
    from collections import Counter  # noqa: PLC0415

    return ", ".join(f"{v} x{n}" if n > 1 else v for v, n in Counter(values).items())


def identity_verdict(verdict: str, reason: str, kernel: str, launches: dict[str, list[dict]],
                     calls: dict[str, list[tuple[dict, list[dict]]]]) -> tuple[str, str, dict[str, Any]]:
    """The per-occurrence decision: counts agreeing is not enough, the instruments must agree on
    WHO ran. ``verdict``/``reason`` come from the count rule; ``launches`` are each launch family's
    rows of this kernel in this scope; ``calls`` each call log's (launch, [call rows]) pairs.

    Every field both instruments carry is compared (:func:`forensics.core.kernel_names.check_call`
    for a cuBLAS/cuBLASLt call against the kernel's name and grid, the call log's own ``identity``
    where it gives one: :func:`~forensics.core.kernel_names.check_amd_call` for hipBLASLt/rocBLAS;
    :func:`forensics.core.cpu_ops.check_op` for a oneDNN/oneMKL call against the profiler's op;
    grid and block between two launch counters). A NAMED verdict with any field in conflict
    becomes CONFLICT, its reason naming each field with both values. Returns
    ``(verdict, reason, {"checked": [...], "unchecked": [...], "conflicts": [...]})``; the reason
    of a NAMED verdict ends with what was checked and what could not be.
    """
    from forensics.core.cpu_ops import check_op  # noqa: PLC0415
    from forensics.core.kernel_names import check_call  # noqa: PLC0415

    checks = _launch_checks(launches)
    for inst_name, pairs in calls.items():
        inst = reg.get(inst_name)
        library = (inst.library if inst is not None and inst.library
                   else {"cublas": "cuBLAS", "cublaslt": "cuBLASLt"}.get(inst_name, inst_name))
        check = inst.identity if inst is not None and inst.identity is not None else check_call
        for launch, rows in pairs:
            if inst is not None and inst.device == reg.CPU:
                checks.extend(check_op(launch, rows, inst_name))
            else:
                for row in rows:
                    checks.extend(check(launch.get("kernel") or kernel, launch.get("grid"), row, library))
    summary = _field_summary(checks)
    if verdict != NAMED or not checks:
        return verdict, reason, summary
    tail = (f"; checked: {', '.join(summary['checked']) or 'no field'}"
            + (f"; unchecked: {'; '.join(summary['unchecked'])}" if summary["unchecked"] else ""))
    if summary["conflicts"]:
        return CONFLICT, (f"counts agree ({reason}) but the instruments disagree on who ran: "
                          + "; ".join(summary["conflicts"]) + tail), summary
    return verdict, reason + tail, summary
