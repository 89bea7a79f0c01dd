"""The knob report: a rich table for people, JSON for machines, a section for the evidence bundle."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec
from rich.console import Console

from rich.markup import escape
from rich.text import Text

from forensics.runtime.console import make_console, print_fitted_table

from forensics.knobs import StaticScan
from forensics.knobs.catalog import KnobEntry, load_catalog
from forensics.knobs.dynamic import DynamicResult, LateAssignment
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS, ElfFileResult
from forensics.knobs.python_scan import MENTION, READ, UNRESOLVED, WRITE
from forensics.knobs.scope import CANNOT_TELL_STATICALLY, NOT_ON_PATH, ON_PATH, UNKNOWN, ScopeVerdict

SCHEMA = "forensics.knob"
SCHEMA_VERSION = 2
_MENTION_ROWS = 12
_WEAK_LIBRARY_ROWS = 10
_UNREADABLE_LINES = 8


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
        "counts": s.counts, "seconds": round(s.seconds, 3), "complete": s.complete,
        "unreadable": [{"path": p, "reason": r} for p, r in s.unreadable],
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
            "site": v.site, "verdict": v.verdict, "scanned_verdict": v.scanned_verdict, "complete": v.complete,
            "reason": v.reason, "device": v.device, "device_note": v.device_note, "path_kind": v.path.kind,
            "path": v.path.description, "components_present": v.present, "components_missing": v.missing,
            "unscanned": [asdict(u) for u in v.unscanned],
            "on_path": [asdict(e) for e in v.on_path], "off_path": [asdict(e) for e in v.off_path],
            "shared_only": [asdict(e) for e in v.shared_only], "cannot_tell": [asdict(e) for e in v.cannot_tell],
            "writers": [asdict(e) for e in v.writers], "notes": v.notes,
        }
    return out


#: ``knob --as csv|markdown``: one row per finding, Python (read, write, unresolved, mention) and
#: shared library (contains the name, cannot tell).
ROW_COLUMNS = ["kind", "where", "line", "in", "form", "default", "feeds"]


def knob_rows(report: KnobReport) -> tuple[list[str], list[list]]:
    """Every finding of the static scan as rows (the tables' content, never truncated); a library's
    ``form`` is its environment imports and ``feeds`` the strings around the name in it."""
    rows: list[list] = []
    s = report.scan
    for kind in (READ, WRITE, UNRESOLVED, MENTION):
        for f in s.findings(kind):
            rows.append([f"python {kind}", f.file, f.line, f.scope, f.form + (f" ({f.note})" if f.note else ""),
                         f.default or "", f.feeds or ""])
    for lib in s.libraries:
        hit = (lib.names or lib.hits or [None])[0]
        near = " | ".join(hit.before[-2:] + [f"<{hit.string}>"] + hit.after[:2]) if hit is not None else ""
        rows.append([f"library {lib.verdict}", lib.file, "", ", ".join(lib.sections), ", ".join(lib.env_imports),
                     "", near])
    return ROW_COLUMNS, rows


def _table(console: Console, title: str, columns: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    """Print a table of plain text (never read as rich markup: paths and code hold brackets) fitted to
    the width (a terminal's, 100 columns piped): constant columns said once, else ``key: value``
    lines, never a name split (forensics.runtime.console.print_fitted_table)."""
    print_fitted_table(console, title, list(columns), [[escape(c) for c in r] for r in rows])


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
        _table(console, f"{title}: {len(rows)}", ("where", "in", "form", "default/value", "feeds"),
               [(f"{_rel(f.file, roots)}:{f.line}", f.scope, f.form + (f" ({f.note})" if f.note else ""),
                 f.default or "", f.feeds or "") for f in rows])
    mentions = s.findings(MENTION)
    if mentions:
        rows = [(f"{_rel(f.file, roots)}:{f.line}", f.form, f.feeds or "") for f in mentions[:_MENTION_ROWS]]
        if len(mentions) > _MENTION_ROWS:
            rows.append(("...", f"{len(mentions) - _MENTION_ROWS} more (see --json)", ""))
        _table(console, f"Mentions only (docstrings, comments, messages, constants): {len(mentions)}",
               ("where", "form", "text"), rows)
    _render_libraries(s, console, roots)
    for path, reason in s.unreadable[:_UNREADABLE_LINES]:
        _say(console, f"unreadable (not scanned): {path}: {reason}")
    if len(s.unreadable) > _UNREADABLE_LINES:
        _say(console, f"unreadable (not scanned): ... {len(s.unreadable) - _UNREADABLE_LINES} more (see --json)")
    if report.scope is not None:
        _render_scope(report.scope, console, roots, report.name)
    for late in report.late:
        _say(console, f"warning: {late.message}", "yellow")
    if report.dynamic is not None:
        d = report.dynamic
        _say(console, f"dynamic ({d.capture_dir}):", "bold")
        for line in d.summary or ["(no comparable toggle arm)"]:
            _say(console, f"  {line}")
        for line in getattr(d, "reach", []):
            _say(console, f"  {line}")
        if d.error:
            _say(console, f"  {d.error}")
    for note in report.notes:
        _say(console, note)


def _library_groups(s: StaticScan) -> tuple[list[ElfFileResult], list[ElfFileResult], list[ElfFileResult]]:
    """(holds the name, cannot tell with some sign of the name, cannot tell with none)."""
    holds = [lib for lib in s.libraries if lib.verdict == CONTAINS]
    unsure = [lib for lib in s.libraries if lib.verdict == CANNOT_TELL]
    signs = [lib for lib in unsure if lib.fragments or lib.messages or lib.family]
    return holds, signs, [lib for lib in unsure if lib not in signs]


def _render_libraries(s: StaticScan, console: Console, roots: list[str]) -> None:
    holds, signs, bare = _library_groups(s)
    known = set(load_catalog())
    if holds:
        rows = []
        for lib in holds:
            hit = (lib.names or lib.hits)[0]
            near = " | ".join(hit.before[-2:] + [f"<{hit.string}>"] + hit.after[:2])
            rows.append((_rel(lib.file, roots), ", ".join(lib.sections), ", ".join(lib.env_imports), near))
        _table(console, f"Shared libraries holding the name as a string: {len(holds)}",
               ("library", "sections", "env imports", "nearby strings"), rows)
    if signs:
        # strongest signs first: name pieces, then text mentions, then same-prefix names only
        signs = sorted(signs, key=lambda lib: (not lib.fragments, not lib.messages, lib.file))
        rows = []
        for lib in signs[:_WEAK_LIBRARY_ROWS]:
            family = sorted(lib.family, key=lambda n: (n not in known, n))
            fam = ", ".join(n + ("*" if n in known else "") for n in family[:6]) + (f" (+{len(family) - 6})" if len(family) > 6 else "")
            rows.append((_rel(lib.file, roots), ", ".join(lib.env_imports), ", ".join(lib.fragments), fam,
                         lib.messages[0].string if lib.messages else ""))
        if len(signs) > _WEAK_LIBRARY_ROWS:
            rows.append(("...", f"{len(signs) - _WEAK_LIBRARY_ROWS} more (see --json)", "", "", ""))
        _table(console, f"Cannot tell statically (read the environment, no string of the name; signs of it): "
                        f"{len(signs)}", ("library", "env imports", "name pieces",
                                          "same-prefix names held (* catalogued)", "name inside text"), rows)
    if bare:
        _say(console, f"cannot tell statically: {len(bare)} more librar{'y' if len(bare) == 1 else 'ies'} read the environment "
                      "with no sign of the name (no string, no pieces, no same-prefix names); listed in --json, "
                      "and in the scope section when on the site's path")
    if not s.findings() and not holds:
        _say(console, "no Python file and no shared library under these paths holds the name as a string"
                      + (f"; {len(signs) + len(bare)} librar{'y' if len(signs) + len(bare) == 1 else 'ies'} read the environment "
                         "without it, so a static scan cannot tell whether the name is read (only the dynamic check can)"
                         if signs or bare else ""))


def _render_scope(v: ScopeVerdict, console: Console, roots: list[str], name: str = "NAME") -> None:
    colour = {ON_PATH: "green", NOT_ON_PATH: "red"}.get(v.verdict, "yellow")
    if v.verdict == v.scanned_verdict:
        head = f" -- {v.reason}"
    else:
        head = f" -- in the scanned components: {v.scanned_verdict} ({v.reason})"
    console.print(Text.assemble(("scope ", "bold"), f"{v.site}: ", (v.verdict, f"bold {colour}"), head))
    _say(console, f"  path ({v.path.kind}, {v.device}): {v.path.description}")
    if v.device_note:
        _say(console, f"  device: {v.device} ({v.device_note})")
    if v.present:
        _say(console, f"  components scanned: {', '.join(v.present)}")
    for u in v.unscanned:
        _say(console, f"  not scanned: {u.component}: {u.why}; to close: {u.how}")
    for title, rows in (("on path", v.on_path), ("shared component only", v.shared_only),
                        ("cannot tell", v.cannot_tell), ("off path", v.off_path)):
        for e in rows[:8]:
            _say(console, f"  {title}: {_rel(e.where, roots)} -- {e.what}")
        if len(rows) > 8:
            _say(console, f"  {title}: ... {len(rows) - 8} more (see --json)")
    if v.verdict == CANNOT_TELL_STATICALLY:
        _say(console, f"  to decide: the dynamic check (a GPU for CUDA paths), e.g. forensics knob {name} --site {v.site} --values V1,V2 -- CMD")
    elif v.verdict == UNKNOWN and v.unscanned and v.scanned_verdict == NOT_ON_PATH:
        _say(console, "  overall: UNKNOWN until the components above are scanned -- a reader can hide in what was not scanned")
    for note in v.notes:
        _say(console, f"  note: {note}")


class BundleSection(msgspec.Struct):
    """The typed border of a section file (``forensics bundle --section``): what :func:`bundle_section` writes."""

    markdown: str
    title: str | None = None
    data: Any = None


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
    holds, signs, bare = _library_groups(s)
    for lib in holds + signs:
        lines.append(f"| library: {lib.verdict} | `{_rel(lib.file, s.paths)}` | {_md(lib.evidence())} | |")
    lines.append(f"\nMentions only: {len(s.findings(MENTION))}. Libraries that read the environment with no sign of the name "
                 f"(cannot tell statically): {len(bare)}.")
    if s.unreadable:
        lines.append(f"Unreadable, not scanned: {len(s.unreadable)} (first: `{_rel(s.unreadable[0][0], s.paths)}`: {_md(s.unreadable[0][1])}).")
    if report.scope is not None:
        v = report.scope
        scanned = "" if v.scanned_verdict == v.verdict else f" (scanned components: {v.scanned_verdict})"
        lines += ["", f"**Scope at `{v.site}`: {v.verdict}**{scanned} -- {_md(v.reason)}", f"Path ({v.path.kind}, {v.device}): {v.path.description}."]
        lines += [f"- on path: `{_rel(e.where, s.paths)}` -- {_md(e.what)}" for e in v.on_path]
        lines += [f"- cannot tell: `{_rel(e.where, s.paths)}` -- {_md(e.what)}" for e in v.cannot_tell]
        lines += [f"- not scanned: {u.component}: {_md(u.why)}; to close: {_md(u.how)}" for u in v.unscanned]
        lines += [f"- note: {_md(n)}" for n in v.notes]
    lines += [f"- warning: {_md(x.message)}" for x in report.late]
    if report.dynamic is not None:
        lines += ["", "Dynamic (one arm per value):"] + [f"- {x}" for x in report.dynamic.summary + report.dynamic.reach]
    elif report.dynamic_unavailable:
        lines += ["", f"Dynamic: not run ({report.dynamic_unavailable})."]
    data = _relative(data, s.paths)  # no absolute path of the machine that scanned leaves in a bundle
    for path_key in ("paths",):
        data[path_key] = [os.path.basename(p.rstrip("/")) or p for p in data[path_key]]
    return {"title": f"Knob scope: {report.name}", "markdown": "\n".join(lines) + "\n", "data": data}


def knob_json(report: KnobReport) -> dict[str, Any]:
    """What ``forensics knob --json`` writes: :func:`to_json` plus ``bundle_section`` (its title and
    markdown), so that ``forensics bundle --section`` takes the file as it is (docs/bundle.md)."""
    out = to_json(report)
    section = bundle_section(report)
    out["bundle_section"] = {"title": section["title"], "markdown": section["markdown"]}
    return out


def section_from_knob_json(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The bundle section ``{"title", "markdown", "data"}`` of a ``forensics knob --json`` file; None
    when the file carries no ``bundle_section`` (written before it did)."""
    sec = obj.get("bundle_section")
    if not isinstance(sec, dict) or not isinstance(sec.get("markdown"), str):
        return None
    paths = [p for p in obj.get("paths") or [] if isinstance(p, str)]
    data = _relative({k: v for k, v in obj.items() if k != "bundle_section"}, paths)
    data["paths"] = [os.path.basename(p.rstrip("/")) or p for p in data.get("paths") or [] if isinstance(p, str)]
    return {"title": str(sec.get("title") or f"Knob scope: {obj.get('knob')}"), "markdown": sec["markdown"], "data": data}


def _relative(value: Any, roots: list[str]) -> Any:
    """Every string that is a path under a scanned root (or holds one, as ``path:line``) made relative."""
    if isinstance(value, dict):
        return {k: _relative(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [_relative(v, roots) for v in value]
    if isinstance(value, str):
        for root in roots:
            prefix = root.rstrip("/") + "/"
            if prefix in value:
                value = value.replace(prefix, "")
        return value
    return value


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
