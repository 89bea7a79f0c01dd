"""Are two traced runs comparable? Say what differs (program, command, seeds, world size, knobs).

Three severities:

* ``not_comparable``: the program actually run differs: the script's content hash, the content of a
  local file it imported, the version of a package it imported (torch included).
  Traces that do not record the files imported (older ones) fall back on the git commit and
  working-tree state. ``forensics diff`` prints
  NOT COMPARABLE before any verdict (docs/trace-format.md, ``program``/``packages``);
* ``warning``: the runs are different experiments of one program (command line, seeds, world size,
  the interpreter);
* ``info``: a knob or an in-process switch differs (often the very point of a config-to-config
  comparison): :func:`config_differences` lists them, and ``forensics diff`` names them before any
  verdict.

Nothing here refuses a diff. A field recorded by one run only is never "not comparable" (older
traces and other formats do not record it).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

#: Fields whose difference makes the runs different experiments (warning) vs expected (info).
WARNING_FIELDS = ("argv", "seeds", "world_size", "schema_version", "versions.python", "steps", "hash", "compiled",
                  "generators", "storage_events", "tensor_text_unread")
#: Fields (and prefixes) that identify the program actually run: a difference is NOT COMPARABLE.
PROGRAM_FIELDS = ("program.sha256", "versions.torch")
PROGRAM_PREFIXES = ("packages.", "program.sources.", "program.modules.", "program.packages.")
#: What identified the program before traces recorded the files it imported (``program.modules``):
#: the git state of the whole working tree. Between two traces that both record ``program.modules``
#: these are information only: an untracked file the program never read (a trace folder such as
#: ``runA/``) is not the program, and a commit that changed no file it imported ran the same code.
GIT_FIELDS = ("program.git.commit", "program.git.dirty", "program.git.diff_sha256")
#: The interpreter (its path, its version and build, its implementation): a warning, like the
#: command line. Another virtual environment or another build of one Python runs the program's own
#: code unchanged, and what the program imports is compared file by file and package by package;
#: calling two builds of CPython "different programs" would be a false NOT COMPARABLE.
INTERPRETER_PREFIX = "program.interpreter."
#: Env knobs that are rank/launcher bookkeeping, not configuration: never reported.
IGNORED_ENV = ("FORENSICS_CONFIG", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_", "RANK", "LOCAL_RANK",
               "GROUP_RANK", "ROLE_RANK", "SLURM_JOB_ID", "SLURM_PROCID", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
#: Launcher options whose value is rendezvous bookkeeping (torchrun's port, endpoint and job id, like
#: MASTER_PORT above): two command lines that differ only there ran the same experiment
LAUNCHER_OPTIONS = ("--master-port", "--master_port", "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id")


@dataclass(frozen=True)
class Difference:
    field: str  # dotted path, e.g. "env.OMP_NUM_THREADS", "versions.torch", "argv"
    a: Any
    b: Any
    severity: str  # "not_comparable" | "warning" (different experiment) | "info" (a knob: maybe the point)
    what: str = ""  # the file, package, knob or switch in words ("file model/layers.py", "knob OMP_NUM_THREADS")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _flat(info: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in info.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and (k in ("versions", "env", "seeds", "program", "packages", "git", "sources",
                                          "modules", "interpreter", "switches")
                                    and (prefix == "" or prefix.startswith("program."))):
            if not v and k == "seeds":
                out[key] = v
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def _ignored(field: str) -> bool:
    if field.startswith("_"):
        return True
    if field.startswith("env."):
        name = field[4:]
        return any(name == p or (p.endswith("_") and name.startswith(p)) for p in IGNORED_ENV)
    return field in ("rank", "ranks", "path", "source", "pid", "host", "time", "started", "script_argv",
                     "program.script", "program.git.root", "program.note", "ordered", "traced_ranks",
                     "switches.note")


def _records_modules(info: dict[str, Any]) -> bool:
    program = (info or {}).get("program")
    return isinstance(program, dict) and isinstance(program.get("modules"), dict)


def _what(key: str, fa: dict[str, Any], fb: dict[str, Any]) -> str:
    """What a differing field is, in words: the file, package, knob or switch it names."""
    if key == "program.sha256":
        sa, sb = fa.get("program.script"), fb.get("program.script")
        shown = [_short_path(x) for x in (sa, sb) if isinstance(x, str)]
        names = " / ".join(dict.fromkeys(shown)) or "?"
        return f"the script {names}"
    for prefix, word in (("program.modules.", "file"), ("program.sources.", "file"), ("program.packages.", "package"),
                         ("packages.", "package"), ("env.", "knob"), ("switches.", "switch")):
        if key.startswith(prefix):
            return f"{word} {key[len(prefix):]}"
    if key == "versions.torch":
        return "package torch"
    if key.startswith("program.interpreter."):
        return "the interpreter"
    return key


def _short_path(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def launcher_masked(argv: Any) -> Any:
    """``argv`` with the values of :data:`LAUNCHER_OPTIONS` replaced by ``<...>`` (``--master-port
    29501`` and ``--master-port=29501`` alike); anything that is not a list of strings as it is."""
    if not isinstance(argv, list) or not all(isinstance(x, str) for x in argv):
        return argv
    out, mask_next = [], False
    for x in argv:
        if mask_next:
            out.append("<...>")
            mask_next = False
        elif x in LAUNCHER_OPTIONS:
            out.append(x)
            mask_next = True
        elif x.split("=", 1)[0] in LAUNCHER_OPTIONS and "=" in x:
            out.append(x.split("=", 1)[0] + "=<...>")
        else:
            out.append(x)
    return out


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    """Every recorded field that differs between two runs' info, warnings first (a command line
    that differs only in a launcher's rendezvous values, :data:`LAUNCHER_OPTIONS`, does not)."""
    fa, fb = _flat(a or {}), _flat(b or {})
    by_files = _records_modules(a) and _records_modules(b)
    switches = isinstance((a or {}).get("switches"), dict) and isinstance((b or {}).get("switches"), dict)
    diffs = []
    for key in sorted(set(fa) | set(fb)):
        if _ignored(key):
            continue
        va, vb = fa.get(key), fb.get(key)
        if key == "argv" and launcher_masked(va) == launcher_masked(vb):
            continue
        if key.startswith("seeds") and (key not in fa or key not in fb):
            continue  # seeds are known from a footer only: a killed run did not record them
        if key.startswith("switches.") and not switches:
            continue  # one run recorded no switches (an older trace): nothing to compare
        twin = ("program.modules." + key[len("program.sources."):] if key.startswith("program.sources.")
                else "program." + key if key.startswith("packages.") else None)
        if twin is not None and twin in fa and twin in fb:
            continue  # the same file or package, imported: its program.modules/program.packages entry says it
        if va != vb:
            program = (key in PROGRAM_FIELDS or key.startswith(PROGRAM_PREFIXES)
                       or (key in GIT_FIELDS and not by_files))
            if program and key in fa and key in fb:
                severity = "not_comparable"
            elif program:
                severity = "info"  # recorded by one run only: nothing to compare
            elif key in WARNING_FIELDS or key.startswith(("seeds", INTERPRETER_PREFIX)):
                severity = "warning"
            else:
                severity = "info"
            diffs.append(Difference(key, va, vb, severity, _what(key, fa, fb)))
    order = {"not_comparable": 0, "warning": 1, "info": 2}
    return sorted(diffs, key=lambda d: (order[d.severity], d.field))


#: the kinds of :func:`config_differences` entries, by field prefix
CONFIG_KINDS = (("env.", "knob"), ("switches.", "switch"))


def config_differences(comparability: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The knobs (environment variables) and in-process switches whose values differ between the
    two runs, from the comparability entries: ``{"kind": "knob"|"switch", "name", "field", "a", "b",
    "catalogued"}``, ``a``/``b`` null where that run did not set the knob. Catalogued knobs first
    (``forensics knob NAME`` knows their scope), then switches, then other knobs."""
    try:
        from forensics.knobs.catalog import load_catalog  # noqa: PLC0415 (yaml, read here only)

        catalog = set(load_catalog())
    except Exception:  # noqa: BLE001 - the catalog names a knob; its absence hides none
        catalog = set()
    out = []
    for d in comparability:
        field = str(d.get("field", ""))
        for prefix, kind in CONFIG_KINDS:
            if field.startswith(prefix):
                name = field[len(prefix):]
                out.append({"kind": kind, "name": name, "field": field, "a": d.get("a"), "b": d.get("b"),
                            "catalogued": kind == "knob" and name in catalog})
    rank = {("knob", True): 0, ("switch", False): 1, ("knob", False): 2}
    return sorted(out, key=lambda c: (rank[(c["kind"], c["catalogued"])], c["name"]))
