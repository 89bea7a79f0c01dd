"""The evidence bundle: what to send to a library owner, as one ``.tar.gz`` (docs/bundle.md).

``write_bundle(capture_dir, out_path, site=None)`` writes, under one top folder:

* ``report.md``: the verdict, kernel symbols (mangled and demangled), problem and algo
  descriptors, launch counts per instrument, the arm and discriminator tables, toggle results,
  the environment (GPU, driver, CUDA, cuBLAS, torch, TE) and a plot of the site's launches;
* ``evidence.json``: the same, for machines;
* ``raw/<folder>/rank<R>/``: the site's own raw records only (site JSONL records, CUPTI records of
  its launches, cuBLASLt lines of its calls);
* ``manifest.yaml`` (redacted) and ``repro.py`` (torch only; runs on a CPU too).

Secrets never leave: one :class:`forensics.core.redact.Redactor` learns every secret in what is about
to leave (manifest, environments, raw lines, names), redacts every member, every member name and
the top folder name, then checks every byte again and refuses to write when anything survived
(fail closed). The gzip header carries no file name. An existing output file is never overwritten;
the tarball appears whole or not at all (forensics.runtime.atomic).
"""
from __future__ import annotations

import gzip
import io
import json
import re
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import pandas as pd
import yaml

from forensics import __version__, instruments
from forensics.instruments.cublaslt import ALGO_COLUMNS as _CUBLASLT_ALGO
from forensics.judge.arm_evidence import Evidence, load_evidence
from forensics.core.redact import Redactor, redact_obj
from forensics.runtime.atomic import OutputExists, atomic_output, refuse_existing  # noqa: F401 - OutputExists re-exported
from forensics.core.errors import BadInput, doing
from forensics.evidence.repro import conv_problem, gemm_problem, render_repro, repro_knobs, repro_threads
from forensics.core.site import Occurrence, is_gemm_label, parse_site_or_occurrence, split_label
from forensics.core.words import CONFLICT, NAMED
from forensics.judge.verdicts import (
    ArmComparison,
    arm_knobs,
    records,
    DiscriminatorTable,
    ToggleReport,
    baseline_arm,
    compare_arms,
    discriminator_table,
    toggle_report,
)

ENV_KEYS = ("device", "capability", "sm_count", "driver", "cuda", "cublas", "cublaslt", "cudnn", "torch",
            "transformer_engine", "python", "platform")
PROBLEM_COLUMNS = ["m", "n", "k", "layout", "a_type", "b_type", "c_type", "d_type", "compute_type", "epilogue",
                   "beta"]
#: The cuBLASLt algo descriptor, all of it (forensics.instruments.cublaslt: the one definition).
ALGO_COLUMNS = list(_CUBLASLT_ALGO)
#: hipBLASLt/rocBLAS: the kernel the library chose (solution index; hipBLASLt's algo method) and the scalars
#: (beta is a problem column already); empty for NVIDIA's and the CPU's logs.
AMD_COLUMNS = ["solution_index", "algo_method", "alpha"]
#: The CPU backend's library-call descriptors (oneMKL routine/CNR/threads, oneDNN primitive) and attribution.
CPU_COLUMNS = ["transa", "transb", "routine", "cnr", "nthr", "primitive", "implementation", "prop_kind",
               "attributes", "problem_desc", "attributed_by"]
#: Columns whose values are counts or sizes: written as the instruments wrote them (8, not 8.0).
INTEGER_COLUMNS = ("m", "n", "k", "nthr", "lda", "ldb", "ldc", "ldd", "num_splits_k", "algo_id", "stages")
_HEADER = re.compile(r'"event"\s*:\s*"header"')


@dataclass
class Bundle:
    """Everything the bundle says, before it is written (``evidence.json`` is ``to_json()``)."""

    capture: str
    site: str | None
    focus: str | None  # the occurrence the report centres on (first divergent origin when known)
    synthetic: bool
    comparison: ArmComparison
    discriminator_site: DiscriminatorTable
    discriminator_gemm: DiscriminatorTable
    toggles: ToggleReport
    verdicts: pd.DataFrame
    counts: pd.DataFrame
    kernels: pd.DataFrame  # arm, mangled, demangled, family, launches
    problems: pd.DataFrame  # arm, rank, label, problem + algo columns
    environment: dict[str, dict[str, Any]]
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sections: list[dict[str, Any]] = field(default_factory=list)  # {"title", "markdown", "data"} from other tools
    #: "cpu" when the capture's instruments are the CPU backend's (profiler, oneDNN, oneMKL logs), else "cuda"
    device: str = "cuda"
    #: CPU: what torch.profiler recorded inside each occurrence nothing could be NAMED at (op, count)
    profiler_ops: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": "forensics.bundle", "version": 1, "tool_version": __version__, "synthetic": self.synthetic,
            "device": self.device,
            "capture": self.capture, "site": self.site, "focus": self.focus,
            "verdicts": records(self.verdicts), "counts": records(self.counts),
            "kernels": records(self.kernels), "problems": records(self.problems),
            "comparison": self.comparison.to_dict(),
            "discriminator": {"site": self.discriminator_site.to_dict(), "gemm": self.discriminator_gemm.to_dict()},
            "toggles": self.toggles.to_dict(), "environment": self.environment,
            "missing": self.missing, "notes": self.notes,
            "sections": [{"title": x.get("title"), "data": x.get("data")} for x in self.sections],
            "profiler_ops": self.profiler_ops,
        }


# --------------------------------------------------------------------------- choosing the site
def choose_site(ev: Evidence, comparison: ArmComparison, site: str | None) -> tuple[str | None, str | None]:
    """(site, focus occurrence): the given site, else the first divergent origin's, else the first GEMM
    site, else the first site recorded (a capture of a non-GEMM site with no divergence)."""
    labels = set(ev.sites["label"]) if len(ev.sites) else set()
    if site is not None:
        parsed = parse_site_or_occurrence(site)
        if isinstance(parsed, Occurrence):
            if str(parsed) not in labels:
                raise BadInput(_capture_name(ev), f"site occurrence {parsed} is not in the capture's site records "
                                                  f"({_some(labels)})")
            return str(parsed.site), str(parsed)
        if str(parsed) not in set(ev.sites["site"]):
            raise BadInput(_capture_name(ev), f"site {parsed} is not in the capture's site records ({_some(labels)})")
        site = str(parsed)
    firsts = [fd for p in comparison.replicas if p.comparable for _, fd in sorted(p.first_divergence.items())]
    firsts += [fd for p in comparison.pairs if p.comparable and p.toggle for _, fd in sorted(p.first_divergence.items())]
    if site is not None:
        firsts = [fd for fd in firsts if fd["site"] == site]
    origins = [fd for fd in firsts if fd.get("role") == "origin"] or firsts
    if origins:
        return origins[0]["site"], origins[0]["label"]
    if site is not None:
        first = ev.sites[ev.sites["site"] == site].sort_values(["rank", "seq"]).iloc[0]
        return site, first["label"]
    gemm = ev.sites[ev.sites["site"].map(is_gemm_label)] if len(ev.sites) else ev.sites
    for pool in (gemm, ev.sites):
        if len(pool):
            first = pool.sort_values(["rank", "seq"]).iloc[0]
            return first["site"], first["label"]
    return None, None


def _some(labels: set[str]) -> str:
    sites = sorted({split_label(x)[0] for x in labels})
    return "sites present: " + (", ".join(sites[:8]) + (" ..." if len(sites) > 8 else "") if sites else "none")


def _capture_name(ev: Evidence) -> str:
    return str(ev.capture.root) if ev.capture is not None else "<capture>"


# --------------------------------------------------------------------------- gathering
def collect(capture_dir: str | Path | Evidence, site: str | None = None) -> tuple[Bundle, Evidence]:
    """Compute everything the bundle reports (no file is written)."""
    ev = capture_dir if isinstance(capture_dir, Evidence) else load_evidence(capture_dir)
    if ev.sites.empty:
        raise BadInput(_capture_name(ev), "no site records (sites.jsonl) in this capture: a bundle is about a site")
    everything = compare_arms(ev)
    site, focus = choose_site(ev, everything, site)
    comparison = compare_arms(ev, site)
    disc_site = discriminator_table(ev, site, comparison=comparison)
    disc_gemm = discriminator_table(ev, None, comparison=everything)
    toggles = toggle_report(ev, site)
    an = ev.analysis
    in_site = (lambda scope: split_label(str(scope))[0] == site)
    verdicts = an.verdicts[[in_site(s) for s in an.verdicts["scope"]]] if an is not None and len(an.verdicts) \
        else pd.DataFrame()
    counts = an.counts[[in_site(s) for s in an.counts["scope"]]] if an is not None and len(an.counts) \
        else pd.DataFrame()
    kernels, problems = _kernels_and_problems(ev, site)
    missing = list(getattr(an, "missing", []) or [])
    if site and not len(verdicts):  # say whether the site ran and why nothing was counted in it
        from forensics.judge.analysis import no_launch_message  # noqa: PLC0415

        labels = sorted({str(x) for x in ev.sites["label"].dropna()}) if "label" in ev.sites else []
        present = set(ev.capture.instruments()) if ev.capture is not None else set()
        message = no_launch_message(site, labels, present, ev.manifest.get("device"))
        if message not in missing:
            missing.append(message)
    bundle = Bundle(
        capture=Path(_capture_name(ev)).name, site=site, focus=focus,
        synthetic=bool(ev.manifest.get("synthetic")), comparison=comparison, discriminator_site=disc_site,
        discriminator_gemm=disc_gemm, toggles=toggles, verdicts=verdicts.reset_index(drop=True),
        counts=counts.reset_index(drop=True), kernels=kernels, problems=problems,
        environment=_environment(ev), missing=missing,
        notes=list(getattr(an, "notes", []) or []), device=_device(ev))
    if an is not None and bundle.device == "cpu":  # where nothing is NAMED: what the profiler saw there
        from forensics.judge.report import profiler_ops_at  # noqa: PLC0415 (reads the profiler traces again)

        bundle.profiler_ops = [d for d in profiler_ops_at(an) if split_label(d["occurrence"])[0] == site]
    return bundle, ev


def _device(ev: Evidence) -> str:
    """"cpu" for a capture of the CPU backend alone (its counts are implementation-op executions), else "cuda"."""
    if ev.manifest.get("device") in ("cpu", "cuda"):  # what `forensics kernel` ran: the backend, whatever was captured
        return str(ev.manifest["device"])
    try:
        present = ev.capture.instruments() if ev.capture is not None else set()
    except Exception:  # noqa: BLE001 - the report then speaks of launches, as before
        return "cuda"
    return "cpu" if instruments.devices_of(present) == {instruments.CPU} else "cuda"


def _site_rows(ev: Evidence, site: str | None) -> pd.DataFrame:
    return ev.sites[ev.sites["site"] == site] if site is not None else ev.sites.iloc[0:0]


def _kernels_and_problems(ev: Evidence, site: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    from forensics.judge.arm_evidence import kernel_family  # noqa: PLC0415

    kernels, problems = {}, []
    for r in _site_rows(ev, site).to_dict("records"):
        for lr in ev.launch_rows(r["arm"], r["rank"], r["label"]):
            mangled = lr.get("mangled") if isinstance(lr.get("mangled"), str) else lr.get("kernel")
            key = (r["arm"], mangled)
            row = kernels.setdefault(key, {"arm": r["arm"], "mangled": mangled, "demangled": lr.get("kernel"),
                                           "family": kernel_family(str(lr.get("kernel"))), "grid": lr.get("grid"),
                                           "block": lr.get("block"), "instrument": lr.get("instrument"),
                                           "launches": 0})
            row["launches"] += 1
        for cr in ev.call_rows(r["arm"], r["rank"], r["label"]):
            problems.append({"arm": r["arm"], "rank": r["rank"], "label": r["label"],
                             **{c: _whole(cr.get(c)) if c in INTEGER_COLUMNS else cr.get(c)
                                for c in PROBLEM_COLUMNS + ALGO_COLUMNS + CPU_COLUMNS + AMD_COLUMNS}})
    kcols = ["arm", "mangled", "demangled", "family", "grid", "block", "instrument", "launches"]
    pcols = ["arm", "rank", "label", *PROBLEM_COLUMNS, *ALGO_COLUMNS, *CPU_COLUMNS, *AMD_COLUMNS]
    return pd.DataFrame(list(kernels.values()), columns=kcols), pd.DataFrame(problems, columns=pcols, dtype=object)


def _whole(v: Any) -> Any:
    """A count read into a float column (pandas widens integers that sit beside missing values) as the
    integer the instrument wrote; anything else as it is."""
    if isinstance(v, float) and v == v and v.is_integer():
        return int(v)
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            return _whole(v.item())
        except (ValueError, AttributeError):
            return v
    return v


def _environment(ev: Evidence) -> dict[str, dict[str, Any]]:
    """Versions per arm (GPU, driver, CUDA, cuBLAS, torch, TE...), from environment.json or the manifest."""
    out = {}
    arms = list(dict.fromkeys([*(a["name"] for a in ev.manifest.get("arms", []) if a.get("role", "arm") == "arm"),
                               *sorted(set(ev.sites["arm"]))]))
    manifest_env = ev.manifest.get("environment") or {}
    cpu = _device(ev) == "cpu"
    for arm in arms:
        env = ev.environments.get(arm, {})
        entry = next((a for a in ev.manifest.get("arms", []) if a.get("name") == arm), {})
        versions = entry.get("versions") or {}
        out[arm] = {k: (versions.get(k) or env.get(k) or manifest_env.get(k)) for k in ENV_KEYS}
        if cpu:  # the CPU backend: the device is the CPU, its capability what the arm's own process reported
            out[arm]["device"] = out[arm]["device"] or "cpu"
            out[arm]["capability"] = out[arm]["capability"] or _cpu_capability(ev, arm)
    return {arm: redact_obj(v) for arm, v in out.items()}  # an arm's name is a folder, not a secret's name


def _cpu_capability(ev: Evidence, arm: str) -> str | None:
    """An arm's CPU capability as its own process reported it: ATen's (the cpuprobe header's
    ``cpu_capability``), and oneDNN's ISA (its verbose log's ``info,cpu,isa:`` line), each named by source."""
    root = getattr(ev.capture, "root", None)
    if root is None:
        return None
    found: dict[str, str] = {}
    for path in sorted(Path(root, arm).glob("rank*/cpuprobe*.jsonl"))[:8]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                head = json.loads(fh.readline() or "{}")
        except (OSError, ValueError):
            continue
        if isinstance(head, dict) and head.get("cpu_capability"):
            found.setdefault("ATen", str(head["cpu_capability"]))
    for path in sorted(Path(root, arm).glob("rank*/onednn*.log"))[:8]:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                for _, line in zip(range(40), fh):
                    if ",info,cpu,isa:" in line:
                        found.setdefault("oneDNN", line.split(",info,cpu,isa:", 1)[1].strip())
        except OSError:
            continue
    return "; ".join(f"{k}: {v}" for k, v in found.items()) or None


# --------------------------------------------------------------------------- raw records
def _raw_members(ev: Evidence, bundle: Bundle) -> dict[str, str]:
    """``raw/<folder>/rank<R>/<file>`` -> the site's own lines of each raw file."""
    members: dict[str, list[tuple[int, str]]] = {}
    if bundle.site is None or ev.capture is None:
        return {}
    root = ev.capture.root
    labels = set(_site_rows(ev, bundle.site)["label"])
    lines_of: dict[Path, set[int]] = {}
    an_sites = getattr(ev.analysis, "sites", None)
    if an_sites is not None and len(an_sites):
        for r in an_sites[an_sites["label"].isin(labels)].to_dict("records"):
            for f in ev.capture.of("sites", arm=r.get("folder", r["arm"]), rank=r["rank"]):
                lines_of.setdefault(f.path, set()).add(int(r["line"]))
    call_logs = instruments.names_of_role(instruments.CALLS)  # cuBLASLt, cuBLAS, oneDNN, oneMKL: line-oriented text
    # text files only: CUPTI's JSON lines, rocprofv3's CSV rows (its header line kept with them), the call logs
    for frame, text_instruments in ((ev.launches, ("cupti", "rocprofv3")), (ev.calls, call_logs)):
        if frame is None or frame.empty or "line" not in frame.columns:
            continue
        hit = frame[frame["site_label"].isin(labels) & frame["line"].notna() & frame["file"].notna()
                    & frame["instrument"].isin(text_instruments)]
        for file, line in zip(hit["file"], hit["line"]):
            lines_of.setdefault(Path(file), set()).add(int(line))
    cupti_corr = _cupti_correlations(ev, labels)
    names: dict[Path, str] = {}
    for path, wanted in sorted(lines_of.items()):
        try:
            text = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        name = names.get(path) or _unique_name(_member_path(path, root), set(names.values()))
        names[path] = name
        for i, line in enumerate(text, 1):
            keep = i in wanted or (i == 1 and (bool(_HEADER.search(line)) or path.suffix == ".csv"))
            if path.name.startswith("cupti") and not keep and cupti_corr.get(path):
                keep = _correlation_of(line) in cupti_corr[path]
            if keep:
                members.setdefault(name, []).append((i, line))
    return {name: "\n".join(line for _, line in sorted(rows)) + "\n" for name, rows in members.items()}


def _unique_name(name: str, taken: set[str]) -> str:
    """``raw/external/x.log`` again for another file: ``raw/external-2/x.log`` (files are never merged)."""
    if name not in taken:
        return name
    folder, _, base = name.rpartition("/")
    i = 2
    while f"{folder}-{i}/{base}" in taken:
        i += 1
    return f"{folder}-{i}/{base}"


def _cupti_correlations(ev: Evidence, labels: set[str]) -> dict[Path, set[int]]:
    """Correlation ids of the site's launches per CUPTI file (their RUNTIME and EXTERNAL_CORRELATION records too)."""
    out: dict[Path, set[int]] = {}
    lf = ev.launches
    if lf is None or lf.empty:
        return out
    hit = lf[(lf["instrument"] == "cupti") & lf["site_label"].isin(labels) & lf["correlation_id"].notna()]
    for file, corr in zip(hit["file"], hit["correlation_id"]):
        out.setdefault(Path(file), set()).add(int(corr))
    return out


def _correlation_of(line: str) -> int | None:
    m = re.search(r'"correlation_id":\s*(\d+)', line)
    return int(m.group(1)) if m else None


def _member_path(path: Path, root: Path) -> str:
    try:
        rel = path.resolve().relative_to(root.resolve())
        parts = [p for p in rel.parts if p not in ("", ".", "..")]
    except ValueError:  # a manifest-listed file outside the capture: keep its name only
        parts = ["external", path.name]
    return "raw/" + "/".join(parts)


# --------------------------------------------------------------------------- report.md
def _md_table(df: pd.DataFrame, columns: list[str] | None = None, max_rows: int = 60) -> str:
    if df is None or df.empty:
        return "_(none)_\n"
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in df[cols].head(max_rows).itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in r) + " |")
    if len(df) > max_rows:
        lines.append(f"\n_{len(df) - max_rows} more rows in evidence.json_")
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if v is None or v is pd.NA or (isinstance(v, float) and v != v):
        return ""
    if isinstance(v, dict):
        v = ", ".join(f"{k}={x}" for k, x in v.items())
    return str(v).replace("|", "\\|").replace("\n", " ")


def render_report(b: Bundle, plot_note: str, plot_name: str | None, arms_picture: bool = False,
                  sweep_chart: bool = False) -> str:
    """report.md: one section per question, in the order a reader asks them."""
    out = [f"# Evidence bundle: `{b.site or 'no site'}`\n"]
    if b.synthetic:
        out.append("> **SYNTHETIC capture**: the manifest says `synthetic: true`; these records were made by a "
                   "test builder, not by instruments on a GPU.\n")
    out.append(f"Capture `{b.capture}`, forensics {__version__}. Focus occurrence: `{b.focus or '-'}`. "
               "How to read this: docs/verdicts.md; what is where: docs/bundle.md.\n")

    out.append("## Verdict\n")
    cpu = b.device == "cpu" or (bool(len(b.counts)) and any(
        c in b.counts.columns and b.counts[c].fillna(0).astype(bool).any()
        for c in instruments.names_of_role(instruments.LAUNCHES) if instruments.device_of(c) == instruments.CPU))
    unit = "implementation-op execution count" if cpu else "launch count"
    named = b.verdicts[b.verdicts["verdict"] == NAMED] if len(b.verdicts) else b.verdicts
    if len(named):
        kernels = sorted(set(named["kernel"].astype(str)))
        out.append(f"**NAMED** (two independent instruments agree on the {unit}) at {len(named)} "
                   f"(arm, rank, occurrence) scope(s): " + ", ".join(f"`{k}`" for k in kernels) + ".\n")
    elif cpu:
        out.append("**NOT NAMED**: no implementation of this site was confirmed by two independent instruments "
                   "(see the execution counts and what is missing); the identities below are what single "
                   "instruments saw.\n")
    else:
        out.append("**NOT NAMED**: no kernel of this site was confirmed by two independent instruments "
                   "(see the launch counts); the identities below are what single instruments saw.\n")
    conflicts = b.verdicts[b.verdicts["verdict"] == CONFLICT] if len(b.verdicts) else b.verdicts
    if len(conflicts):
        out.append(f"**CONFLICT** at {len(conflicts)} (arm, rank, occurrence) scope(s): the counts agree but the "
                   "instruments disagree on who ran (the reason names each field and both values); not named.\n")
    focus = b.verdicts[b.verdicts["scope"] == b.focus] if len(b.verdicts) else b.verdicts
    for r in focus.to_dict("records"):
        out.append(f"- focus `{b.focus}`, arm `{r['arm']}` rank {r['rank']}: `{r.get('short_name') or r['kernel']}` "
                   f"**{r['verdict']}** ({r['reason']})")
    if b.focus and not len(focus):
        what = "an implementation-op execution (an op that calls oneDNN or oneMKL)" if cpu else "a kernel launch"
        out.append(f"- focus `{b.focus}`: no instrument counted {what} in this occurrence")
    out.append("")
    for p in b.comparison.pairs:
        if not p.comparable:
            out.append(f"- `{p.arm}` vs `{p.baseline}`: **NOT COMPARABLE** ({'; '.join(p.reasons)})")
            continue
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(p.counts().items())) or "no occurrence"
        first = "; ".join(f"rank {r}: `{fd['label']}` {fd['classification']} ({fd['role']})"
                          for r, fd in sorted(p.first_divergence.items())) or "none"
        from forensics.judge.verdicts import toggle_text  # noqa: PLC0415

        kind = "toggle " + toggle_text(p.toggle) if p.toggle else "replica"
        out.append(f"- `{p.arm}` ({kind}) vs `{p.baseline}`: {counts}. First divergence: {first}.")
        if p.crash:
            out.append(f"  - `{p.arm}` **{p.crash_word}**: {p.crash} (its log: passes/{p.arm}.log): what it did not "
                       "run is no finding about the site")
    out.append(f"\nDiscriminator: {b.discriminator_gemm.statement}\n")

    out.append("## Kernel\n")
    if cpu:
        out.append("Implementation ops as the profiler reported them (no launch geometry on the CPU: grid and "
                   "block stay empty; `launches` counts executions):\n")
    else:
        out.append("Symbols as the instruments reported them (mangled) and demangled (cxxfilt):\n")
    if b.kernels.empty and cpu:
        out.append("No implementation op was attributed to this site (no profiler op that calls oneDNN or oneMKL "
                   "inside its occurrences): the implementation is unknown, not guessed.\n")
    elif b.kernels.empty:
        out.append("No instrument attributed a kernel launch to this site (no CUPTI/nsys/Kineto/ncu record "
                   "tied to its occurrences): the kernel is unknown, not guessed.\n")
    if b.kernels.empty and cpu and b.profiler_ops:
        out.append("What torch.profiler recorded inside each occurrence, on its thread (nested ops included; the "
                   "profiler's word only, no second instrument logs these ops, so none of them is NAMED):\n")
        out.append(_md_table(pd.DataFrame([{"occurrence": d["occurrence"], "arm": d["arm"], "rank": d["rank"],
                                            "op": o["op"], "count": o["count"]}
                                           for d in b.profiler_ops for o in d["ops"]]), max_rows=200))
    elif not (b.kernels.empty and cpu):
        out.append(_md_table(b.kernels, ["arm", "family", "launches", "grid", "block", "instrument", "mangled",
                                         "demangled"]))

    out.append("## Problem and algo descriptors\n")
    if cpu:
        out.append("From the library logs (oneDNN verbose, oneMKL verbose), each call attributed to the site by "
                   "its timestamp or file offset (`attributed_by`, docs/cpu-backend.md):\n")
    elif not b.problems.empty and b.problems[AMD_COLUMNS].notna().any().any():
        out.append("From the hipBLASLt/rocBLAS log (matmul calls attributed to the site by host order and shape; the "
                   "solution index is the kernel the library chose):\n")
    else:
        out.append("From the cuBLASLt log (`[Trace]` matmul lines attributed to the site by host order and shape):\n")
    if b.problems.empty:
        what = "library" if cpu else "cuBLASLt"
        out.append(f"No {what} call was attributed to this site (no log, or no call matched its shapes): "
                   "the algo descriptor is unknown; repro.py falls back to the site digests.\n")
    if cpu:
        out.append(_md_table(b.problems[["arm", "rank", "label", "m", "n", "k", "a_type", *CPU_COLUMNS]]))
    elif b.problems[AMD_COLUMNS].notna().any().any():  # hipBLASLt/rocBLAS calls: their solution index, no cuBLASLt algo
        out.append(_md_table(b.problems[["arm", "rank", "label", *PROBLEM_COLUMNS, *AMD_COLUMNS]]))
    else:
        out.append(_md_table(b.problems[["arm", "rank", "label", *PROBLEM_COLUMNS, *ALGO_COLUMNS]]))

    out.append("## Execution counts per instrument\n" if cpu else "## Launch counts per instrument\n")
    if cpu:
        out.append("On the CPU backend the profiler counts implementation-op executions; the oneDNN and oneMKL logs "
                   "are independent of it and of each other.\n")
        cols = ["arm", "rank", "scope", "short_name"] + [c for c in instruments.count_columns(instruments.CPU)
                                                         if c in b.counts]
    else:
        out.append("CUPTI, Kineto and nsys are one source; ncu and the cuBLASLt log are independent of it.\n")
        cols = ["arm", "rank", "scope", "short_name", *instruments.count_columns(instruments.CUDA)]
    out.append(_md_table(b.counts, cols))
    out.append("\nTwo-instrument rule, per scope:\n")
    out.append(_md_table(b.verdicts, ["arm", "rank", "scope", "short_name", "verdict", "reason"]))
    if b.missing:
        out.append("\nMissing: " + "; ".join(b.missing) + "\n")

    out.append("## Arms\n")
    for p in b.comparison.pairs:
        out.append(f"### `{p.arm}` vs `{p.baseline}`\n")
        if not p.comparable:
            out.append("NOT COMPARABLE, not diffed: " + "; ".join(p.reasons) + "\n")
            continue
        out.append(_md_table(p.occurrences, ["rank", "label", "classification", "inputs_match", "bits_differ",
                                             "kernel_source", "detail"]))

    out.append("## Discriminator table\n")
    out.append(f"All GEMM sites: {b.discriminator_gemm.statement}\n")
    out.append(_md_table(b.discriminator_gemm.rows(), None))
    out.append(f"\nSite `{b.site}` held fixed: {b.discriminator_site.statement}\n")
    out.append(_md_table(b.discriminator_site.cells))

    out.append("## Toggles\n")
    if b.toggles.results:
        for r in b.toggles.results:
            out.append(f"- {r.summary()}")
        if b.toggles.results[0].baseline_run_to_run:
            out.append(f"\nBaseline run-to-run: {b.toggles.results[0].baseline_run_to_run}.\n")
    else:
        out.append("No arm with `toggle: {NAME: VALUE}` in this capture.\n")

    for section in b.sections:
        text = str(section.get("markdown") or "").strip()
        out.append(text if text.startswith("## ") else f"## {section.get('title', 'Section')}\n\n{text}")
        out.append("")

    out.append("## Environment\n")
    env = pd.DataFrame([{"arm": arm, **v} for arm, v in b.environment.items()])
    out.append(_md_table(env))

    out.append("## Plot\n")
    alt = "implementation-op executions per arm" if cpu else "kernel launches per arm"
    out.append(f"![{alt}]({plot_name})\n" if plot_name else f"No plot: {plot_note}\n")
    if arms_picture:
        out.append("![the arms side by side per occurrence: implementation, algo, bits vs the baseline](arms.svg)\n")
    if sweep_chart:
        out.append("![the batch-size table: the first m rows' bits vs the full call's, per row count](sweep-chart.svg)\n")

    out.append("## Files\n")
    raw = ("site JSONL, the oneDNN and oneMKL lines of its calls" if cpu
           else "site JSONL, CUPTI records of its launches, cuBLASLt lines of its calls")
    out.append(f"- `evidence.json`: everything above, machine-readable\n- `raw/`: the site's own records ({raw})\n"
               "- `manifest.yaml`: the capture manifest, redacted\n- `repro.py`: standalone repro (torch only): "
               "`python repro.py`\n")

    out.append("## Limits\n")
    if cpu:
        named, hidden = _cpu_named(b.problems)
        said = f"The library logs name {'; '.join(named)}. " if named else ""
        out.append(f"{said}What happens inside the implementation (why it is nondeterministic: "
                   f"{', '.join(hidden)}) is not observable from these instruments; it needs "
                   "the library's own controls (MKL_CBWR, ONEDNN_ settings) or the library owner (docs/limits.md). "
                   "`repro.py` uses random inputs of the captured shapes, not the captured values.\n")
    else:
        out.append("What happens inside the kernel (why it is nondeterministic: atomics, split-K reduction order, "
                   "stream-K scheduling) is not observable from these instruments; it needs Nsight Compute source "
                   "counters or the library owner (docs/limits.md). `repro.py` uses random inputs of the captured "
                   "shapes, not the captured values.\n")
    return "\n".join(out) + "\n"


def _cpu_named(problems: pd.DataFrame) -> tuple[list[str], list[str]]:
    """What the oneDNN/oneMKL lines attributed to the site name (ISA path, CNR mode, threads), and what
    stays hidden inside the implementation: the Limits section says only what its evidence does not."""
    def values(col: str, keep: Any = None) -> list[str]:
        if problems is None or col not in problems:
            return []
        rows = problems if keep is None else problems[keep(problems)]
        return sorted({str(v) for v in rows[col] if v is not None and v == v and str(v) not in ("", "<NA>")})

    named, hidden = [], ["how its threads split a reduction"]
    isa = values("implementation", lambda df: df["primitive"].astype(str) != "reorder") if "primitive" in problems else []
    if isa:
        named.append(f"the oneDNN implementation and ISA path taken ({', '.join(isa)})")
    else:
        hidden.append("the ISA path taken")
    cnr = values("cnr")
    if cnr:
        named.append(f"oneMKL's CNR mode ({', '.join(cnr)}) and thread count ({', '.join(values('nthr'))})")
    else:
        hidden.append("the CNR mode")
    return named, hidden


# --------------------------------------------------------------------------- writing
def scrub(text: str, secrets: set[str] | None = None) -> str:
    """Redact free text with the bundle's rules (:mod:`forensics.core.redact`), ``secrets`` as known literals."""
    red = Redactor()
    red.literals |= {x for x in secrets or () if len(x) >= 4}
    return red.learn_text(text).text(text)


_UNSAFE_CHARS = re.compile(r"[\\\x00-\x1f\x7f:*?\"<>|]")


def _safe_name(name: str) -> str:
    """A member name that extracts inside its top folder on every system: relative, no ``..``, no
    backslash, control or Windows-reserved characters (each becomes ``_``)."""
    parts = [_UNSAFE_CHARS.sub("_", part) for part in name.split("/")]
    parts = [p if p not in ("", ".", "..") else "_" for p in parts]
    return str(PurePosixPath(*parts))


def read_section(path: str | Path) -> dict[str, Any]:
    """A report section written by another tool: JSON ``{"title", "markdown", "data"}``, or the file
    ``forensics knob --json`` writes (its ``bundle_section``, paths made relative to the scanned trees).

    ``forensics.knobs.report.bundle_section`` returns exactly this shape.
    """
    from forensics.runtime.inputs import read_json  # noqa: PLC0415 - a FIFO, a directory or bad JSON: one line

    path = Path(path)
    data = read_json(path, what="section file")
    if isinstance(data, dict) and data.get("schema") == "forensics.knob":  # what `forensics knob --json` writes
        from forensics.knobs.report import section_from_knob_json  # noqa: PLC0415

        section = section_from_knob_json(data)
        if section is None:
            raise BadInput(path, "a forensics knob --json report without its bundle_section (written by an older "
                                 "forensics): rerun `forensics knob ... --json FILE`")
        return section
    if not isinstance(data, dict) or not isinstance(data.get("markdown"), str):
        raise BadInput(path, 'a bundle section is a JSON object {"title", "markdown", "data"}')
    import msgspec  # noqa: PLC0415

    from forensics.knobs.report import BundleSection  # noqa: PLC0415 - the format's owner declares its schema

    try:
        msgspec.convert(data, BundleSection)
    except msgspec.ValidationError as e:
        raise BadInput(path, f"bundle section: {str(e).replace('`', '')}") from None
    return data


def write_bundle(capture_dir: str | Path | Evidence, out_path: str | Path, site: str | None = None,
                 sections: list[dict[str, Any]] | None = None, overwrite: bool = False) -> Path:
    """Write the evidence bundle of ``site`` (default: the first divergent origin) to ``out_path``.

    An existing ``out_path`` is refused unless ``overwrite`` (``--force``): then it is replaced
    atomically once the new bundle is whole.

    ``sections``: extra report sections ``{"title", "markdown", "data"}`` (e.g. a knob scope
    report from ``forensics.knobs.report.bundle_section``), placed before the environment.
    """
    out_path = Path(out_path)
    if not overwrite:
        refuse_existing(out_path, "bundle", "--force replaces it, or choose another -o")
    with doing(f"analysing the capture {capture_dir}"):
        bundle, ev = collect(capture_dir, site)
    bundle.sections = list(sections or [])
    from forensics.sweep.bundle import sweep_parts  # noqa: PLC0415  (kernel --rows: the batch-invariance table)

    sweep_sections, sweep_members = sweep_parts(ev.capture.root if ev.capture is not None else None)
    bundle.sections += sweep_sections
    with doing("redacting secrets from every member of the bundle"):
        raw = _raw_members(ev, bundle)
        red = _learn_secrets(ev, bundle, raw)
        bundle.capture = red.text(bundle.capture)
    members: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp, doing("drawing the launch plot"):
        from forensics.evidence.plots import plot_launches  # noqa: PLC0415

        cpu = bundle.device == "cpu"
        plot_path, note = plot_launches(_plot_frame(ev, bundle.site, red), Path(tmp) / "launches.png",
                                        red.text(f"{bundle.site}: {'implementation-op executions' if cpu else 'kernel launches'}"
                                                 f" per arm ({bundle.capture})"), device=bundle.device)
        plot_name = None
        if plot_path is not None:
            plot_name = "launches.png"
            members[plot_name] = plot_path.read_bytes()
        from forensics.evidence.plots import arms_svg  # noqa: PLC0415

        svg = arms_svg(bundle.comparison, f"{bundle.site}: the arms side by side per occurrence ({bundle.capture})")
        if svg is not None:  # hand-written SVG: no dependency, every bundle with a comparison has it
            members["arms.svg"] = red.text(svg).encode()
        if "sweep.json" in sweep_members:  # kernel --rows: the batch-size table as a chart
            from forensics.evidence.plots import sweep_svg  # noqa: PLC0415

            chart = sweep_svg(json.loads(sweep_members["sweep.json"]))
            if chart is not None:
                members["sweep-chart.svg"] = red.text(chart).encode()
    with doing("rendering the bundle members"):
        members["report.md"] = red.text(render_report(bundle, note, plot_name, "arms.svg" in members,
                                                      "sweep-chart.svg" in members)).encode()
        members["evidence.json"] = (json.dumps(red.obj(bundle.to_json()), indent=1, default=str)
                                    + "\n").encode()
        members["manifest.yaml"] = yaml.safe_dump(red.obj(ev.manifest), sort_keys=False,
                                                  allow_unicode=True).encode()
        members["repro.py"] = red.text(_repro(ev, bundle)).encode()
        for name, text in raw.items():
            members[_unique_name(red.text(name), set(members))] = _redact_lines(text, red).encode()
        for name, data in sweep_members.items():  # tensor bytes as kept; text redacted like every member
            members[_unique_name(name, set(members))] = data if name.endswith(".pt") else red.text(data.decode()).encode()
    top = _UNSAFE_TOP.sub("_", red.text(f"forensics-bundle-{bundle.capture}-{bundle.site or 'all'}"))[:100]
    with doing("checking the bundle for surviving secrets"):
        _verify(members, red, top)
    entries: list[tuple[str, bytes, int]] = []
    for name, data in members.items():  # sanitising may make two names equal: never merge members
        safe = _unique_name(_safe_name(f"{top}/{name}"), {e[0] for e in entries})
        entries.append((safe, data, 0o755 if name == "repro.py" else 0o644))
    with doing(f"writing the bundle {out_path}"):
        write_tarball(out_path, entries, overwrite=overwrite)
    return out_path


def write_tarball(out_path: Path, entries: list[tuple[str, bytes, int]], overwrite: bool = False) -> None:
    """A .tar.gz of in-memory members, whole or not at all, never over an existing file unless
    ``overwrite`` (then replaced by one rename once whole).

    Members are regular files only (no links, no devices), owned by nobody in particular
    (uid/gid 0, no user or group names), stamped with the current time; the gzip header carries
    no file name (it would otherwise be the temporary name or the output's name).
    """
    now = int(time.time())
    with atomic_output(out_path, "wb", overwrite=overwrite, what="bundle",
                       hint="--force replaces it, or choose another -o") as fh:
        with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=now) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name, data, mode in entries:
                info = tarfile.TarInfo(name)
                info.size, info.mtime, info.mode = len(data), now, mode
                tar.addfile(info, io.BytesIO(data))


def _plot_frame(ev: Evidence, site: str | None, red: Redactor) -> pd.DataFrame:
    """The site's launches for the plot, every string redacted (pixels cannot be scrubbed afterwards)."""
    rows = []
    for r in _site_rows(ev, site).sort_values(["arm", "rank", "seq"]).to_dict("records"):
        for lr in ev.launch_rows(r["arm"], r["rank"], r["label"]):
            rows.append({"arm": red.text(str(r["arm"])), "rank": r["rank"], "label": red.text(str(r["label"])),
                         "kernel": red.text(str(lr.get("kernel")))})
    return pd.DataFrame(rows, columns=["arm", "rank", "label", "kernel"])


# --------------------------------------------------------------------------- secrets
_UNSAFE_TOP = re.compile(r"[^A-Za-z0-9_.-]+")


def _learn_secrets(ev: Evidence, bundle: Bundle, raw: dict[str, str]) -> Redactor:
    """One Redactor that has seen everything about to leave: manifest, environments, names, raw lines, report data."""
    red = Redactor()
    red.learn(ev.manifest).learn(ev.environments)
    if ev.capture is not None:
        red.learn(str(ev.capture.root.resolve()))
    red.learn(bundle.capture).learn(bundle.to_json()).learn(bundle.sections)
    for name, text in raw.items():
        red.learn(name)
        for line in text.splitlines():
            obj = _json_line(line)
            red.learn(obj) if obj is not None else red.learn_text(line)
    return red


def _json_line(line: str) -> Any:
    if not line.lstrip().startswith("{"):
        return None
    try:
        return json.loads(line)
    except ValueError:
        return None


def _redact_lines(text: str, red: Redactor) -> str:
    """Raw records line by line: a JSON line stays valid JSON (redacted as an object, re-serialised only
    when something changed), any other line is redacted as text."""
    out = []
    for line in text.splitlines():
        obj = _json_line(line)
        if obj is None:
            out.append(red.text(line))
            continue
        clean = red.obj(obj)
        out.append(line if clean == obj else json.dumps(clean))
    return "\n".join(out) + "\n"


class SecretSurvived(RuntimeError):
    """A redaction bug: something secret-looking survived; the bundle is not written (exit 70)."""


def _verify(members: dict[str, bytes], red: Redactor, top: str) -> None:
    """Fail closed: every member name and every text byte is checked again, and structured members must parse."""
    problems = [f"the top folder name ({what})" for what in red.leaks(top)]
    for name, data in members.items():
        problems += [f"the member name {name!r} ({what})" for what in red.leaks(name)]
        if name.endswith((".png", ".pt")):  # image / tensor bytes (kernel --rows' kept inputs): no text to read
            continue
        text = data.decode("utf-8", errors="replace")
        problems += [f"{name} ({what})" for what in red.leaks(text)]
        try:
            if name == "evidence.json":
                json.loads(text)
            elif name == "manifest.yaml":
                yaml.safe_load(text)
            elif name == "repro.py":
                compile(text, "repro.py", "exec")
            elif name.endswith(".svg"):
                import xml.etree.ElementTree as ET  # noqa: PLC0415 (only a bundle with a picture)

                ET.fromstring(text)
            elif name.endswith(".jsonl"):
                for line in text.splitlines():
                    if line.lstrip().startswith("{"):
                        json.loads(line)
        except Exception as e:  # noqa: BLE001
            problems.append(f"{name} no longer parses after redaction ({type(e).__name__})")
    if problems:
        raise SecretSurvived("bundle not written: " + "; ".join(sorted(set(problems))[:5]))


def _repro(ev: Evidence, bundle: Bundle) -> str:
    """repro.py for the focus occurrence on the baseline arm (or the arm that has it)."""
    label = bundle.focus
    base = baseline_arm(ev)
    rows = ev.sites[ev.sites["label"] == label] if label else ev.sites.iloc[0:0]
    row = rows[rows["arm"] == base].iloc[0] if (rows["arm"] == base).any() else (rows.iloc[0] if len(rows) else None)
    if row is None:
        return render_repro(None, {}, base or "-", bundle.capture, label or "-")
    arm = row["arm"]
    calls = ev.call_rows(arm, row["rank"], label)
    call = calls[0] if calls else None
    device = (bundle.environment.get(arm) or {}).get("device")
    knobs = repro_knobs(arm_knobs(ev, arm))
    problem = gemm_problem(label, row.to_dict(), call, device) or conv_problem(label, row.to_dict(), device)
    if problem is not None:  # the thread count splits a CPU reduction: the repro runs at the captured one
        problem.threads, problem.threads_source = repro_threads(calls, arm_knobs(ev, arm))
    seen = None
    if calls and not hasattr(problem, "m"):  # not a GEMM: name the library calls captured under the op
        from forensics.judge.cpu import describe_calls  # noqa: PLC0415

        by_inst: dict[str, list[dict[str, Any]]] = {}
        for c in calls:
            by_inst.setdefault(str(c.get("instrument")), []).append(c)
        per_execution = {i.name for i in instruments.of_role(instruments.CALLS) if i.per_execution}
        seen = "; ".join(f"{inst}: {describe_calls(pd.DataFrame(rows), inst)}" if inst in per_execution
                         else f"{inst}: {len(rows)} call(s)" for inst, rows in by_inst.items())
    return render_repro(problem, knobs, arm, bundle.capture, label, seen)
