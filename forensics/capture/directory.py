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

MANIFEST = "manifest.yaml"
MANIFEST_SCHEMA = 1

#: (glob on the file name, instrument). First match wins.
FILE_PATTERNS: list[tuple[str, str]] = [
    ("sites*.jsonl", "sites"),
    ("cupti*.jsonl", "cupti"),
    ("trace*.jsonl", "optrace"),
    ("rank_*.jsonl", "optrace"),
    ("cublaslt*.log", "cublaslt"),
    ("cublas_legacy*.log", "cublas"),
    ("cublas.*.log", "cublas"),
    ("*.ncu-rep", "ncu"),
    ("*raw*.csv", "ncu_csv"),
    ("*details*.csv", "ncu_csv"),
    ("*.sqlite", "nsys"),
    ("*.nsys-rep", "nsys_rep"),
    ("*kineto*.json*", "kineto"),
    ("*.pt.trace.json*", "kineto"),
    ("*trace*.json.gz", "kineto"),
    ("environment.json", "environment"),
]
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
    """A manifest for a directory written by ../shared/device/campaign.py."""
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
    _report_missing(cap)
    return cap


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
    cupti_family = present & {"cupti", "kineto", "nsys"}
    if not cupti_family:
        cap.missing.append("no CUPTI-family instrument (cupti.jsonl, kineto trace or nsys .sqlite)")
    if "ncu" not in present and "ncu_csv" not in present:
        cap.missing.append("no Nsight Compute report (.ncu-rep): the independent replay count is missing")
    if "cublaslt" not in present:
        cap.missing.append("no cuBLASLt log (CUBLASLT_LOG_LEVEL): no algo descriptor, no library-side call count")
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
    """Write ``manifest.yaml``; refuses to overwrite an existing one unless asked (nothing captured is lost)."""
    path = Path(root) / MANIFEST
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; a capture is never overwritten")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(manifest, sort_keys=False))
    tmp.replace(path)
    return path


def fresh_dir(base: str | os.PathLike[str]) -> Path:
    """``base`` if it is absent or empty, else ``base-2``, ``base-3``... (never reuse a capture)."""
    base = Path(base)
    if not base.exists() or not any(base.iterdir()):
        base.mkdir(parents=True, exist_ok=True)
        return base
    i = 2
    while True:
        cand = base.with_name(f"{base.name}-{i}")
        if not cand.exists():
            cand.mkdir(parents=True)
            return cand
        i += 1
