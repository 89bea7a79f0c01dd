"""The discriminator table over row count, and the batch-invariance verdict.

One row per row count m: what the instruments NAMED for the replayed call (implementation or
kernel, with the verdict of the two-instrument rule), what each library log says about it (the
problem it was given, the algo fields it chose), and whether the first m rows of the full call's
output have the same bits as the call on m rows (bit for bit; order-sensitive digests shown).

Fields are compared with the full call's (the reference row): a field that differs is marked
``*``. The verdict:

* **BATCH-INVARIANT** over the tried sizes: every row count's shared rows equal the full call's
  (bit for bit, and their order-sensitive digests agree);
* **VARIANT**: the sizes whose shared rows differ, the first of them, and what changed with it
  (the implementation, the algo fields, the problem beyond the row count) or, when the
  instruments show the same apart from the row count, "nothing the instruments can see";
* **NOT CHECKED** for a row count whose replay wrote no result (the pass's reason is shown).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.instruments.cublaslt import ALGO_COLUMNS
from forensics.core.words import BATCH_INVARIANT as INVARIANT
from forensics.core.words import BATCH_VARIANT as VARIANT
from forensics.core.words import NOT_CHECKED as UNCHECKED

#: Per call-log instrument: the problem fields and the algo fields a row shows.
PROBLEM_FIELDS = {
    "mkl": ("routine", "transa", "transb", "m", "n", "k"),
    "onednn": ("primitive", "prop_kind", "dtypes", "problem_desc"),
    "cublaslt": ("transa", "transb", "m", "n", "k", "a_type", "c_type", "compute_type"),
    "cublas": ("routine", "transa", "transb", "m", "n", "k"),
}
ALGO_FIELDS = {
    "mkl": ("cnr", "nthr", "dyn", "fastmm"),
    "onednn": ("implementation", "attributes"),
    "cublaslt": ALGO_COLUMNS,
    "cublas": ("algo",),
}


@dataclass
class Row:
    rows: int
    arm: str
    implementation: str = "-"  # "aten::addmm -> oneMKL SGEMM (NAMED)"
    fields: dict[str, str] = field(default_factory=dict)  # "mkl problem", "mkl algo", "grid", ...
    equal: bool | None = None
    bits: str = "not checked"
    digests: str = ""
    note: str = ""
    changed: list[str] = field(default_factory=list)  # field names that differ from the full call's

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "arm": self.arm, "implementation": self.implementation, "fields": self.fields,
                "equal": self.equal, "bits": self.bits, "digests": self.digests, "note": self.note,
                "changed": self.changed}


@dataclass
class Table:
    op: str
    site: str
    what: str
    full_rows: int
    setting: str
    rows: list[Row]
    verdict: str
    verdict_line: str
    first_varying: int | None
    evidence: str
    notes: list[str] = field(default_factory=list)  # what the replay capture's analysis says is missing

    def to_json(self) -> dict[str, Any]:
        return {"notes": self.notes, "op": self.op, "site": self.site, "what": self.what, "full_rows": self.full_rows,
                "setting": self.setting, "rows": [r.to_json() for r in self.rows], "verdict": self.verdict,
                "verdict_line": self.verdict_line, "first_varying": self.first_varying, "evidence": self.evidence}


def _val(v: Any) -> str:
    try:
        import pandas as pd  # noqa: PLC0415

        if v is None or (not isinstance(v, (list, dict, tuple)) and pd.isna(v)):
            return "-"
    except (TypeError, ValueError):
        pass
    return str(v)


def _call_fields(calls: Any) -> dict[str, str]:
    """``{"<instrument> problem": "SGEMM T N 1024 1 4096", "<instrument> algo": "cnr=OFF nthr=2 ..."}``."""
    out: dict[str, str] = {}
    if calls is None or not len(calls):
        return out
    for inst, g in calls.groupby("instrument", sort=True):
        probs, algos = [], []
        for _, c in g.iterrows():
            probs.append(" ".join(_val(c.get(f)) for f in PROBLEM_FIELDS.get(inst, ()) if f in c.index))
            algos.append(" ".join(f"{f}={_val(c.get(f))}" for f in ALGO_FIELDS.get(inst, ()) if f in c.index
                                  and _val(c.get(f)) != "-"))
        out[f"{inst} problem"] = " + ".join(dict.fromkeys(probs)) + (f" (x{len(g)})" if len(g) > 1 else "")
        out[f"{inst} algo"] = " + ".join(dict.fromkeys(algos)) or "-"
    return out


def _arm_evidence(kres: Any, arm: str, label: str) -> tuple[str, dict[str, str]]:
    an = getattr(kres, "analysis", None)
    if an is None:
        return "- (no analysis)", {}
    v = an.verdicts
    v = v[(v["arm"] == arm) & (v["scope"] == label)] if len(v) else v
    impls = []
    for _, r in v.iterrows():
        lib = r.get("library") if "library" in r.index else None
        name = str(r["kernel"]) + (f" -> {lib}" if isinstance(lib, str) and lib and lib not in str(r["kernel"]) else "")
        impls.append(f"{name} ({r['verdict']})")
    fields: dict[str, str] = {}
    lf = an.launches
    if len(lf) and "grid" in lf.columns:
        mine = lf[(lf["arm"] == arm) & (lf["site_label"] == label)]
        grids = [g for g in mine["grid"].dropna().astype(str).unique() if g]
        if grids:
            fields["grid"] = ", ".join(grids)
    cf = an.calls
    if len(cf):
        fields.update(_call_fields(cf[(cf["arm"] == arm) & (cf["site_label"] == label)]))
    return ("; ".join(impls) or "- (nothing NAMED in this arm: see the notes)"), fields


def only_rows_differ(a: str, b: str, m: int, full: int) -> bool:
    """True when problem text ``a`` (the call on m rows) differs from ``b`` (the full call) only where
    ``a`` says m and ``b`` says the full row count, token by token: the row count itself, nothing else."""
    ta, tb = a.split(" "), b.split(" ")
    return len(ta) == len(tb) and all(x == y or (x == str(m) and y == str(full)) for x, y in zip(ta, tb))


def build(plan: Any, arms: list[tuple[int, str]], results_dir: Path, kres: Any, setting: str = "as run") -> Table:
    """The table of one setting: ``arms`` are (row count, arm name), the full call's among them."""
    label = f"{plan.op}#1"
    rows: list[Row] = []
    passes = {p.name: p for p in getattr(kres, "passes", [])}
    for m, arm in arms:
        impl, fields = _arm_evidence(kres, arm, label)
        row = Row(m, arm, impl, fields)
        res_path = Path(results_dir) / f"{arm}.json"
        if res_path.is_file():
            res = json.loads(res_path.read_text())
            row.equal = bool(res.get("equal"))
            outs = res.get("outputs", [])
            if row.equal:
                row.bits = "EQUAL"
            else:
                n = sum(int(o.get("differing_elements", 0)) for o in outs)
                total = sum(_numel(o.get("shape", [])) for o in outs)
                big = max((float(o.get("max_abs_diff", 0.0)) for o in outs), default=0.0)
                row.bits = f"DIFFER ({n}/{total} elements, max |d| {big:.3g})"
            row.digests = ", ".join(f"{o.get('ohash_sliced', 0):016x}/{o.get('ohash_full_rows', 0):016x}" for o in outs)
            if res.get("threads_pinned"):
                row.note = f"threads pinned to {res['threads_pinned']} (the program's count at the site)"
        else:
            p = passes.get(arm)
            why = f"{p.status}: {p.reason}" if p is not None and p.status != "ok" else "no result written"
            row.bits = f"NOT CHECKED ({why})"
        rows.append(row)
    full = next((r for r in rows if r.rows == plan.full_rows), None)
    if full is not None:
        for r in rows:
            if r is full:
                continue
            if r.implementation != full.implementation:
                r.changed.append("implementation")
            for k in sorted(set(r.fields) | set(full.fields)):
                a, b = r.fields.get(k, "-"), full.fields.get(k, "-")
                if a != b and not (k.endswith(" problem") and only_rows_differ(a, b, r.rows, plan.full_rows)):
                    r.changed.append(k)
    table = _verdict(plan, label, rows, full, setting)
    an = getattr(kres, "analysis", None)
    table.notes = list(dict.fromkeys(getattr(an, "missing", None) or [])) if an is not None else \
        [getattr(kres, "analysis_error", None) or "no analysis of the replay capture"]
    return table


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _verdict(plan: Any, label: str, rows: list[Row], full: Row | None, setting: str) -> Table:
    checked = [r for r in rows if r.equal is not None and r is not full]
    unchecked = [r for r in rows if r.equal is None]
    differ = [r for r in checked if not r.equal]
    tried = ", ".join(str(r.rows) for r in checked)
    ev = ("anchor rows: the first m rows of the full call's output vs the call on m rows, each in a fresh process, "
          "bit for bit and by order-sensitive digests; implementation and fields: the replay capture's two-instrument "
          "verdicts and library logs")
    if full is None or full.equal is None:
        return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, UNCHECKED,
                     f"{UNCHECKED}: the full call ({plan.full_rows} rows) did not run: no reference", None, ev)
    if not full.equal:
        return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, VARIANT,
                     f"{VARIANT} at the full size itself: two calls on all {plan.full_rows} rows in one process "
                     "gave different bits (run-to-run nondeterminism, not batch variance)", plan.full_rows, ev)
    if not differ:
        line = (f"{INVARIANT} over the tried sizes {tried} (of {plan.full_rows} rows): every shared row's bits equal "
                "the full call's (order-sensitive digests agree)")
        if unchecked:
            line += f"; not checked: {', '.join(str(r.rows) for r in unchecked)}"
        return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, INVARIANT, line, None, ev)
    first = differ[0]
    equal_at = [str(r.rows) for r in checked if r.equal]
    bounds = ""
    last_diff = differ[-1]
    after = [r for r in checked if r.equal and r.rows > last_diff.rows]
    before = [r for r in checked if r.equal and r.rows < first.rows]
    if after and not before and all(not r.equal for r in checked if r.rows <= last_diff.rows):
        bounds = f" (every size up to {last_diff.rows} differs, every size from {after[0].rows} on is equal)"
    what = _what_changed(first, full, plan.full_rows)
    line = (f"{VARIANT}: the shared rows differ from the full call's ({plan.full_rows} rows) at "
            f"{', '.join(str(r.rows) for r in differ)} row(s)"
            + (f", equal at {', '.join(equal_at)}" if equal_at else "")
            + f"; first varying size: {first.rows}{bounds}; {what}")
    return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, VARIANT, line, first.rows, ev)


def _what_changed(r: Row, full: Row, full_rows: int) -> str:
    """What the instruments show changing between the first varying size and the full call."""
    changes = []
    for k in r.changed:
        a, b = (r.implementation, full.implementation) if k == "implementation" else (r.fields.get(k, "-"),
                                                                                      full.fields.get(k, "-"))
        changes.append(f"{k} {a!s} vs {b!s}")
    if changes:
        return "changed with it: " + "; ".join(changes)
    seen = ", ".join(k for k in r.fields) or "no library log"
    return (f"nothing the instruments can see changed with it: the same implementation ({full.implementation}) and "
            f"the same fields ({seen}) apart from the row count itself; the choice that differs is made inside "
            "the library, below what its log prints")


def markdown(t: Table) -> list[str]:
    """The table as Markdown lines (``*`` marks a field that differs from the full call's)."""
    keys = sorted({k for r in t.rows for k in r.fields})
    head = ["rows", "implementation (two-instrument verdict)"] + keys + ["shared rows vs full call",
                                                                        "order-sensitive digests (m rows alone / full call's)"]
    out = [f"## {t.site}, {t.setting}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in t.rows:
        mark = (lambda k: " *" if k in r.changed else "")
        cells = [f"{r.rows}" + (" (full)" if r.rows == t.full_rows else ""), r.implementation + mark("implementation")]
        cells += [r.fields.get(k, "-") + mark(k) for k in keys]
        cells += [r.bits, r.digests or "-"]
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    out += [""] + [f"Note: {n}" for n in t.notes]
    out += ["", "`*`: differs from the full call's (a problem that differs only by the row count is not marked).",
            "", "Verdict: " + t.verdict_line, "", f"Evidence: {t.evidence}."]
    return out


def print_table(t: Table, console: Any) -> None:
    """The table on a console (rich; plain text in a pipe), then the verdict line."""
    from rich.markup import escape  # noqa: PLC0415
    from rich.table import Table as RTable  # noqa: PLC0415

    keys = sorted({k for r in t.rows for k in r.fields})
    rt = RTable(title=escape(f"{t.site} ({t.setting}): {t.what}"), title_justify="left")
    for h in ["rows", "implementation"] + keys + ["shared rows vs full call"]:
        rt.add_column(h, overflow="fold")
    for r in t.rows:
        def cell(text: str, key: str) -> str:
            return f"[bold yellow]{escape(text)} *[/]" if key in r.changed else escape(text)

        rt.add_row(f"{r.rows}" + (" (full)" if r.rows == t.full_rows else ""),
                   cell(r.implementation, "implementation"), *[cell(r.fields.get(k, "-"), k) for k in keys],
                   escape(r.bits) if r.equal is not False else f"[bold red]{escape(r.bits)}[/]")
    console.print(rt)
    for n in t.notes:
        console.print(f"note: {n}", soft_wrap=True, markup=False)
    console.print("* differs from the full call's (a problem that differs only by the row count is not marked)",
                  soft_wrap=True, markup=False)
    console.print(f"verdict: {t.verdict_line}", soft_wrap=True, markup=False)
