"""Are two traced runs comparable? Say what differs (command, seeds, world size, versions, knobs).

Nothing here refuses a diff: a config-to-config comparison (say ``OMP_NUM_THREADS=1`` vs ``2``)
differs on purpose. The differ prints these lines first so a reader knows what the two runs were.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Fields whose difference makes the runs different experiments (warning) vs expected (info).
WARNING_FIELDS = ("argv", "seeds", "world_size", "schema_version", "versions.torch", "versions.python",
                  "steps", "hash")
#: Env knobs that are rank/launcher bookkeeping, not configuration: never reported.
IGNORED_ENV = ("FORENSICS_CONFIG", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_", "RANK", "LOCAL_RANK",
               "GROUP_RANK", "ROLE_RANK", "SLURM_JOB_ID", "SLURM_PROCID", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


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
        if isinstance(v, dict) and k in ("versions", "env", "seeds"):
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
    return field in ("rank", "ranks", "path", "source", "pid", "host", "time", "started", "script_argv")


def compare_runs(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    """Every recorded field that differs between two runs' info, warnings first."""
    fa, fb = _flat(a or {}), _flat(b or {})
    diffs = []
    for key in sorted(set(fa) | set(fb)):
        if _ignored(key):
            continue
        va, vb = fa.get(key), fb.get(key)
        if va != vb:
            severity = "warning" if key in WARNING_FIELDS or key.startswith("seeds") else "info"
            diffs.append(Difference(key, va, vb, severity))
    return sorted(diffs, key=lambda d: (d.severity != "warning", d.field))
