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
from forensics.core.words import DETERMINISTIC, NAMED, NONDETERMINISTIC, PROCESS_DEPENDENT

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


def build(plan: Any, arm: str, result: dict[str, Any] | None, kres: Any, setting: str = "as run",
          sizes: list[int] | None = None) -> Table:
    """The table of one setting: its replay arm ``arm`` ran every size in one process (``result``: its
    JSON, None when it wrote none); each size's row reads the instruments at its first occurrence."""
    rows: list[Row] = []
    passes = {p.name: p for p in getattr(kres, "passes", [])}
    by_rows = {int(e["rows"]): e for e in (result or {}).get("sizes", [])}
    for m in sizes or sorted(by_rows):
        res = by_rows.get(m)
        label = f"{plan.op}#{res['occurrences'][0]}" if res else f"{plan.op}#?"
        impl, fields = _arm_evidence(kres, arm, label)
        row = Row(m, arm, impl, fields)
        if res is not None:
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
            if result.get("threads_pinned"):
                row.note = f"threads pinned to {result['threads_pinned']} (the program's count at the site)"
            if not res.get("repeats_equal", True):
                row.note = (row.note + "; " if row.note else "") + \
                    f"repeats {', '.join(map(str, res['differing_repeats']))} of {res['repeats']} differ from the first"
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
    full_res = by_rows.get(plan.full_rows)
    table = _verdict(plan, f"{plan.op}#1", rows, full, setting,
                     full_res is not None and not full_res.get("repeats_equal", True))
    table.notes = _notes(kres)
    return table


def _notes(kres: Any) -> list[str]:
    an = getattr(kres, "analysis", None)
    return list(dict.fromkeys(getattr(an, "missing", None) or [])) if an is not None else \
        [getattr(kres, "analysis_error", None) or "no analysis of the replay capture"]


def ranges(values: list[int]) -> str:
    """``[1, 2, 3, 5, 8, 9]`` -> ``1-3, 5, 8-9``: a range only where every integer in it is in ``values``."""
    vs = sorted(set(values))
    out, i = [], 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        out.append(str(vs[i]) if j == i else (f"{vs[i]}, {vs[j]}" if j == i + 1 else f"{vs[i]}-{vs[j]}"))
        i = j + 1
    return ", ".join(out)


def boundaries(checked: list[tuple[int, bool]]) -> list[str]:
    """Where the bits flip between two neighbouring tried sizes: ``between 8 and 9 (8 equal, 9 differs)``; when sizes
    between the two were not tried, it says so (the flip is somewhere in there, or more than one)."""
    out = []
    pts = sorted(checked)
    for (a, ea), (b, eb) in zip(pts, pts[1:]):
        if ea == eb:
            continue
        what = f"between {a} and {b} ({a} {'equal' if ea else 'differs'}, {b} {'equal' if eb else 'differs'}"
        if b - a > 1:
            what += f"; sizes {a + 1}-{b - 1} not tried" if b - a > 2 else f"; size {a + 1} not tried"
        what += ")"
        out.append(what)
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _verdict(plan: Any, label: str, rows: list[Row], full: Row | None, setting: str,
             full_racy: bool = False) -> Table:
    """The verdict says what the tried sizes showed and nothing about a size it did not try."""
    checked = [r for r in rows if r.equal is not None and r is not full]
    unchecked = [r for r in rows if r.equal is None]
    differ = [r for r in checked if not r.equal]
    tried = ranges([r.rows for r in checked])
    ev = ("anchor rows: the first m rows of the full call's output vs the call on m rows, every size in one fresh "
          "process, bit for bit and by order-sensitive digests; implementation and fields: the replay capture's "
          "two-instrument verdicts and library logs at each size's first occurrence")
    if full is None or full.equal is None:
        return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, UNCHECKED,
                     f"{UNCHECKED}: the full call ({plan.full_rows} rows) did not run: no reference", None, ev)
    if full_racy:
        return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, UNCHECKED,
                     f"{UNCHECKED}: two calls on all {plan.full_rows} rows in one process gave different bits: the op "
                     "is not deterministic at the full size (see the repeat verdict), so a shared row that differs "
                     "says nothing about the batch", None, ev)
    tail = f"; not checked: {', '.join(str(r.rows) for r in unchecked)}" if unchecked else ""
    n = len(checked)
    if not differ:
        line = (f"{INVARIANT} at the {n} size(s) tried ({tried}; full call {plan.full_rows} rows): every shared "
                "row's bits equal the full call's (order-sensitive digests agree); sizes not tried were not "
                "checked" + tail)
        return Table(plan.op, label, plan.what, plan.full_rows, setting, rows, INVARIANT, line, None, ev)
    first = differ[0]
    equal_at = [r.rows for r in checked if r.equal]
    flips = boundaries([(r.rows, bool(r.equal)) for r in checked] + [(plan.full_rows, True)])
    what = _what_changed(first, full, plan.full_rows)
    line = (f"{VARIANT}: of the {n} size(s) tried ({tried}; full call {plan.full_rows} rows), the shared rows "
            f"differ from the full call's at {ranges([r.rows for r in differ])}"
            + (f" and are equal at {ranges(equal_at)}" if equal_at else "")
            + f"; first varying size: {first.rows}"
            + (f"; the bits flip {', '.join(flips)}" if flips else "")
            + f"; sizes not tried were not checked{tail}; {what}")
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


@dataclass
class Repeats:
    """The determinism verdict of one setting (``--repeat N``): separate from batch invariance."""

    op: str
    setting: str
    repeat: int
    verdict: str
    verdict_line: str
    per_size: list[dict[str, Any]]
    evidence: str

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "setting": self.setting, "repeat": self.repeat, "verdict": self.verdict,
                "verdict_line": self.verdict_line, "per_size": self.per_size, "evidence": self.evidence}


def repeat_verdict(plan: Any, arm: str, result: dict[str, Any] | None, kres: Any, program: dict[str, Any] | None,
                   setting: str = "as run") -> Repeats:
    """Do N calls of the kept call in one process give the same bits, and the program's own bits?

    * **DETERMINISTIC**: every repeat equals the first, and the first full call equals the program's
      own output at the site (its order-sensitive digest, kept by the keep run);
    * **NONDETERMINISTIC**: a repeat differs from the first in the same process: racy *at a fixed
      choice* when the instruments show the same implementation and fields at every repeat, or the
      choice changed between the repeats (the fields that did are named);
    * **PROCESS-DEPENDENT**: every repeat agrees, but not with the program's own call on the same
      inputs: something chosen per process changed, not a race.
    """
    ev = ("repeats: every call's bits vs the first call's in the same process (bit for bit); the program's own call: "
          "the order-sensitive digest of its outputs at the site, kept by the keep run (site-output.json); the choice: "
          "the replay capture's two-instrument verdicts and library logs at every repeat")
    whole = "the whole call" if not plan.full_rows else None
    if result is None:
        return Repeats(plan.op, setting, 0, UNCHECKED, f"{UNCHECKED}: the replay wrote no result", [], ev)
    if not any(e.get("outputs") for e in result.get("sizes", [])):
        return Repeats(plan.op, setting, 0, UNCHECKED, f"{UNCHECKED}: {plan.op} returned no tensor: no bits to compare",
                       [], ev)
    per_size, racy = [], []
    for e in result.get("sizes", []):
        occ = e.get("occurrences", [])
        seen = []
        for o in occ:
            impl, fields = _arm_evidence(kres, arm, f"{plan.op}#{o}")
            seen.append((impl, tuple(sorted((k, v) for k, v in fields.items() if not k.endswith(" problem")))))
        changed = sorted({k for _, f in seen for k, v in f if any(dict(g).get(k) != v for _, g in seen)} |
                         ({"implementation"} if len({i for i, _ in seen}) > 1 else set()))
        d = {"rows": e["rows"], "repeats": e.get("repeats"), "repeats_equal": e.get("repeats_equal"),
             "differing_repeats": e.get("differing_repeats", []), "choice_changed": changed,
             "implementation": seen[0][0] if seen else "-",
             "named_every_repeat": bool(seen) and all(f"({NAMED})" in i for i, _ in seen)}
        per_size.append(d)
        if not e.get("repeats_equal", True):
            racy.append(d)
    n = max((d["repeats"] or 0) for d in per_size) if per_size else 0
    where = (lambda d: whole or f"{d['rows']} rows")
    if racy:
        parts = []
        for d in racy:
            if d["choice_changed"]:
                how = f", and the choice changed between the repeats ({', '.join(d['choice_changed'])})"
            elif d["named_every_repeat"]:
                how = (f", at a fixed choice (the same implementation, {d['implementation']}, and the same fields at "
                       "every repeat: a race, e.g. atomics or a thread-timed reduction order)")
            else:
                how = (" (the instruments NAMED no implementation at every repeat, so they show no choice, fixed or "
                       "changed, inside the process)")
            parts.append(f"{where(d)}: repeats {ranges(d['differing_repeats'])} of {d['repeats']} differ from the "
                         f"first{how}")
        line = (f"{NONDETERMINISTIC}: the same call, same shape, in one process, gave different bits: "
                + "; ".join(parts) + "; not a choice that changed between processes (one process, the same inputs, "
                "shape and thread count)")
        return Repeats(plan.op, setting, n, NONDETERMINISTIC, line, per_size, ev)
    full = next((e for e in result.get("sizes", []) if e["rows"] == plan.full_rows), None)
    mine = [o.get("ohash_sliced") for o in (full or {}).get("outputs", [])]
    theirs = [o.get("ohash") for o in (program or {}).get("outputs", [])]
    sizes_txt = whole or f"each of {len(per_size)} size(s) ({ranges([d['rows'] for d in per_size])})"
    if program and theirs and mine and theirs != mine:
        line = (f"{PROCESS_DEPENDENT}: {n} repeats at {sizes_txt} in one process gave the same bits, but the full "
                f"call's differ from the program's own call on the same inputs (digests {_hexes(mine)} here, "
                f"{_hexes(theirs)} in the program): a choice made per process changed between the two (thread "
                "count, a heuristic, the environment, memory alignment), not a race inside one"
                + (f"; this setting's environment ({setting}) is not the program's, the first suspect"
                   if setting != "as run" else ""))
        return Repeats(plan.op, setting, n, PROCESS_DEPENDENT, line, per_size, ev)
    prog = ("; the full call's bits equal the program's own call's (order-sensitive digest)" if program and theirs
            else "; the program's own output was not described (no site-output.json): compared within this process "
                 "only")
    line = (f"{DETERMINISTIC} over {n} repeats at {sizes_txt} in one process: every repeat's bits equal the "
            f"first's{prog}; more repeats, other processes or other inputs were not checked")
    return Repeats(plan.op, setting, n, DETERMINISTIC, line, per_size, ev)


def _hexes(values: list[Any]) -> str:
    return ", ".join(f"{int(v):016x}" for v in values)


def print_repeats(r: Repeats, console: Any) -> None:
    for d in r.per_size:
        what = "the whole call" if not d["rows"] else f"{d['rows']} rows"
        bits = "EQUAL" if d["repeats_equal"] else f"DIFFER at repeats {ranges(d['differing_repeats'])}"
        console.print(f"repeat ({r.setting}) {what}: {d['repeats']} calls, {bits}; implementation {d['implementation']}"
                      + (f"; changed between repeats: {', '.join(d['choice_changed'])}" if d["choice_changed"] else ""),
                      soft_wrap=True, markup=False)
    console.print(f"repeat verdict ({r.setting}): {r.verdict_line}", soft_wrap=True, markup=False)
