"""The knob report: a rich table for people, JSON for machines, a section for the evidence bundle."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.console import Console

from forensics.console import make_console
from rich.table import Table
from rich.text import Text

from forensics.knobs import StaticScan
from forensics.knobs.catalog import KnobEntry
from forensics.knobs.dynamic import DynamicResult, LateAssignment
from forensics.knobs.python_scan import MENTION, READ, UNRESOLVED, WRITE
from forensics.knobs.scope import ScopeVerdict

SCHEMA = "forensics.knob"
SCHEMA_VERSION = 1
_MENTION_ROWS = 12


@dataclass
class KnobReport:
    """Everything ``forensics knob`` found for one knob (and optionally one site)."""

    name: str
    scan: StaticScan
    entry: KnobEntry | None = None
    scope: ScopeVerdict | None = None
    late: list[LateAssignment] = field(default_factory=list)
    dynamic: DynamicResult | None = None
    dynamic_unavailable: str | None = None
    notes: list[str] = field(default_factory=list)


def to_json(report: KnobReport) -> dict[str, Any]:
    """Machine-readable report (stable keys; ``schema``/``version`` first)."""
    s = report.scan
    out: dict[str, Any] = {
        "schema": SCHEMA, "version": SCHEMA_VERSION, "knob": report.name, "paths": s.paths,
        "counts": s.counts, "seconds": round(s.seconds, 3),
        "catalog": asdict(report.entry) if report.entry else None,
        "python": {kind: [asdict(f) for f in s.findings(kind)] for kind in (READ, WRITE, UNRESOLVED, MENTION)},
        "python_parse_errors": {r.file: r.parse_error for r in s.python if r.parse_error},
        "libraries": [lib.to_json() for lib in s.libraries],
        "scope": None, "late_assignments": [asdict(x) for x in report.late],
        "dynamic": report.dynamic.to_json() if report.dynamic else None,
        "dynamic_unavailable": report.dynamic_unavailable, "notes": report.notes,
    }
    if report.scope is not None:
        v = report.scope
        out["scope"] = {
            "site": v.site, "verdict": v.verdict, "reason": v.reason, "path_kind": v.path.kind,
            "path": v.path.description, "components_present": v.present, "components_missing": v.missing,
            "on_path": [asdict(e) for e in v.on_path], "off_path": [asdict(e) for e in v.off_path],
            "shared_only": [asdict(e) for e in v.shared_only], "cannot_tell": [asdict(e) for e in v.cannot_tell],
            "writers": [asdict(e) for e in v.writers], "notes": v.notes,
        }
    return out


def _row(table: Table, *cells: str) -> None:
    """Add a row of plain text (never parsed as rich markup: paths and code contain brackets)."""
    table.add_row(*(Text(c) for c in cells))


def _say(console: Console, text: str, style: str | None = None) -> None:
    console.print(Text(text, style=style or ""))


def _rel(path: str, roots: list[str]) -> str:
    for root in roots:
        if path.startswith(root.rstrip("/") + "/"):
            return os.path.relpath(path, root)
    return path


def render(report: KnobReport, console: Console | None = None) -> None:
    """Print the report as tables (Python findings, libraries, scope, dynamic)."""
    console = console or make_console()
    s, roots = report.scan, report.scan.paths
    c = s.counts
    _say(console, f"{report.name}: scanned {c.get('python_files', 0)} Python files and "
                  f"{c.get('shared_libraries', 0)} shared libraries under {', '.join(roots)} in {s.seconds:.1f} s "
                  f"({c.get('cache_hits', 0)} from cache)")
    if report.entry:
        e = report.entry
        _say(console, f"catalog [{e.certainty}]: {e.governs}\n  scope: {', '.join(e.scope) or '-'}"
                      f"{'; NOT: ' + ', '.join(e.not_scope) if e.not_scope else ''}"
                      f"{'; uncertain: ' + ', '.join(e.uncertain_scope) if e.uncertain_scope else ''}; read at: {e.read_at}"
                      f"{' (' + e.read_at_note + ')' if e.read_at_note else ''}\n  source: {e.source}")
    else:
        _say(console, "catalog: not catalogued (no documented scope; static and dynamic evidence only)")
    for kind, title in ((READ, "Python reads"), (WRITE, "Python writers (set the knob)"), (UNRESOLVED, "Name passed to other functions (may read it)")):
        rows = s.findings(kind)
        if not rows:
            continue
        t = Table(title=f"{title}: {len(rows)}", show_lines=False)
        for col in ("where", "in", "form", "default/value", "feeds"):
            t.add_column(col, overflow="fold")
        for f in rows:
            _row(t, f"{_rel(f.file, roots)}:{f.line}", f.scope, f.form + (f" ({f.note})" if f.note else ""), f.default or "", f.feeds or "")
        console.print(t)
    mentions = s.findings(MENTION)
    if mentions:
        t = Table(title=f"Mentions only (docstrings, comments, messages, constants): {len(mentions)}")
        for col in ("where", "form", "text"):
            t.add_column(col, overflow="fold")
        for f in mentions[:_MENTION_ROWS]:
            _row(t, f"{_rel(f.file, roots)}:{f.line}", f.form, f.feeds or "")
        if len(mentions) > _MENTION_ROWS:
            _row(t, "...", f"{len(mentions) - _MENTION_ROWS} more (see --json)", "")
        console.print(t)
    if s.libraries:
        t = Table(title=f"Shared libraries: {len(s.libraries)}")
        for col in ("library", "verdict", "sections", "env imports", "nearby strings / name pieces"):
            t.add_column(col, overflow="fold")
        for lib in s.libraries:
            near = " | ".join(lib.hits[0].before[-2:] + [f"<{lib.hits[0].string}>"] + lib.hits[0].after[:2]) if lib.hits else ", ".join(lib.fragments)
            _row(t, _rel(lib.file, roots), lib.verdict, ", ".join(lib.sections), ", ".join(lib.env_imports), near)
        console.print(t)
    if not s.findings() and not s.libraries:
        _say(console, "no Python file or shared library under these paths contains the name")
    if report.scope is not None:
        _render_scope(report.scope, console, roots)
    for late in report.late:
        _say(console, f"warning: {late.message}", "yellow")
    if report.dynamic is not None:
        d = report.dynamic
        _say(console, f"dynamic ({d.capture_dir}):", "bold")
        for line in d.summary or ["(no comparable toggle arm)"]:
            _say(console, f"  {line}")
        if d.error:
            _say(console, f"  {d.error}")
    for note in report.notes:
        _say(console, note)


def _render_scope(v: ScopeVerdict, console: Console, roots: list[str]) -> None:
    colour = {"ON PATH": "green", "NOT ON PATH": "red"}.get(v.verdict, "yellow")
    console.print(Text.assemble(("scope ", "bold"), f"{v.site}: ", (v.verdict, f"bold {colour}"), f" -- {v.reason}"))
    _say(console, f"  path: {v.path.description}")
    if v.present:
        _say(console, f"  components scanned: {', '.join(v.present)}")
    if v.missing:
        _say(console, f"  components not installed here: {', '.join(v.missing)}")
    for title, rows in (("on path", v.on_path), ("shared component only", v.shared_only),
                        ("off path", v.off_path), ("cannot tell", v.cannot_tell)):
        for e in rows[:8]:
            _say(console, f"  {title}: {_rel(e.where, roots)} -- {e.what}")
        if len(rows) > 8:
            _say(console, f"  {title}: ... {len(rows) - 8} more (see --json)")
    for note in v.notes:
        _say(console, f"  note: {note}")


def bundle_section(report: KnobReport) -> dict[str, Any]:
    """``{"title", "markdown", "data"}`` for the evidence bundle (paths relative, no environment values)."""
    data = to_json(report)
    lines = [f"## Knob scope: `{report.name}`", ""]
    if report.entry:
        e = report.entry
        lines += [f"- Catalog ({e.certainty}): {e.governs}",
                  f"- Documented scope: {', '.join(e.scope) or '-'}" + (f"; not: {', '.join(e.not_scope)}" if e.not_scope else ""),
                  f"- Read at: {e.read_at}" + (f" ({e.read_at_note})" if e.read_at_note else ""), f"- Source: {e.source}"]
    else:
        lines.append("- Not in the shipped catalog.")
    s = report.scan
    lines += ["", f"Static scan: {s.counts.get('python_files', 0)} Python files, {s.counts.get('shared_libraries', 0)} shared libraries.", "",
              "| kind | where | form | default/value |", "|---|---|---|---|"]
    for kind in (READ, WRITE, UNRESOLVED):
        for f in s.findings(kind):
            lines.append(f"| {kind} | `{_rel(f.file, s.paths)}:{f.line}` ({f.scope}) | {f.form} | {_md(f.default or '')} |")
    for lib in s.libraries:
        lines.append(f"| library: {lib.verdict} | `{_rel(lib.file, s.paths)}` | {', '.join(lib.sections) or ', '.join(lib.fragments)} | |")
    lines.append(f"\nMentions only: {len(s.findings(MENTION))}.")
    if report.scope is not None:
        v = report.scope
        lines += ["", f"**Scope at `{v.site}`: {v.verdict}** -- {v.reason}", f"Path: {v.path.description}."]
        lines += [f"- on path: `{_rel(e.where, s.paths)}` -- {_md(e.what)}" for e in v.on_path]
        lines += [f"- note: {_md(n)}" for n in v.notes]
    lines += [f"- warning: {_md(x.message)}" for x in report.late]
    if report.dynamic is not None:
        lines += ["", "Dynamic (one arm per value):"] + [f"- {x}" for x in report.dynamic.summary]
    elif report.dynamic_unavailable:
        lines += ["", f"Dynamic: not run ({report.dynamic_unavailable})."]
    for path_key in ("paths",):
        data[path_key] = [os.path.basename(p.rstrip("/")) or p for p in data[path_key]]
    return {"title": f"Knob scope: {report.name}", "markdown": "\n".join(lines) + "\n", "data": data}


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
