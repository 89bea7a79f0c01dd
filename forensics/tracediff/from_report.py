"""``forensics kernel --from REPORT``: the site a divergence report found, or a refusal that says why.

Two report kinds are read:

* a ``forensics diff`` JSON report (schema ``forensics.tracediff.diff`` version 1, docs/commands/diff.md);
* a Megatron-Core ``tools/determinism/compare_traces.py`` report (version 1: top-level
  ``first_divergence``; version 2: ``rank_results`` keyed by rank). Its first divergence is one
  record and says nothing about the evidence of that record's inputs, so when the two trace
  directories it names still exist they are re-diffed with ``forensics diff`` (which reads Megatron
  traces) and that verdict is used; otherwise the site is refused as unproven.

A site is handed to the kernel rerun ONLY for an ORIGIN (inputs matched, outputs differ) whose
equality rests on full evidence. A RECEIVER (inputs already differed), a CONTROL_FLOW divergence
(no counterpart), an unproven origin, a one-hop-later origin on a trivially deterministic op, or a
record name that maps to no site is refused with one line.

Record name -> site mapping (docs/formats/megatron.md, docs/formats/debugmode.md):

* a record carrying GEMM meta ``{"layout", "acc", "grad"}`` -> ``gemm:<layout>:acc<a>:grad<g>``;
* Transformer Engine roles ``<module>.fprop`` / ``.dgrad`` / ``.wgrad`` -> layouts TN / NN / NT
  (TE ``general_gemm`` in its Linear), grad 0 / 1 / 1, acc from ``metadata.accumulate``;
* ``aten.mm`` / ``aten.addmm`` with operand strides -> layout from :func:`gemm_layout_from_strides`,
  acc 1 for addmm, grad 1 in the backward phase;
* another ATen op (``aten.``, ``prims.``, ``c10d.``...) -> its ATen name (``aten.sum.default``).
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput, BadSite
from forensics.core.site import OP_NAMESPACES, gemm_layout_from_strides, parse_site, site_for_record  # noqa: F401 (OP_NAMESPACES, gemm_layout_from_strides re-exported)
from forensics.core.words import CONTROL_FLOW, INPUTS_UNKNOWN, ORIGIN, RECEIVER
from forensics.runtime.inputs import loads_json
from forensics.tracediff.arms import differences_of
from forensics.tracediff.diff import resolve_reader


@dataclass
class FromReport:
    """What ``--from`` found: a site to rerun (``command``), or a refusal (``reason``)."""

    site: str | None
    occurrence: int | None
    rank: int | None
    verdict: str | None  # ORIGIN | RECEIVER | CONTROL_FLOW | NONE
    command: list[str] | None  # the `forensics kernel` argv, None when refused
    reason: str  # why this site, or why none
    steps: str | None = None
    warnings: list[str] = field(default_factory=list)
    differences: Any = None  # forensics.tracediff.arms.RunDifferences: what differs, as arms

    @property
    def ok(self) -> bool:
        return self.command is not None

    @property
    def site_arg(self) -> str | None:
        """``SITE`` or ``SITE#N``: what ``--site`` gets."""
        if self.site is None:
            return None
        return f"{self.site}#{self.occurrence}" if self.occurrence else self.site

    def command_line(self) -> str:
        """The command as printed: a secret in it (the traced command's) redacted."""
        from forensics.core.redact import redact_argv  # noqa: PLC0415

        return shlex.join(map(str, redact_argv(self.command or [])))


# --------------------------------------------------------------------------- name -> site

def site_for_name(name: str, gemm: dict | None = None) -> str | None:
    """The site a record name maps to, or None: :func:`forensics.core.site.site_for_record`, the same
    mapping ``forensics diff`` and ``forensics kernel --site`` use."""
    return site_for_record(name, gemm)


# --------------------------------------------------------------------------- report reading

def _load(path: Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(path, "no such report file") from None
    except (OSError, UnicodeError) as e:
        raise BadInput(path, f"cannot read report: {e}") from None
    if not text.strip():
        raise BadInput(path, "empty report file")
    obj = loads_json(text, path)  # truncated, trailing data or malformed: said as such, with the line
    if not isinstance(obj, dict):
        raise BadInput(path, "report is not a JSON object")
    return obj


def site_from_report(path: str | Path, command: list[str] | None = None) -> FromReport:
    """Read a ``forensics diff`` or Megatron ``compare_traces.py`` report; never raise for a
    refusal (``FromReport.ok`` is False and ``reason`` says why), raise BadInput for a bad file."""
    path = Path(path)
    rep = _load(path)
    if rep.get("schema") == "forensics.diff":
        if rep.get("version") not in (1, 2):
            raise BadInput(path, f"forensics.diff report version {rep.get('version')!r}; this reads versions 1 and 2")
        return _from_diff_report(rep, path, command)
    if "rank_results" in rep or "first_divergence" in rep or rep.get("status") == "invalid_trace":
        return _from_megatron_report(rep, path, command)
    raise BadInput(path, "not a forensics diff report (schema forensics.tracediff.diff) nor a Megatron compare_traces.py report")


def _refuse(reason: str, *, rank: int | None = None, verdict: str | None = None, site: str | None = None) -> FromReport:
    return FromReport(site=site, occurrence=None, rank=rank, verdict=verdict, command=None, reason=reason)


def _steps_arg(steps: Any) -> str | None:
    vals = [s for s in steps or [] if isinstance(s, int)]
    if not vals or len(vals) != len(steps):
        return None
    lo, hi = min(vals), max(vals)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def command_from_trace(path: str | Path) -> list[str]:
    """The command line a trace recorded (its header's ``argv``: run A's, for ``--command-from``):
    how ``diff``'s ``next:`` line hands on a command that holds a secret without printing it."""
    path = Path(path)
    _, reader = resolve_reader(path, path)
    info = reader.run_info(path) if getattr(reader, "run_info", None) else {}
    argv = (info or {}).get("argv")
    if not isinstance(argv, list) or not argv or not all(isinstance(x, str) for x in argv):
        raise BadInput(path, "this trace recorded no command line (no 'argv' list of strings in its header): "
                             "give the command after '--'")
    return list(argv)


def _traced_command(next_command: Any, base: Path | None = None) -> list[str] | None:
    """The training command inside the report's ``next_command`` (after ``--``, or read from the
    trace that ``--command-from TRACE`` names: relative to here, else to the report's folder), if real."""
    if not isinstance(next_command, str):
        return None
    try:
        argv = shlex.split(next_command)
    except ValueError:
        return None
    if "--command-from" in argv and argv.index("--command-from") + 1 < len(argv):
        where = Path(argv[argv.index("--command-from") + 1])
        if not where.exists() and base is not None and not where.is_absolute() and (base / where).exists():
            where = base / where
        return command_from_trace(where)
    if " -- " not in next_command:
        return None
    cmd = argv[argv.index("--") + 1:] if "--" in argv else []
    return cmd if cmd and cmd != ["<command>"] else None


def _from_diff_report(rep: dict[str, Any], path: Path, command: list[str] | None) -> FromReport:
    ranks = rep.get("ranks")
    if not isinstance(ranks, dict):
        raise BadInput(path, "forensics.diff report without a 'ranks' object")
    firsts: dict[int, dict] = {}
    for key, block in ranks.items():
        if not isinstance(block, dict):
            raise BadInput(path, f"ranks[{key!r}] is not an object")
        d = block.get("first_divergence")
        if d is not None:
            if not isinstance(d, dict) or "verdict" not in d:
                raise BadInput(path, f"ranks[{key!r}].first_divergence lacks a verdict")
            firsts[int(key)] = d
    if not firsts:
        return _refuse("no rank diverged in this report: nothing to hand to the kernel rerun", verdict="NONE")
    if rep.get("comparable") is False:
        fields = [d.get("field") for d in rep.get("comparability") or []
                  if isinstance(d, dict) and d.get("severity") == "not_comparable"]
        return _refuse(f"the two runs were NOT COMPARABLE (they ran different programs: {', '.join(map(str, fields))} "
                       "differ); trace two runs of one program", verdict="NOT_COMPARABLE")
    site_rank = rep.get("site_rank")
    origin = firsts.get(site_rank) if isinstance(site_rank, int) else None
    if origin is None or origin.get("verdict") != ORIGIN:
        origins = [(r, d) for r, d in sorted(firsts.items()) if d.get("verdict") == ORIGIN]
        if not origins:
            r, d = min(firsts.items())
            what = {RECEIVER: "a RECEIVER (its inputs already differed: the difference came from upstream or "
                                "another rank; widen the window or the ranks)",
                    CONTROL_FLOW: "a CONTROL_FLOW divergence (the runs executed different ops; no site to rerun)",
                    INPUTS_UNKNOWN: "INPUTS_UNKNOWN (its inputs were not recorded, so the input test cannot tell an "
                                      "origin from a receiver; record them first)"}
            sources = [src for src in d.get("input_sources") or [] if isinstance(src, dict) and src.get("reading")]
            where = "".join(f"; input {src.get('input')}: {src['reading']}" for src in sources[:2])
            return _refuse(f"first divergence on rank {r} ({d.get('identity')}) is "
                           f"{what.get(d['verdict'], repr(d['verdict']))}{where}; refusing to hand an unproven site "
                           f"to `forensics kernel` (pattern {rep.get('pattern')})", rank=r, verdict=d["verdict"])
        site_rank, origin = origins[0]
    fmt = rep.get("format")
    site = origin.get("site") or rep.get("site")
    identity = origin.get("identity")
    if origin.get("evidence") != "proven" or origin.get("inputs_matched") is not True:
        why = origin.get("input_evidence") or "sampled/summary/metadata digests, or not observed"
        return _refuse(f"ORIGIN {identity} on rank {site_rank} rests on unproven evidence (inputs equal only by "
                       f"{why}): rerun the trace with order-sensitive full digests around it (`forensics trace "
                       "--ordered-digests inputs`)", rank=site_rank, verdict=ORIGIN, site=site)
    hop = [w for w in origin.get("warnings") or [] if str(w).startswith("one hop later")]
    if hop:
        return _refuse(f"ORIGIN {identity} on rank {site_rank}: {hop[0]}", rank=site_rank, verdict=ORIGIN, site=site)
    if not site:
        return _refuse(f"ORIGIN {identity} on rank {site_rank} (format {fmt}) maps to no site: a record name is a "
                       "site only for GEMM meta or a dispatcher op of a known namespace (docs/formats/megatron.md)",
                       rank=site_rank, verdict=ORIGIN)
    try:
        parse_site(str(site))  # the grammar `forensics kernel --site` accepts, and `diff` names by
    except BadSite as e:
        return _refuse(f"ORIGIN {identity} on rank {site_rank}: the report's site {site!r} is not a site "
                       f"`forensics kernel --site` accepts ({e})", rank=site_rank, verdict=ORIGIN)
    occurrence = origin.get("occurrence") if isinstance(origin.get("occurrence"), int) else None
    steps = _steps_arg((ranks.get(str(site_rank)) or {}).get("steps"))
    cmd = command or _traced_command(rep.get("next_command"), path.parent)
    res = FromReport(site=site, occurrence=occurrence, rank=site_rank, verdict=ORIGIN, command=None,
                     reason=f"ORIGIN {identity} on rank {site_rank} (evidence proven, pattern {rep.get('pattern')})",
                     steps=steps, warnings=list(origin.get("warnings") or []))
    res.differences = differences_of(rep, cmd)
    armed = {f"env.{k.name}" for k in res.differences.knobs if k.b is not None}
    armed |= {"argv"} if res.differences.argv_b else set()
    differs = [d for d in rep.get("comparability") or [] if isinstance(d, dict)
               and d.get("severity") in ("warning", "info") and d.get("field") not in ("steps",)
               and d.get("field") not in armed]
    for line in _arm_lines(res.differences):
        res.warnings.append(line)
    for k in res.differences.knobs:  # run A had it unset: every arm inherits this shell's value
        if k.a is None and k.b is not None and os.environ.get(k.name) not in (None, k.a):
            res.warnings.append(f"this shell sets {k.name}={os.environ[k.name]!r}, which run A did not set: the arms "
                                f"that stand for run A run with it; unset it to rerun run A's setting")
    res.warnings += res.differences.notes()
    if differs:
        shown = "; ".join(f"{d.get('field')}: A={d.get('a')!r} B={d.get('b')!r}" for d in differs[:3])
        res.warnings.append(f"the diffed runs also differ in what no arm reproduces ({shown}"
                            f"{'; ...' if len(differs) > 3 else ''}): every arm runs "
                            f"{'the given command' if command else 'run A' + chr(39) + 's command'} with this shell's "
                            "setting of these, so what that difference does to the site is not seen here")
    argv = ["forensics", "kernel", "--site", res.site_arg, "--ranks", str(site_rank)]
    if steps:
        argv += ["--steps", steps]
    argv += res.differences.kernel_options()
    res.command = argv + (["--", *cmd] if cmd else [])
    return res


def _arm_lines(diff: Any) -> list[str]:
    """One line per arm that a difference between the runs became (what ``--from`` prints)."""
    out = []
    for k in diff.knobs:
        if k.b is not None:
            base = f"run A's {k.a!r} in every arm (--env)" if k.a is not None else "unset in run A"
            out.append(f"knob {k.name} differs (A={k.a!r} B={k.b!r}): arm --toggle {k.name}={k.b} runs B's value, "
                       f"{base}")
    if diff.argv_b:
        out.append(f"command line differs (A: {shlex.join(diff.argv_a or [])}; B: {shlex.join(diff.argv_b)}): "
                   f"arm c1 runs B's command (--arm-command)")
    return out


def _trace_path(p: Any, report_dir: Path) -> Path | None:
    """A trace path named in a report: as written (relative to the cwd), else next to the report."""
    if not isinstance(p, str) or not p:
        return None
    for cand in (Path(p), report_dir / p):
        if cand.exists():
            return cand
    return None


def _from_megatron_report(rep: dict[str, Any], path: Path, command: list[str] | None) -> FromReport:
    if rep.get("status") == "invalid_trace":
        raise BadInput(path, f"compare_traces.py could not compare the traces: {rep.get('error')}")
    if rep.get("match") is True:
        return _refuse("compare_traces.py found no divergence: nothing to hand to the kernel rerun", verdict="NONE")
    if "rank_results" in rep:
        per_rank = rep["rank_results"]
        if not isinstance(per_rank, dict):
            raise BadInput(path, "rank_results is not an object")
        firsts = {int(r): b.get("first_divergence") for r, b in per_rank.items()
                  if isinstance(b, dict) and b.get("first_divergence")}
    else:
        d = rep.get("first_divergence")
        if not isinstance(d, dict):
            raise BadInput(path, "compare_traces report without a first_divergence")
        key = d.get("key") or d.get("left") or {}
        firsts = {int(key.get("rank", 0)) if isinstance(key, dict) else 0: d}
    if not firsts:
        return _refuse("compare_traces.py report names no first divergence", verdict="NONE")
    left, right = (rep.get("left") or {}).get("path"), (rep.get("right") or {}).get("path")
    kinds = {r: d.get("kind") for r, d in firsts.items()}
    if all(k != "content_mismatch" for k in kinds.values()):
        r = min(kinds)
        return _refuse(f"first divergence on rank {r} is {kinds[r]}: a CONTROL_FLOW divergence (an event exists on "
                       "one side only or in another order); no site to rerun", rank=r, verdict=CONTROL_FLOW)
    if left and right:
        pa, pb = (_trace_path(p, path.parent) for p in (left, right))
        if pa is not None and pb is not None:
            from forensics.tracediff.diff import diff_paths  # noqa: PLC0415 (the differ: only a Megatron report is re-diffed)

            report = diff_paths(pa, pb, fmt="megatron").to_json()
            res = _from_diff_report(report, path, command)
            res.warnings.append(f"verdict from `forensics diff {pa} {pb}` (the compare_traces report alone cannot "
                                "prove the record's inputs matched)")
            return res
    r = min(r for r, k in kinds.items() if k == "content_mismatch")
    rec = firsts[r].get("left") or {}
    name = rec.get("name", (firsts[r].get("key") or {}).get("name"))
    return _refuse(f"first divergence on rank {r} is record {name!r}: a compare_traces report does not carry the "
                   "evidence of that record's inputs, so it cannot tell an ORIGIN from a RECEIVER; keep the two trace "
                   "directories it names, or run `forensics diff LEFT RIGHT --json R` and pass that report",
                   rank=r, verdict="UNPROVEN")
