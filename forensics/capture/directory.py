"""Capture directories: the manifest and the discovery of instrument files.

Layout (docs/capture-format.md has the full description)::

    CAPTURE/
      manifest.yaml                 # what was run, how, and which arms/passes exist
      <arm>/                        # one folder per arm (a1, a2, toggle arms) or pass (ncu, nsys)
        rank<R>/                    # rank-local files (a flat arm folder means rank 0)
          sites.jsonl  cupti.jsonl  cublaslt.<pid>.log  cublas.<pid>.log
          *.ncu-rep  *.sqlite  kineto*.json.gz  environment.json  ...
      passes/<name>.log             # one log per pass of `forensics kernel`

The loader finds what is present, reports what is missing, and never fails on a missing file.
A manifest may also list files explicitly (paths relative to the capture directory), which is how
the shipped example points at the real corpus without copying it.
"""
from __future__ import annotations

import datetime as _dt
import fnmatch
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from forensics import __version__
from forensics.errors import BadInput
from forensics.instruments import file_patterns

MANIFEST = "manifest.yaml"
MANIFEST_SCHEMA = 1

#: (glob on the file name, instrument). First match wins. Read from the instrument registry.
FILE_PATTERNS: list[tuple[str, str]] = file_patterns()
_RANK_DIR = re.compile(r"^rank[-_]?(\d+)$")
_PID = re.compile(r"\.(\d+)\.log$")

#: Instruments the two-instrument rule can use, for "what is missing" messages.
COUNTING_INSTRUMENTS = ("cupti", "kineto", "nsys", "ncu", "cublaslt")


@dataclass
class InstrumentFile:
    """One instrument output found in a capture."""

    instrument: str
    path: Path
    arm: str
    rank: int | None = None
    pid: int | None = None


@dataclass
class Capture:
    """A loaded capture directory: manifest, the files found, and what is missing."""

    root: Path
    manifest: dict[str, Any]
    files: list[InstrumentFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    @property
    def arms(self) -> list[str]:
        """Arm names in manifest order (passes that belong to an arm are not arms)."""
        arms = [a["name"] for a in self.manifest.get("arms", []) if a.get("role", "arm") == "arm"]
        if arms:
            return arms
        return sorted({f.arm for f in self.files})

    def arm_of(self, folder: str) -> str:
        """The arm a folder's files count for (a pass folder maps to the arm it was run for)."""
        for a in self.manifest.get("arms", []):
            if a["name"] == folder:
                return a.get("of") or a["name"]
        return folder

    def of(self, instrument: str, arm: str | None = None, rank: int | None = None) -> list[InstrumentFile]:
        """Files of one instrument, optionally for one arm (passes included) and rank."""
        return [
            f
            for f in self.files
            if f.instrument == instrument
            and (arm is None or f.arm == arm)
            and (rank is None or f.rank is None or f.rank == rank)
        ]

    def instruments(self) -> set[str]:
        return {f.instrument for f in self.files}


def classify(name: str) -> str | None:
    """Instrument of a file from its name, or None when it is not an instrument file."""
    for pattern, instrument in FILE_PATTERNS:
        if fnmatch.fnmatch(name, pattern):
            return instrument
    return None


def read_manifest(root: Path) -> dict[str, Any]:
    """Read ``manifest.yaml`` (or synthesize one from a campaign ``summary.json``)."""
    path = root / MANIFEST
    if path.exists():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            line = getattr(getattr(e, "problem_mark", None), "line", None)
            raise BadInput(path, f"not valid YAML: {getattr(e, 'problem', e)}", None if line is None else line + 1)
        if not isinstance(data, dict):
            raise BadInput(path, "manifest must be a mapping")
        schema = data.get("schema", MANIFEST_SCHEMA)
        if schema != MANIFEST_SCHEMA:
            raise BadInput(path, f"manifest schema {schema!r} is not supported (this forensics reads {MANIFEST_SCHEMA})")
        return data
    summary = root / "summary.json"
    if summary.exists():
        return _manifest_from_campaign(summary)
    return {}


def _manifest_from_campaign(summary: Path) -> dict[str, Any]:
    """A manifest for a directory written by the project's device campaign script (campaign.py, kept outside the repository)."""
    try:
        data = json.loads(summary.read_text())
    except json.JSONDecodeError as e:
        raise BadInput(summary, f"not valid JSON: {e.msg}", e.lineno)
    env = data.get("environment", {})
    arms = []
    knobs = {"ws0": {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}, "lt1": {"TORCH_BLAS_PREFER_CUBLASLT": "1"}}
    for name, rc, _secs, _files in data.get("arms", []):
        entry: dict[str, Any] = {"name": name, "rc": rc}
        if name in ("a1", "a2"):
            entry["role"] = "arm"
        elif name in knobs:
            entry.update(role="arm", toggle=knobs[name])
        else:  # ncu, nsys, kineto, legacy, markers: instrument passes of the a1 configuration
            entry.update(role="pass", of="a1")
        arms.append(entry)
    return {
        "schema": MANIFEST_SCHEMA,
        "source": "campaign",
        "tool_version": "campaign.py",
        "arms": arms,
        "environment": env,
        "steps": "1-2",
    }


def load_capture(root: str | os.PathLike[str]) -> Capture:
    """Discover a capture directory. Raises BadInput only when the directory itself is unusable."""
    root = Path(root)
    if not root.exists():
        raise BadInput(root, "no such capture directory")
    if not root.is_dir():
        raise BadInput(root, "not a directory (forensics analyze takes a capture directory)")
    has_manifest = os.path.lexists(root / MANIFEST) or os.path.lexists(root / "summary.json")
    if not has_manifest:
        what = not_a_capture(root, quick=True)
        if what:
            raise BadInput(root, what)
    manifest = read_manifest(root)
    cap = Capture(root=root, manifest=manifest)
    listed = manifest.get("files")
    if listed:
        for i, entry in enumerate(listed):
            p = (root / entry["path"]).resolve()
            if not p.exists():
                cap.missing.append(f"{entry['path']}: listed in the manifest but not found")
                continue
            cap.files.append(
                InstrumentFile(entry.get("instrument") or classify(p.name) or "unknown", p,
                               entry.get("arm", "a1"), entry.get("rank"), entry.get("pid"))
            )
    else:
        for arm_dir in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "passes"):
            _discover_arm(cap, arm_dir)
    if not has_manifest and not any(f.instrument != "optrace" for f in cap.files):
        raise BadInput(root, not_a_capture(root))
    _report_missing(cap)
    return cap


def not_a_capture(root: Path, quick: bool = False) -> str | None:
    """What a directory without manifest.yaml is, and which command reads it (one line).

    ``quick``: only the cases recognisable from the top level (empty, a trace directory, an
    analysis or bundle folder); None otherwise (the caller then looks for instrument files, as in
    a campaign's output of arm folders).
    """
    try:
        names = sorted(p.name for p in root.iterdir() if p.name != ".forensics-claim")
    except OSError as e:
        return f"cannot list the directory: {e.strerror}"
    ranks = [n for n in names if _RANK_DIR.match(n)]
    if "optrace-config.json" in names or "trace.jsonl" in names \
            or any((root / r / "trace.jsonl").is_file() for r in ranks[:64]):
        return ("a trace directory written by `forensics trace`, not a capture: compare two of them with "
                "`forensics diff RUN_A RUN_B`")
    if any(fnmatch.fnmatch(n, "rank_*.jsonl") for n in names[:256]):
        return ("a Megatron determinism-trace directory (rank_*.jsonl), not a capture: compare two of them with "
                "`forensics diff --format megatron RUN_A RUN_B`")
    if {"analysis.json", "report.md"} <= set(names):
        return "an output folder of `forensics analyze`, not a capture: analyse the capture directory it came from"
    if {"evidence.json", "report.md"} <= set(names):
        return "an extracted evidence bundle, not a capture: read its report.md"
    if not names:
        return ("an empty directory, not a capture (no manifest.yaml): capture one with `forensics kernel`, "
                "or see docs/capture-format.md")
    if quick:
        return None
    return ("not a capture: no manifest.yaml and no instrument file in its folders (docs/capture-format.md: "
            "a capture is written by `forensics kernel`; a manifest can list existing files)")


def _discover_arm(cap: Capture, arm_dir: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(arm_dir):
        dirnames.sort()
        rel = Path(dirpath).relative_to(arm_dir)
        rank = None
        for part in rel.parts:
            m = _RANK_DIR.match(part)
            if m:
                rank = int(m.group(1))
        for name in sorted(filenames):
            instrument = classify(name)
            if instrument is None:
                continue
            pid_m = _PID.search(name)
            cap.files.append(
                InstrumentFile(instrument, Path(dirpath) / name, arm_dir.name,
                               rank if rank is not None else 0, int(pid_m.group(1)) if pid_m else None)
            )


def _report_missing(cap: Capture) -> None:
    present = cap.instruments()
    if not cap.files:
        cap.missing.append("no instrument files found (empty capture)")
        return
    # one line per counting family of the capture's device(s) with no member present (the registry's words)
    from forensics import instruments as reg  # noqa: PLC0415

    cap.missing.extend(reg.missing_families(present))
    if "sites" not in present:
        cap.missing.append("no site JSONL (sites.jsonl): no digests, kernels cannot be tied to site occurrences by id")
    if "nsys_rep" in present and "nsys" not in present:
        cap.missing.append("an .nsys-rep without its SQLite export: run `nsys export --type sqlite`")


def new_manifest(**fields: Any) -> dict[str, Any]:
    """A manifest with the common header filled in."""
    base = {
        "schema": MANIFEST_SCHEMA,
        "tool_version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    base.update(fields)
    return base


def write_manifest(root: Path, manifest: dict[str, Any], overwrite: bool = False) -> Path:
    """Write ``manifest.yaml`` whole or not at all; refuses to overwrite an existing one unless asked."""
    from forensics.atomic import write_atomic  # noqa: PLC0415

    path = Path(root) / MANIFEST
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; a capture is never overwritten")
    return write_atomic(path, yaml.safe_dump(manifest, sort_keys=False), overwrite=overwrite, what="manifest")


def fresh_dir(base: str | os.PathLike[str]) -> Path:
    """``base`` if this run can claim it (absent or empty), else ``base-2``, ``base-3``... (never reuse a capture).

    Claim-safe: two concurrent runs given the same base never get the same directory
    (:func:`forensics.atomic.claim_dir`).
    """
    from forensics.atomic import fresh_dir as _fresh  # noqa: PLC0415

    return _fresh(base)
