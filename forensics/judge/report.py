"""Rendering an :class:`~forensics.judge.analysis.Analysis`: terminal table, report.md, analysis.json."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.markup import escape

from forensics import instruments
from forensics.runtime.console import make_console, print_fitted_table
from forensics.core.words import AGREE_UNTIED, CONFLICT, DISAGREE, NAMED, SINGLE_SOURCE
from forensics.judge.analysis import Analysis, describe_call

#: Files listed as "not recognised: why" on the terminal (all of them in analysis.json and report.md).
MAX_UNREAD_SHOWN = 20
_STYLE = {NAMED: "bold green", AGREE_UNTIED: "yellow", CONFLICT: "bold red", DISAGREE: "bold red", SINGLE_SOURCE: "yellow"}


def _short(name: object, width: int = 70) -> str:
    s = str(name) if name is not None else "?"
    return s if len(s) <= width else s[: width - 1] + "…"


def print_table(an: Analysis, console: Console | None = None, max_rows: int = 60) -> None:
    console = console or make_console()
    cap = an.capture
    console.print(f"[bold]capture[/bold] {escape(str(cap.manifest.get('single_file') or cap.root))}")  # a path: its own line
    console.print(f"arms: {', '.join(cap.arms) or '-'}  instruments: {', '.join(sorted(cap.instruments())) or '-'}")
    if folds(an, max_rows):  # at scale the counts per verdict come first, before notes and tables
        console.print(summary_line(an), markup=False)
    for line in an.missing:
        console.print(f"[yellow]missing:[/yellow] {escape(str(line))}")
    for line in an.notes:  # a log's own words carry brackets ([Error][cublasLtMatmul...]): never markup
        console.print(f"[yellow]note:[/yellow] {escape(str(line))}")
    odd = an.capture.not_recognised
    for u in odd[:MAX_UNREAD_SHOWN]:
        console.print(f"[yellow]not recognised:[/yellow] {escape(str(u['path']))}: {escape(u['why'])}")
    if len(odd) > MAX_UNREAD_SHOWN:
        console.print(f"[yellow]not recognised:[/yellow] {len(odd) - MAX_UNREAD_SHOWN} more files, listed in analysis.json "
                      "(not_read)")
    noun = what_is_named(an)
    if noun[1] != "kernel":  # the CPU: what the profiler saw where nothing could be NAMED (its word only)
        for line in profiler_ops_lines(profiler_ops_at(an)):
            console.print(escape(line), markup=False)
    if not len(an.verdicts):
        why = ": the files read hold none (the notes above say why)" if an.notes else ""
        console.print(f"[yellow]no {noun[0]} to judge{why}[/yellow]")
        return
    v = an.verdicts
    many = v["arm"].nunique() > 1 or v["rank"].nunique() > 1
    if folds(an, max_rows):  # at scale: the summary (above), the exceptions, the NAMED rows folded
        _print_folded(an, console, noun, max_rows)
        return
    cols, rows = verdict_rows(an, max_rows=max_rows, styled=True, all_columns=False)
    shown = display_names(v, 100 if noun[1] != "kernel" else 48)
    # never a token split at the terminal's width: constant columns said once, else key: value lines
    print_fitted_table(console, f"{noun[0]} counted per instrument family and the two-instrument rule", cols, rows)
    if len(an.verdicts) > max_rows:
        console.print(f"... {len(an.verdicts) - max_rows} more rows in analysis.json")
    if not many:
        console.print(f"arm {v['arm'].iloc[0]}, rank {v['rank'].iloc[0]}; full demangled and mangled names in report.md")
    _print_why_not_named(an, console)
    if any(" ~" in x for x in shown):
        console.print("different kernels with one short name are numbered (name ~1, name ~2): their full names "
                      "are in report.md")
    for line in solution_lines(an):
        console.print(escape(line), markup=False)
    named = an.named
    console.print(f"[bold]{len(named)} of {len(an.verdicts)} (scope, {noun[1]}) pairs NAMED[/bold] "
                  f"({distinct_named(an)} distinct {noun[1]}s)")


def solution_lines(an: Analysis, limit: int = 20) -> list[str]:
    """One line per (log, problem, solution) of the hipBLASLt/rocBLAS calls read: the kernel the library
    chose, as its log states it (hipBLASLt's bench line: ``--solution_index``; rocBLAS's: 0 is its
    default choice), with the scalars. The table's rows are problems; this says which solution ran each."""
    calls = an.calls
    if calls is None or not len(calls) or "solution_index" not in calls.columns or "instrument" not in calls.columns:
        return []
    seen: dict[tuple[str, str, str], int] = {}
    for rec in calls.to_dict("records"):
        inst = instruments.get(rec.get("instrument"))
        sol = rec.get("solution_index")
        if inst is None or inst.device != instruments.ROCM or sol is None or pd.isna(sol):
            continue
        problem, algo = describe_call(rec, inst.name)
        key = (inst.name, problem, algo)
        seen[key] = seen.get(key, 0) + 1
    out = [f"solution: {problem}: {algo} ({n} call(s), {name})" for (name, problem, algo), n in list(seen.items())[:limit]]
    if len(seen) > limit:
        out.append(f"solution: {len(seen) - limit} more (log, problem, solution) in report.md")
    return out


def _print_why_not_named(an: Analysis, console: Console) -> None:
    """One line per CONFLICT row (the fields in conflict) and per arm and rank of AGREE-UNTIED rows."""
    v = an.verdicts
    for r in v[v["verdict"] == CONFLICT].itertuples(index=False):
        ident = r.identity if isinstance(getattr(r, "identity", None), dict) else {}
        console.print(f"[bold red]CONFLICT[/bold red] {r.scope} {_short(r.short_name or r.kernel, 48)}: "
                      + escape("; ".join(ident.get("conflicts") or [])), soft_wrap=True)
    for line in untied_lines(an):
        console.print(f"[yellow]{AGREE_UNTIED}[/yellow] {escape(line)}", soft_wrap=True)


def untied_lines(an: Analysis) -> list[str]:
    """One line per arm and rank whose agreeing instruments are not tied to one run: how many rows,
    and the tie that is missing (forensics.judge.runs)."""
    v = an.verdicts
    if not len(v) or "same_run" not in v.columns:
        return []
    out = []
    for (arm, rank, why), g in v[v["verdict"] == AGREE_UNTIED].groupby(["arm", "rank", "same_run"], dropna=False,
                                                                       sort=False):
        out.append(f"arm {arm} rank {rank}: {len(g)} row(s) where two instruments agree on who ran and how often, "
                   f"but their files are not shown to be one run: {why}; not NAMED (a manifest.yaml listing the "
                   "files states that they belong together: docs/capture-format.md)")
    return out


def provenance_lines(an: Analysis) -> list[str]:
    """Where each counted file came from (report.md's "Provenance" section), one line per file."""
    out = []
    for p in an.provenance:
        name = p.get("path")
        if p.get("duplicate_of"):
            out.append(f"`{name}`: duplicate of `{p['duplicate_of']}` (sha256 {str(p.get('sha256'))[:12]}): not counted")
            continue
        pids = ", ".join(map(str, (p.get("pids") or [])[:8])) or "none recorded"
        when = (f"{p.get('first_utc')} .. {p.get('last_utc')} ({'UTC' if p.get('clock') == 'utc' else 'local time'})"
                if p.get("first_utc") else "no wall-clock time")
        devices = ", ".join(map(str, p.get("devices") or [])) or "not recorded"
        out.append(f"`{name}`: {p.get('instrument')}, judged in {p.get('run') or p.get('arm')}, {p.get('rows')} row(s); "
                   f"pids {pids}; devices {devices}; host {p.get('host') or 'not recorded'}; program {p.get('program') or 'not recorded'}; "
                   f"{when}; sha256 {str(p.get('sha256'))[:16]}")
    return out


#: Above this many ranks (or more rows than the table shows) ``print_table`` prints the summary
#: first: counts per verdict, every row that is not NAMED, the NAMED rows folded to one line per
#: implementation (as ``diff`` folds its clean ranks; analysis.json and report.md have every row).
FOLD_RANKS = 16


def rank_ranges(ranks: object) -> str:
    """Ranks as compact ranges: ``0-3,7,9-95``."""
    rs = sorted({int(r) for r in ranks})  # type: ignore[union-attr]
    out: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def folds(an: Analysis, max_rows: int = 60) -> bool:
    """Whether ``print_table`` prints the summary first and folds the NAMED rows (many ranks or rows)."""
    v = an.verdicts
    return bool(len(v)) and (v["rank"].nunique() > FOLD_RANKS or len(v) > max_rows)


def summary_line(an: Analysis) -> str:
    """``summary: 384 (scope, implementation) pairs over 2 arm(s) x 96 rank(s): 378 NAMED, 6 SINGLE-SOURCE``."""
    v = an.verdicts
    counts = v["verdict"].value_counts()
    order = [NAMED, AGREE_UNTIED, SINGLE_SOURCE, DISAGREE, CONFLICT]
    words = [w for w in order if w in counts.index] + sorted(w for w in counts.index if w not in order)
    return (f"summary: {len(v)} (scope, {what_is_named(an)[1]}) pairs over {v['arm'].nunique()} arm(s) x "
            f"{v['rank'].nunique()} rank(s): " + ", ".join(f"{int(counts[w])} {w}" for w in words))


def _print_folded(an: Analysis, console: Console, noun: tuple[str, str], max_rows: int) -> None:
    """The verdicts at scale: one ``summary:`` line (counts per verdict), the exceptions (every row
    not NAMED, in a fitted table; past ``max_rows`` the rest are counted and in analysis.json), then
    the NAMED rows folded to one line per implementation with their arms, ranks and scopes."""
    v = an.verdicts
    odd = v[v["verdict"] != NAMED]
    if len(odd):
        sub = dataclasses.replace(an, verdicts=odd.reset_index(drop=True))  # its verdict rows: the exceptions
        cols, rows = verdict_rows(sub, max_rows=max_rows, styled=True, all_columns=False)
        if "arm" not in cols:  # one arm and one rank among the exceptions: still say which
            cols = ["arm", "rank"] + cols
            rows = [[str(a), str(r)] + row for a, r, row in zip(sub.verdicts["arm"], sub.verdicts["rank"], rows)]
        print_fitted_table(console, f"exceptions: {len(odd)} pair(s) not NAMED ({noun[0]} counted per instrument "
                           "family and the two-instrument rule)", cols, rows)
        if len(odd) > max_rows:
            console.print(f"... {len(odd) - max_rows} more exception rows in analysis.json")
        _print_why_not_named(an, console)
    else:
        console.print("exceptions: none: every pair NAMED", markup=False)
    named = v[v["verdict"] == NAMED]
    if len(named):
        shown = display_names(named.reset_index(drop=True), 100 if noun[1] != "kernel" else 48)
        groups: dict[str, list[int]] = {}
        for i, label in enumerate(shown):
            groups.setdefault(label, []).append(i)
        for label, idx in groups.items():
            g = named.iloc[idx]
            scopes = sorted({str(x) for x in g["scope"]})
            console.print(f"NAMED, folded: {len(g)} pair(s): {label} on arm(s) {', '.join(sorted(map(str, set(g['arm']))))}, "
                          f"rank(s) {rank_ranges(g['rank'])}, scope(s) {', '.join(scopes[:4])}"
                          + (f" and {len(scopes) - 4} more" if len(scopes) > 4 else "")
                          + " (every row: analysis.json, report.md, --as csv)", markup=False)
    console.print(f"[bold]{len(named)} of {len(v)} (scope, {noun[1]}) pairs NAMED[/bold] "
                  f"({distinct_named(an)} distinct {noun[1]}s)")


#: The JSON report of an analysis (analysis.json, ``analyze --as json``): its name and version
#: (docs/formats/analysis.md lists its keys; the version changes when a key changes meaning or goes).
SCHEMA, SCHEMA_VERSION = "forensics.analysis", 1


def analysis_json(an: Analysis) -> dict:
    """analysis.json's content: ``schema`` and ``version`` first, then the analysis."""
    return {"schema": SCHEMA, "version": SCHEMA_VERSION, **an.to_json()}


#: ``compare``'s JSON report (docs/formats/compare.md).
COMPARE_SCHEMA, COMPARE_VERSION = "forensics.compare", 1


def compare_json(comparison, discriminator, toggles, losses: list | None = None) -> dict:
    """``compare --json``'s content: ``schema`` and ``version``, then the arm comparison, the
    discriminator table, the toggle report and what a reader lost."""
    return {"schema": COMPARE_SCHEMA, "version": COMPARE_VERSION, "comparison": comparison.to_dict(),
            "discriminator": discriminator.to_dict(), "toggles": toggles.to_dict(), "losses": list(losses or [])}


def compare_rows(comparison) -> tuple[list[str], list[list]]:
    """``compare --as csv|markdown``: one row per (arm, occurrence) compared with the baseline."""
    cols = ["arm", "baseline", "toggle", "comparable"]
    rows: list[list] = []
    occ_cols: list[str] = []
    for p in comparison.pairs:
        occ = p.occurrences
        for c in list(getattr(occ, "columns", [])):
            if c not in occ_cols:
                occ_cols.append(c)
    for p in comparison.pairs:
        toggle = ", ".join(f"{k}={v}" for k, v in (p.toggle or {}).items())
        occ = p.occurrences
        for rec in (occ.to_dict("records") if len(occ) else []):
            rows.append([p.arm, p.baseline, toggle, p.comparable] + [rec.get(c) for c in occ_cols])
    return cols + occ_cols, rows


def verdict_rows(an: Analysis, max_rows: int | None = None, styled: bool = False,
                 all_columns: bool = True) -> tuple[list[str], list[list[str]]]:
    """The verdict table's (columns, rows), as the text table shows them (``styled``: the verdict
    in rich markup) or for ``--as csv|markdown`` (``all_columns``: arm and rank always, the full
    kernel name too, every row)."""
    noun = what_is_named(an)
    v = an.verdicts
    many = all_columns or v["arm"].nunique() > 1 or v["rank"].nunique() > 1
    fams = _families(an)
    cpu = noun[1] != "kernel"
    cols = (["arm", "rank"] if many else []) + ["scope", "implementation -> library" if cpu else "kernel (short name)"] + \
        [instruments.FAMILIES[f].column for f in fams] + ["verdict"] + (["kernel", "reason"] if all_columns else [])
    shown = display_names(v, 100 if cpu else 48)
    body = v if max_rows is None else v.head(max_rows)
    rows = []
    for r, label in zip(body.itertuples(index=False), shown):
        c, src = r.counts, r.sources
        rows.append(([str(r.arm), str(r.rank)] if many else []) + [
            str(r.scope), label] + [
            _fmt(c.get(f), src.get(f) if src.get(f) != f else None) for f in fams] + [
            f"[{_STYLE.get(r.verdict, '')}]{r.verdict}[/]" if styled else str(r.verdict)]
            + ([str(r.kernel), str(getattr(r, "reason", "") or "")] if all_columns else []))
    return cols, rows


#: Ops listed per unnameable occurrence (the most frequent first; the rest counted in one line).
PROFILER_OPS_SHOWN = 12


def profiler_ops_at(an: Analysis) -> list[dict]:
    """What torch.profiler recorded inside each site occurrence that has no verdict row (an op no
    second instrument logs: ATen's own reductions, elementwise ops): per (arm, rank, occurrence),
    every op the profiler saw inside the occurrence's range on its thread, nested ones included,
    with its count. The profiler's word only: this names nothing, it shows what there was to see."""
    from parsers import kineto  # noqa: PLC0415 (read only for a site nothing could be NAMED at)

    if not len(an.sites) or "label" not in an.sites.columns:
        return []
    judged = set()
    if len(an.verdicts):
        judged = {(str(r.arm), int(r.rank), str(r.scope)) for r in an.verdicts.itertuples(index=False)}
    wanted: dict[tuple[str, int], set[str]] = {}
    for r in an.sites[["arm", "rank", "label"]].drop_duplicates().itertuples(index=False):
        key = (str(r.arm), int(r.rank))
        if (key[0], key[1], str(r.label)) not in judged:
            wanted.setdefault(key, set()).add(str(r.label))
    out: list[dict] = []
    for f in an.capture.files:
        labels = wanted.get((str(f.arm), int(f.rank) if f.rank is not None else -1))
        if f.instrument != "torch_profiler" or not labels:
            continue
        trace = kineto.read_trace(f.path)
        ops, ann = trace.cpu_ops, trace.annotations
        if not len(ann) or not len(ops):
            continue
        for a in ann[ann["name"].isin(labels)].itertuples(index=False):
            end = a.end_ns if a.end_ns is not None and a.end_ns == a.end_ns else None
            inside = ops[(ops["tid"] == a.tid) & (ops["start_ns"] >= a.start_ns)
                         & ((ops["end_ns"] <= end) if end is not None else True)]
            counts = inside["name"].astype(str).value_counts(sort=False)
            ranked = sorted(((str(n), int(c)) for n, c in counts.items()), key=lambda nc: (-nc[1], nc[0]))
            out.append({"arm": str(f.arm), "rank": int(f.rank), "occurrence": str(a.name), "file": str(f.path),
                        "ops": [{"op": n, "count": c} for n, c in ranked]})
    return sorted(out, key=lambda d: (d["occurrence"], d["arm"], d["rank"]))


def profiler_ops_lines(seen: list[dict]) -> list[str]:
    """``profiler_ops_at`` as text lines: arms that saw the same ops at an occurrence said once."""
    lines: list[str] = []
    groups: dict[tuple, list[str]] = {}
    for d in seen:
        key = (d["occurrence"], tuple((o["op"], o["count"]) for o in d["ops"]))
        groups.setdefault(key, []).append(f"{d['arm']} rank {d['rank']}")
    for (occ, ops), who in groups.items():
        shown = ", ".join(f"{op} x{n}" for op, n in ops[:PROFILER_OPS_SHOWN])
        more = f", and {len(ops) - PROFILER_OPS_SHOWN} more op(s)" if len(ops) > PROFILER_OPS_SHOWN else ""
        lines.append(f"profiler at {occ} ({', '.join(who)}): {shown or 'no op recorded inside its range'}{more}")
    return lines


def what_is_named(an: Analysis) -> tuple[str, str]:
    """(what is counted, what is named): kernel launches on the GPU, implementation ops on the CPU."""
    devices = instruments.devices_of(an.capture.instruments())
    if an.capture.manifest.get("device") in (instruments.CPU, instruments.CUDA):  # the backend `kernel` ran
        devices = {an.capture.manifest["device"]}
    if devices == {instruments.CPU}:
        return "implementation-op executions", "implementation"
    if instruments.CPU in devices:
        return "kernel launches and implementation-op executions", "kernel or implementation"
    return "kernel launches", "kernel"


def verdict_line(an: Analysis) -> str:
    """The closing ``verdict:`` line of ``analyze`` and ``kernel``."""
    n = distinct_named(an)
    noun = what_is_named(an)[1]
    v = an.verdicts
    untied = int(v.loc[v["verdict"] == AGREE_UNTIED, "kernel"].nunique()) if len(v) and "verdict" in v else 0
    tail = (f" ({untied} {noun}(s) {AGREE_UNTIED}: the instruments agree, but their files are not shown to be one run)"
            if untied else "")
    return (f"verdict: {n} {noun}(s) NAMED" if n else f"verdict: no {noun} NAMED") + tail


def distinct_named(an: Analysis) -> int:
    """Distinct NAMED kernels or implementations: a kernel (its mangled symbol where known, else its
    name) together with the library implementation the log names (``aten::mkldnn_convolution ->
    oneDNN convolution jit:avx2`` and ``... jit:sse41`` are two)."""
    named = an.named
    if not len(named):
        return 0
    ident = [(m if isinstance(m, str) and m else k, lib if isinstance(lib, str) else None)
             for k, m, lib in zip(named["kernel"], named["mangled"], named["library"])]
    return len(set(ident))


def _identity(r: object) -> str:
    m = getattr(r, "mangled", None)
    k = getattr(r, "kernel", None)
    lib = getattr(r, "library", None)
    return f"{m if isinstance(m, str) and m else k}|{lib if isinstance(lib, str) else ''}"


def display_names(v, width: int) -> list[str]:
    """Each row's short label; labels that different kernels share are numbered ``~1``, ``~2`` in
    order of first appearance (eleven ``vectorized_elementwise_kernel`` rows of different kernels
    read as which is which)."""
    rows = list(v.itertuples(index=False))
    labels = [_label(r, 10_000) for r in rows]
    kinds: dict[str, dict[str, int]] = {}
    for r, label in zip(rows, labels):
        ids = kinds.setdefault(label, {})
        ids.setdefault(_identity(r), len(ids) + 1)
    out = []
    for r, label in zip(rows, labels):
        ids = kinds[label]
        tag = f" ~{ids[_identity(r)]}" if len(ids) > 1 else ""
        out.append(_short(label, width - len(tag)) + tag)
    return out


def _label(r: object, width: int) -> str:
    """Short name, and on the CPU the library implementation the log names (``aten::mm -> oneMKL SGEMM``)."""
    name = getattr(r, "short_name", None) or getattr(r, "kernel", None)
    lib = getattr(r, "library", None)
    text = f"{name} -> {lib}" if isinstance(lib, str) and lib else str(name)
    return _short(text, width)


def _families(an: Analysis) -> list[str]:
    """Counting families to show: those of the devices the capture's instruments belong to."""
    present = an.capture.instruments()
    devices = {i.device for n in present if (i := instruments.get(n)) and i.family} or {instruments.CUDA}
    return [f for d in sorted(devices) for f in instruments.counting_families(d)]


def _fmt(v: object, inst: str | None = None) -> str:
    if v is None:
        return "-"
    return f"{v} ({inst})" if inst else str(v)


def render_markdown(an: Analysis) -> str:
    cap = an.capture
    lines = [
        "# forensics analysis", "",
        f"- capture: `{cap.manifest.get('single_file') or cap.root}`",
        f"- site: `{an.site or 'all'}`",
        f"- arms: {', '.join(cap.arms) or '-'}",
        f"- instruments present: {', '.join(sorted(cap.instruments())) or 'none'}",
    ]
    if cap.manifest.get("source") == "corpus":
        lines.append("- note: this directory points at the real public corpus, not at a forensics capture")
    if cap.manifest.get("synthetic"):
        lines.append("- **SYNTHETIC capture** (hand-built test data in real formats, not a real run)")
    counted, noun = what_is_named(an)
    one_family = " CUPTI, Kineto and nsys are one family." if noun != "implementation" else ""
    lines += ["", "## The rule", "",
              f"{'An' if noun[0] in 'aeiou' else 'A'} {noun} is NAMED only when two independent instrument families agree on its count "
              f"({counted}) in a scope: {', '.join(instruments.family_label(f) for f in _families(an))}."
              f"{one_family} Counts that agree name it only when every descriptor both instruments carry agrees "
              "(precision, layout, grid and tile vs m x n, batch, library; on the CPU the operation, m, n, k, "
              "layout and precision); otherwise the row is CONFLICT and names the fields (docs/kernel-names.md).",
              ""]
    if an.missing:
        lines += ["## Missing", ""] + [f"- {m}" for m in an.missing] + [""]
    if cap.files or cap.unread:
        lines += ["## Files", ""]
        lines += [f"- read as {f.instrument}: `{f.path}` ({cap.recognised.get(str(f.path), 'listed in the manifest')})"
                  for f in cap.files]
        lines += [f"- {'not counted' if u.get('metadata') else 'not recognised'}: `{u['path']}`: {u['why']}"
                  for u in cap.unread]
        lines += [""]
    if an.provenance:
        lines += ["## Provenance", "", "Where each file read came from, as the file itself says (forensics.judge.runs): "
                  "two instruments NAME a kernel only when their files are tied to one run.", ""]
        lines += [f"- {x}" for x in provenance_lines(an)] + [""]
    ended = [n for n in an.notes if n.startswith("arm ") and (" CRASHED: " in n or " FAILED: " in n or " TIMED OUT: " in n)]
    if ended:
        lines += ["## Arms that did not run to their end", ""] + [f"- {n}" for n in ended] + [""]
    fams = _families(an)
    heads = [instruments.FAMILIES[f].column for f in fams]
    lines += ["## Verdicts", "", f"| arm | rank | scope | {noun} | " + " | ".join(heads) + " | verdict | reason |",
              "|---|---|---|---|" + "---|" * len(heads) + "---|---|"]
    for r, label in zip(an.verdicts.itertuples(index=False), display_names(an.verdicts, 10_000)):
        c = r.counts
        lines.append(f"| {r.arm} | {r.rank} | `{r.scope}` | `{label}` | "
                     + " | ".join(str(c.get(f, "-")) for f in fams) + f" | **{r.verdict}** | {r.reason} |")
    solutions = solution_lines(an, limit=10_000)
    if solutions:
        lines += ["", "## Library solutions (hipBLASLt/rocBLAS)", "",
                  "The kernel each library call chose, as its log states it (0: rocBLAS's default choice):", ""]
        lines += [f"- {x.removeprefix('solution: ')}" for x in solutions]
    named = an.verdicts[an.verdicts["verdict"] == NAMED]
    if len(named):
        lines += ["", f"## Named {noun}s (mangled)", ""]
        for k, m in named[["kernel", "mangled"]].drop_duplicates().itertuples(index=False):
            lines.append(f"- `{k}` — `{m if m is not None else 'not recorded by these instruments'}`")
    if len(an.verdicts):
        lines += ["", "## Full names", "", f"Every {noun} of the table: its label there, the full (demangled) name, "
                  "the mangled symbol where an instrument recorded it.", ""]
        seen: set[str] = set()
        for r, label in zip(an.verdicts.itertuples(index=False), display_names(an.verdicts, 10_000)):
            if label in seen:
                continue
            seen.add(label)
            m = getattr(r, "mangled", None)
            lines.append(f"- `{label}`: `{r.kernel}`" + (f" — `{m}`" if isinstance(m, str) and m else ""))
    return "\n".join(lines) + "\n"


def write_outputs(an: Analysis, out_dir: Path) -> list[Path]:
    """Write analysis.json and report.md into ``out_dir``, or ``out_dir-2``, ``-3``... when it holds anything.

    Never overwrites an earlier analysis (or anything else): the directory is claimed for this
    run (:func:`forensics.runtime.atomic.fresh_dir`) and each file appears whole or not at all.
    """
    from forensics.runtime.atomic import fresh_dir, release_dir, write_atomic  # noqa: PLC0415
    from forensics.core.errors import doing  # noqa: PLC0415

    with doing(f"rendering the analysis of {an.capture.root}"):
        texts = {"analysis.json": json.dumps(analysis_json(an), indent=1, default=str) + "\n",
                 "report.md": render_markdown(an)}
    with doing(f"writing the analysis outputs under {out_dir}"):
        target = fresh_dir(out_dir)
        written: list[Path] = []
        try:
            for name, text in texts.items():
                written.append(write_atomic(target / name, text))
        except BaseException:
            for path in written:  # all or nothing: no half-written analysis directory either
                path.unlink(missing_ok=True)
            release_dir(target)
            raise
    return written
