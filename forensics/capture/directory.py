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
from forensics.core.errors import BadInput
from forensics import instruments as _reg
from forensics.instruments.recognise import METADATA, recognise
from forensics.instruments import file_patterns

MANIFEST = "manifest.yaml"
MANIFEST_SCHEMA = 1

#: (glob on the file name, instrument). First match wins. Read from the instrument registry.
FILE_PATTERNS: list[tuple[str, str]] = file_patterns()
_RANK_DIR = re.compile(r"^rank[-_]?(\d+)$")
_PID = re.compile(r"(?:\.|^)(\d+)(?:\.log|_[a-z_]*trace\.csv)$")  # cublaslt.<pid>.log, rocprofv3's <pid>_kernel_trace.csv
#: Ranks and process ids read from names (rank folders, log names) are bounded like the manifest's.
MAX_RANK, MAX_PID = (1 << 31) - 1, (1 << 63) - 1


@dataclass
class InstrumentFile:
    """One instrument output found in a capture."""

    instrument: str
    path: Path
    arm: str
    rank: int | None = None
    pid: int | None = None
    #: The arm it is judged under when a folder without a manifest holds several runs
    #: (forensics.judge.runs: ``a1-run2``); None: its arm.
    run: str | None = None


@dataclass
class Capture:
    """A loaded capture directory: manifest, the files found, and what is missing."""

    root: Path
    manifest: dict[str, Any]
    files: list[InstrumentFile] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: Every file found that is not read as an instrument: {path, why, metadata} (``metadata``: the
    #: capture's own files, read by other stages; otherwise ``not recognised: why``).
    unread: list[dict[str, Any]] = field(default_factory=list)
    #: How each instrument file was recognised (path -> what its content showed).
    recognised: dict[str, str] = field(default_factory=dict)

    @property
    def not_recognised(self) -> list[dict[str, Any]]:
        """Files that are neither instrument outputs nor the capture's own metadata."""
        return [u for u in self.unread if not u.get("metadata")]

    @property
    def arms(self) -> list[str]:
        """Arm names in manifest order (passes that belong to an arm are not arms)."""
        arms = [a["name"] for a in self.manifest.get("arms", []) if a.get("role", "arm") == "arm"]
        if arms:
            return arms
        return sorted({f.run or f.arm for f in self.files})

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


class _ManifestLoader(yaml.SafeLoader):
    """Safe YAML that keeps timestamps as text (an impossible date is not a crash) and counts nodes."""


_ManifestLoader.add_constructor("tag:yaml.org,2002:timestamp", lambda loader, node: loader.construct_scalar(node))

#: Largest manifest.yaml read (a real one is a few KiB) and most YAML nodes after alias expansion.
MANIFEST_LIMIT = 8 << 20
MAX_MANIFEST_NODES = 200_000


class _NoAliasDumper(yaml.SafeDumper):
    """Never writes anchors/aliases (a reader refuses alias bombs; ours never need them)."""

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002
        return True


def dump_manifest(manifest: dict[str, Any]) -> str:
    return yaml.dump(manifest, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True)


def _expanded_nodes(root: yaml.Node, limit: int) -> int:
    """Nodes of the document with every alias expanded (memoised, iterative); stops past ``limit``."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = ([c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode)
                    else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if not done:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        sizes[id(node)] = min(limit + 1, 1 + sum(sizes.get(id(c), 1) for c in children))
    return sizes.get(id(root), 1)


def _node_line(root: yaml.Node | None, where: tuple[Any, ...]) -> int | None:
    """1-based line of the value at ``where`` (keys and indices), or of the nearest enclosing node."""
    node = root
    for step in where:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == str(step)), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
            nxt = node.value[step]
        else:
            nxt = None
        if nxt is None:
            break
        node = nxt
    return node.start_mark.line + 1 if node is not None else None


_SCALAR = (str, int, float, bool, type(None))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _kinds(v: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "text", bool: "true/false", type(None): "empty"}.get(
        type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)


#: What the code reads from a manifest, by key: (predicate, what it must be). Unknown keys are kept unread.
_TOP_KEYS: dict[str, tuple[Any, str]] = {
    "schema": (_is_int, "an integer"),
    "command": (lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, _SCALAR) for x in v)),
                "text or a list of arguments"),
    "site": (lambda v: isinstance(v, str), "text"),
    "steps": (lambda v: isinstance(v, (str, int)) and not isinstance(v, bool), "text such as 1-2"),
    "ranks": (lambda v: isinstance(v, (str, int)) and not isinstance(v, bool), "text such as all or 0,1"),
    "instruments": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names"),
    "arms": (lambda v: isinstance(v, list), "a list of arm entries"),
    "files": (lambda v: isinstance(v, list), "a list of file entries"),
    "knobs": (lambda v: isinstance(v, dict), "a mapping NAME: VALUE"),
    "env": (lambda v: isinstance(v, dict), "a mapping NAME: VALUE"),
    "environment": (lambda v: isinstance(v, dict), "a mapping"),
    "synthetic": (lambda v: isinstance(v, bool), "true or false"),
    "source": (lambda v: isinstance(v, str), "text"),
    "world_size": (lambda v: v is None or _is_int(v), "an integer"),
}
_ARM_KEYS: dict[str, tuple[Any, str]] = {
    "name": (lambda v: isinstance(v, str) and bool(v), "non-empty text"),
    "role": (lambda v: v in ("arm", "pass"), "arm or pass"),
    "of": (lambda v: isinstance(v, str), "an arm name"),
    "env": (lambda v: isinstance(v, dict), "a mapping NAME: VALUE"),
    "knobs": (lambda v: isinstance(v, dict), "a mapping NAME: VALUE"),
    "toggle": (lambda v: isinstance(v, dict), "a mapping NAME: VALUE"),
    "versions": (lambda v: isinstance(v, dict), "a mapping"),
    "command": (lambda v: isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, _SCALAR) for x in v)),
                "text or a list of arguments"),
    "world_size": (lambda v: v is None or _is_int(v), "an integer"),
    "rc": (lambda v: v is None or _is_int(v), "an integer exit status"),
    "baseline": (lambda v: isinstance(v, bool), "true or false"),
}
_FILE_KEYS: dict[str, tuple[Any, str]] = {
    "path": (lambda v: isinstance(v, str) and bool(v) and "\x00" not in v, "a path (text)"),
    "instrument": (lambda v: v is None or isinstance(v, str), "an instrument name"),
    "arm": (lambda v: isinstance(v, str) and bool(v), "an arm name"),
    "rank": (lambda v: v is None or (_is_int(v) and 0 <= v <= MAX_RANK), "a rank (integer 0..2**31-1)"),
    "pid": (lambda v: v is None or (_is_int(v) and 0 <= v <= MAX_PID), "a process id (integer 0..2**63-1)"),
}


def check_manifest(data: dict[str, Any], path: Path, root: yaml.Node | None = None) -> None:
    """Every key the code reads has the type it needs; else BadInput naming the key and its line."""
    def bad(where: tuple[Any, ...], what: str, value: Any) -> BadInput:
        name = "".join(f"[{w}]" if isinstance(w, int) else (f".{w}" if i else str(w)) for i, w in enumerate(where))
        return BadInput(path, f"{name} must be {what}, not {_kinds(value)}", _node_line(root, where))

    def check(obj: dict[str, Any], spec: dict[str, tuple[Any, str]], where: tuple[Any, ...]) -> None:
        for key, (ok, what) in spec.items():
            if key in obj and not ok(obj[key]):
                raise bad((*where, key), what, obj[key])
        for key in ("env", "knobs", "toggle", "versions"):
            if isinstance(obj.get(key), dict) and key in spec:
                for k, v in obj[key].items():
                    if not isinstance(k, str) or not isinstance(v, _SCALAR):
                        raise bad((*where, key, k), "a plain value (text or number)", v)

    check(data, _TOP_KEYS, ())
    names: set[str] = set()
    for i, arm in enumerate(data.get("arms") or []):
        if not isinstance(arm, dict):
            raise bad(("arms", i), "a mapping {name, role, ...}", arm)
        if "name" not in arm:
            raise BadInput(path, f"arms[{i}] has no name", _node_line(root, ("arms", i)))
        check(arm, _ARM_KEYS, ("arms", i))
        if arm["name"] in names:
            raise BadInput(path, f"arms[{i}].name {arm['name']!r} appears twice", _node_line(root, ("arms", i, "name")))
        names.add(arm["name"])
    for i, entry in enumerate(data.get("files") or []):
        if not isinstance(entry, dict):
            raise bad(("files", i), "a mapping {path, instrument, arm, rank}", entry)
        if "path" not in entry:
            raise BadInput(path, f"files[{i}] has no path", _node_line(root, ("files", i)))
        check(entry, _FILE_KEYS, ("files", i))


def read_manifest(root: Path) -> dict[str, Any]:
    """Read ``manifest.yaml`` (or synthesize one from a campaign ``summary.json``).

    Anything unusable is one BadInput naming the file and line: not a regular file (a directory,
    a FIFO, a link loop), not UTF-8, not YAML, an alias bomb, nesting too deep, a foreign schema,
    a key of the wrong type or an arm without a name.
    """
    from forensics.runtime.inputs import decode_utf8, read_bytes  # noqa: PLC0415

    path = root / MANIFEST
    if os.path.lexists(path):
        text = decode_utf8(read_bytes(path, MANIFEST_LIMIT, "manifest"), path)
        loader = None
        try:
            loader = _ManifestLoader(text)  # its reader refuses control characters (a YAMLError)
            node = loader.get_single_node()
            if node is not None and _expanded_nodes(node, MAX_MANIFEST_NODES) > MAX_MANIFEST_NODES:
                raise BadInput(path, f"more than {MAX_MANIFEST_NODES} YAML nodes once aliases are expanded "
                                     "(an alias bomb?): not a manifest")
            data = loader.construct_document(node) if node is not None else {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
            line = getattr(mark, "line", None)
            raise BadInput(path, f"not valid YAML: {' '.join(str(getattr(e, 'problem', None) or e).split())}",
                           None if line is None else line + 1) from None
        except RecursionError:
            raise BadInput(path, "YAML nested too deeply to be a manifest") from None
        except ValueError as e:  # a constructor's own check (e.g. a bad !!binary or !!float)
            raise BadInput(path, f"not a valid YAML value: {e}") from None
        finally:
            if loader is not None:
                loader.dispose()
        data = data if data is not None else {}
        if not isinstance(data, dict):
            raise BadInput(path, f"manifest must be a mapping, not {_kinds(data)}", 1)
        schema = data.get("schema", MANIFEST_SCHEMA)
        if schema != MANIFEST_SCHEMA:
            raise BadInput(path, f"manifest schema {schema!r} is not supported (this forensics reads {MANIFEST_SCHEMA})",
                           _node_line(node, ("schema",)))
        check_manifest(data, path, node)
        return data
    summary = root / "summary.json"
    if os.path.lexists(summary):
        return _manifest_from_campaign(summary)
    return {}


def _manifest_from_campaign(summary: Path) -> dict[str, Any]:
    """A manifest for a directory written by the project's device campaign script (campaign.py, kept outside the repository)."""
    from forensics.runtime.inputs import read_json  # noqa: PLC0415

    data = read_json(summary, what="campaign summary.json")
    if not isinstance(data, dict):
        raise BadInput(summary, "a campaign summary.json is a JSON object")
    env = data.get("environment", {})
    if not isinstance(env, dict):
        raise BadInput(summary, "environment must be a JSON object")
    arms = []
    knobs = {"ws0": {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}, "lt1": {"TORCH_BLAS_PREFER_CUBLASLT": "1"}}
    rows = data.get("arms", [])
    if not isinstance(rows, list):
        raise BadInput(summary, "arms must be a list of [name, rc, seconds, files]")
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str) and row[0]):
            raise BadInput(summary, f"arms[{i}] must be [name, rc, seconds, files]")
        name, rc = row[0], row[1]
        entry: dict[str, Any] = {"name": name, "rc": rc if _is_int(rc) else None}
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
    """Discover a capture: a capture directory, a plain folder of instrument files, or one file.

    Files are recognised by content (:mod:`forensics.instruments.recognise`); every other file is kept
    in ``Capture.unread`` with the reason. Files directly inside a folder without a manifest are arm
    ``a1``, rank 0; a single file is a capture of that file alone (arm ``a1``, rank 0). Raises
    BadInput only when the path itself is unusable: absent, not a capture at all (a source
    repository, a home directory, too many files to be one), a bad manifest, or a single file that
    no instrument reads.
    """
    root = Path(root)
    if not os.path.lexists(root):
        raise BadInput(root, "no such capture directory or file")
    if not root.is_dir():
        return _single_file(root)
    has_manifest = os.path.lexists(root / MANIFEST) or os.path.lexists(root / "summary.json")
    if not has_manifest:
        what = not_a_capture(root, quick=True)
        if what:
            raise BadInput(root, what)
    manifest = read_manifest(root)
    cap = Capture(root=root, manifest=manifest)
    listed = manifest.get("files")
    if listed:
        from forensics.runtime.inputs import regular_file  # noqa: PLC0415

        for i, entry in enumerate(listed):
            p = root / entry["path"]
            if not os.path.lexists(p):
                cap.missing.append(f"{entry['path']}: listed in the manifest but not found")
                continue
            p = Path(os.path.realpath(regular_file(p, "instrument file")))
            instrument = entry.get("instrument")
            if not instrument:
                r = recognise(p)
                instrument = r.instrument or (None if r.known else classify(p.name))
                if instrument is None:
                    cap.unread.append({"path": str(p), "why": r.why, "metadata": False})
                    continue
                cap.recognised[str(p)] = r.why
            cap.files.append(InstrumentFile(instrument, p, entry.get("arm", "a1"), entry.get("rank"), entry.get("pid")))
    else:
        budget = [None if has_manifest else MAX_PLAIN_FILES]
        for p in sorted(root.iterdir()):
            if p.name == "passes" and p.is_dir():
                _list_passes(cap, p)
            elif p.is_dir() and not p.is_symlink():
                if _is_analysis_output(p):
                    cap.unread.append({"path": str(p), "why": "an earlier output folder of forensics analyze",
                                       "metadata": True})
                    continue
                _discover_arm(cap, p, budget)
            elif p.name in METADATA or p.name == "summary.json":
                cap.unread.append({"path": str(p), "why": METADATA.get(p.name, "capture metadata"), "metadata": True})
            elif has_manifest:
                cap.unread.append({"path": str(p), "why": "not in an arm folder (a capture keeps instrument files under "
                                   "ARM/ or ARM/rank<R>/): not read", "metadata": False})
            else:
                _add_file(cap, p, "a1", 0, budget)
    if not has_manifest and not any(f.instrument != "optrace" for f in cap.files):
        raise BadInput(root, not_a_capture(root) or "not a capture")
    _report_missing(cap)
    return cap


#: Most files looked at in a folder without a manifest (a capture's folders hold a few per rank).
MAX_PLAIN_FILES = 20_000
#: Names that mark a folder as something other than a capture (a source tree, a home directory).
_NOT_CAPTURE_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", "package.json", "Cargo.toml",
                        "CMakeLists.txt", "go.mod", ".bashrc", ".profile", ".bash_history", ".zshrc")


def _single_file(path: Path) -> Capture:
    from forensics.runtime.inputs import regular_file  # noqa: PLC0415

    regular_file(path, "instrument file")
    r = recognise(path)
    instrument = r.instrument or (None if r.known else classify(path.name))
    if instrument is None:
        raise BadInput(path, f"not recognised: {r.why}")
    role = _reg.role_of(instrument)
    if role == _reg.UNREAD:
        raise BadInput(path, r.why)
    if role not in (_reg.LAUNCHES, _reg.CALLS):
        raise BadInput(path, f"{r.why}: read with the capture it belongs to, not alone (`forensics analyze CAPTURE_DIR`)")
    cap = Capture(root=path.parent, manifest={"single_file": str(path)})
    pid_m = _PID.search(path.name)
    cap.files.append(InstrumentFile(instrument, path, "a1", 0, int(pid_m.group(1)) if pid_m else None))
    cap.recognised[str(path)] = r.why
    _report_missing(cap)
    return cap


def _is_analysis_output(p: Path) -> bool:
    """A folder written by `forensics analyze` (analysis.json + report.md), skipped by discovery."""
    return (p / "analysis.json").is_file() and (p / "report.md").is_file()


def _list_passes(cap: Capture, folder: Path) -> None:
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            cap.unread.append({"path": str(p), "why": "stdout/stderr of a pass of forensics kernel", "metadata": True})


#: Captures named in the refusal of a folder holding several (the rest are counted).
MAX_NESTED_SHOWN = 12
#: Folders looked into for a nested capture (two levels down), at most.
MAX_NESTED_LOOKED = 4096


def nested_captures(root: Path) -> list[Path]:
    """Capture directories (a ``manifest.yaml``) one or two levels below ``root``, which has none:
    a folder of several captures, each analysed on its own. Sorted; at most :data:`MAX_NESTED_LOOKED`
    folders are looked into."""
    found: list[Path] = []
    looked = 0
    level = [root]
    for _ in range(2):
        below: list[Path] = []
        for d in level:
            try:
                subs = sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())
            except OSError:
                continue
            for p in subs:
                looked += 1
                if looked > MAX_NESTED_LOOKED:
                    return sorted(found)
                if (p / MANIFEST).is_file():
                    found.append(p)
                else:
                    below.append(p)
        level = below
    return sorted(found)


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
    if Path(os.path.abspath(root)) == Path.home() or Path(os.path.abspath(root)) == Path("/"):
        return ("a home or root directory, not a capture: give the capture directory, a folder of instrument files, "
                "or one file (docs/capture-format.md)")
    markers = [n for n in _NOT_CAPTURE_MARKERS if n in names]
    if not markers and {"tests", "examples"} <= set(names) and (root / "tests").is_dir():
        markers = ["tests/", "examples/"]
    if markers:
        return (f"not a capture: it looks like a source tree or home directory (it has {', '.join(markers[:3])}); "
                "give the capture directory, a folder of instrument files, or one file (docs/capture-format.md)")
    held = nested_captures(root)
    if held:  # never merged into one capture (their arms and ranks would mix) nor written into
        shown = ", ".join(str(p.relative_to(root)) for p in held[:MAX_NESTED_SHOWN])
        more = f" and {len(held) - MAX_NESTED_SHOWN} more" if len(held) > MAX_NESTED_SHOWN else ""
        return (f"a folder holding {len(held)} capture(s) (a manifest.yaml in each), not one capture: analyse each "
                f"on its own (`forensics analyze {held[0]}`): {shown}{more}")
    if not names:
        return ("an empty directory, not a capture (no manifest.yaml): capture one with `forensics kernel`, "
                "or see docs/capture-format.md")
    if quick:
        return None
    return ("not a capture: no manifest.yaml and no instrument file in its folders (docs/capture-format.md: "
            "a capture is written by `forensics kernel`; a manifest can list existing files)")


def _discover_arm(cap: Capture, arm_dir: Path, budget: list[int | None]) -> None:
    for dirpath, dirnames, filenames in os.walk(arm_dir):
        outputs = [d for d in dirnames if _is_analysis_output(Path(dirpath) / d)]
        cap.unread.extend({"path": str(Path(dirpath) / d), "why": "an earlier output folder of forensics analyze",
                           "metadata": True} for d in outputs)
        dirnames[:] = sorted(d for d in dirnames if d not in outputs)
        named = next((d for d in dirnames if classify(d) is not None), None)
        if named is not None:  # docs/errors.md: a directory that is not what the command reads is bad input
            raise BadInput(Path(dirpath) / named, f"is a directory, not a {classify(named)} file")
        rel = Path(dirpath).relative_to(arm_dir)
        rank = None
        for part in rel.parts:
            m = _RANK_DIR.match(part)
            if m:
                rank = int(m.group(1))
                if rank > MAX_RANK:
                    raise BadInput(Path(dirpath), f"rank folder {part[:40]!r}: rank beyond 2**31-1")
        for name in sorted(filenames):
            _add_file(cap, Path(dirpath) / name, arm_dir.name, rank if rank is not None else 0, budget)


def _add_file(cap: Capture, path: Path, arm: str, rank: int, budget: list[int | None]) -> None:
    """Recognise one file by content; an instrument file joins ``cap.files``, any other ``cap.unread``."""
    from forensics.runtime.inputs import regular_file  # noqa: PLC0415

    if budget[0] is not None:
        budget[0] -= 1
        if budget[0] < 0:
            raise BadInput(cap.root, f"more than {MAX_PLAIN_FILES} files and no manifest.yaml: not a capture "
                                     "(give the capture directory, a folder of instrument files, or one file)")
    if path.name in METADATA:
        cap.unread.append({"path": str(path), "why": METADATA[path.name], "metadata": True})
        return
    r = recognise(path)
    instrument = r.instrument or (None if r.known else classify(path.name))
    if instrument is None:
        cap.unread.append({"path": str(path), "why": r.why, "metadata": r.known and path.name in METADATA})
        return
    regular_file(path, "instrument file")  # a FIFO would hang its reader
    if r.instrument is None:
        r_why = f"named as {instrument}, content not recognised ({r.why}): its reader decides"
    else:
        r_why = r.why
    cap.recognised[str(path)] = r_why
    pid_m = _PID.search(path.name)
    if pid_m and int(pid_m.group(1)) > MAX_PID:
        raise BadInput(path, "the process id in this name is beyond 2**63-1")
    cap.files.append(InstrumentFile(instrument, path, arm, rank, int(pid_m.group(1)) if pid_m else None))


def window_never_opened(cap: Capture) -> str | None:
    """Why a capture written by `forensics kernel` holds no instrument file, when its probes' own
    configuration (``ARM/probe.json``) says: a step window that never opened. None otherwise."""
    from forensics.runtime.inputs import read_json  # noqa: PLC0415

    windows: dict[tuple[str, str], list[str]] = {}
    for arm in sorted(p for p in cap.root.iterdir() if p.is_dir()) if cap.root.is_dir() else []:
        probe = arm / "probe.json"
        if not probe.is_file():
            continue
        try:
            cfg = read_json(probe, what="probe configuration")
        except BadInput:
            continue
        if isinstance(cfg, dict) and isinstance(cfg.get("steps"), (str, int)):
            windows.setdefault((str(cfg["steps"]), str(cfg.get("step_hook") or "optimizer")), []).append(arm.name)
    if not windows:
        return None
    parts = []
    for (steps, hook), arms in windows.items():
        if steps == "all":
            parts.append(f"in {', '.join(arms)} the window was the whole run (--steps all), and no probe wrote a file: "
                         "the program ran no op the probes record, or it stopped before any")
            continue
        counted = ("a step is counted at each torch.optim optimizer step" if hook == "optimizer"
                   else "a step is counted at each probes.step() call")
        parts.append(f"the step window (steps {steps}) never opened in {', '.join(arms)} ({counted}; the program made "
                     f"too few steps, or none): pass `--steps all` to capture the whole run")
    return "; ".join(parts)


def _report_missing(cap: Capture) -> None:
    present = cap.instruments()
    if not cap.files:
        why = window_never_opened(cap)
        cap.missing.append("no instrument files found (empty capture)" + (f": {why}" if why else ""))
        return
    # one line per counting family of the capture's device(s) with no member present (the registry's words)
    device = cap.manifest.get("device") if isinstance(cap.manifest, dict) else None
    cap.missing.extend(_reg.missing_families(present, device if device in (_reg.CPU, _reg.CUDA, _reg.ROCM) else None))
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
    from forensics.runtime.atomic import write_atomic  # noqa: PLC0415

    path = Path(root) / MANIFEST
    if os.path.lexists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; a capture is never overwritten")
    return write_atomic(path, dump_manifest(manifest), overwrite=overwrite, what="manifest")


def fresh_dir(base: str | os.PathLike[str]) -> Path:
    """``base`` if this run can claim it (absent or empty), else ``base-2``, ``base-3``... (never reuse a capture).

    Claim-safe: two concurrent runs given the same base never get the same directory
    (:func:`forensics.runtime.atomic.claim_dir`).
    """
    from forensics.runtime.atomic import fresh_dir as _fresh  # noqa: PLC0415

    return _fresh(base)
