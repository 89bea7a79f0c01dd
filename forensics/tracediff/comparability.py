"""Are two traced runs comparable? Say what differs (program, command, seeds, world size, knobs).

Three severities:

* ``not_comparable``: the program actually run differs: the script's content hash, the git commit
  or working-tree state it ran from, the versions of the packages whose code issued traced ops
  (torch included), the content of local source files that issued them. ``forensics diff`` prints
  NOT COMPARABLE before any verdict (docs/trace-format.md, ``program``/``packages``);
* ``warning``: the runs are different experiments of one program (command line, seeds, world size);
* ``info``: a knob differs (often the very point of a config-to-config comparison).

Nothing here refuses a diff. A field recorded by one run only is never "not comparable" (older
traces and other formats do not record it).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Fields whose difference makes the runs different experiments (warning) vs expected (info).
WARNING_FIELDS = ("argv", "seeds", "world_size", "schema_version", "versions.python", "steps", "hash", "compiled",
                  "generators", "storage_events", "tensor_text_unread")
#: Fields (and prefixes) that identify the program actually run: a difference is NOT COMPARABLE.
PROGRAM_FIELDS = ("program.sha256", "program.git.commit", "program.git.dirty", "program.git.diff_sha256",
                  "versions.torch")
PROGRAM_PREFIXES = ("packages.", "program.sources.")
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
    severity: str  # "warning" (different experiment) | "info" (a knob: maybe the point of the comparison)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _flat(info: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in info.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and (k in ("versions", "env", "seeds", "program", "packages", "git", "sources")
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
                     "program.script", "program.git.root", "program.note", "ordered", "traced_ranks")


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
    diffs = []
    for key in sorted(set(fa) | set(fb)):
        if _ignored(key):
            continue
        va, vb = fa.get(key), fb.get(key)
        if key == "argv" and launcher_masked(va) == launcher_masked(vb):
            continue
        if key.startswith("seeds") and (key not in fa or key not in fb):
            continue  # seeds are known from a footer only: a killed run did not record them
        if va != vb:
            program = key in PROGRAM_FIELDS or key.startswith(PROGRAM_PREFIXES)
            if program and key in fa and key in fb:
                severity = "not_comparable"
            elif program:
                severity = "info"  # recorded by one run only: nothing to compare
            elif key in WARNING_FIELDS or key.startswith("seeds"):
                severity = "warning"
            else:
                severity = "info"
            diffs.append(Difference(key, va, vb, severity))
    order = {"not_comparable": 0, "warning": 1, "info": 2}
    return sorted(diffs, key=lambda d: (order[d.severity], d.field))
