"""Probe configuration: written by the CLI, read in every child process through the environment.

``forensics kernel`` / ``forensics trace`` write a JSON config and start the user's command with
``FORENSICS_CONFIG=<config.json>`` and the bootstrap directory first on ``PYTHONPATH``; torchrun
and srun children inherit both, so every rank activates the same probes and writes rank-local
files under ``<out_dir>/rank<R>/``.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

ENV_CONFIG = "FORENSICS_CONFIG"
BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"


@dataclass
class ProbeConfig:
    """Everything a probe needs to know; JSON round-trips."""

    out_dir: str  # per-arm directory; ranks write to out_dir/rank<R>/
    probes: list[str] = field(default_factory=lambda: ["sites"])  # sites | cupti | cpu | optrace
    arm: str = "a1"
    site: str | None = None  # only this site (or occurrence) gets ranges/records; None = all GEMM sites
    steps: str = "1-2"  # "all", "N", "A-B", "A-B:every" (see probes.window.parse_steps)
    ranks: str = "all"  # "all" or "0,3,8-15"
    step_hook: str = "optimizer"  # "optimizer" (torch optimizer step post-hook) | "explicit" (probes.step())
    max_records: int = 2_000_000  # per rank, per file; further records are counted as dropped
    max_site_records: int = 100_000
    chunk_digests: bool = True  # per-row digests for reordering-prone ops (op tracer)
    nvtx: bool = True  # NVTX start/end ranges per site occurrence
    cuda_profiler_window: bool = False  # cudaProfilerStart/Stop around the window (ncu/nsys pass)
    cpu_instruments: list[str] = field(default_factory=list)  # torch_profiler | onednn | mkl (probes.cpu)
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    def write(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")  # whole or not at all (a full disk leaves no half config)
        try:
            tmp.write_text(self.to_json())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return path

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> "ProbeConfig":
        data = json.loads(Path(path).read_text())
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def bootstrap_env(config_path: str | os.PathLike[str], base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for a child command: bootstrap dir first on PYTHONPATH, config path set.

    Nothing else is added: the traced process's ``sys.path`` is the untraced one's plus the
    bootstrap entry. The bootstrap imports ``probes`` and ``forensics`` from the directory that
    holds them (a checkout, or site-packages) without leaving it on ``sys.path``: put there, an
    installed copy's directory would shadow a checkout on the user's ``PYTHONPATH`` in the traced
    process only (``probes/bootstrap/sitecustomize.py``).
    """
    env = dict(os.environ if base is None else base)
    parts = [str(BOOTSTRAP_DIR)]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[ENV_CONFIG] = str(Path(config_path).resolve())
    return env


def rank_dir(out_dir: str | os.PathLike[str], rank: int) -> Path:
    """``<out_dir>/rank<R>``, created."""
    d = Path(out_dir) / f"rank{rank}"
    d.mkdir(parents=True, exist_ok=True)
    return d
