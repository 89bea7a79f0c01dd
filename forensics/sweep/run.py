"""``forensics kernel --rows``: the batch-invariance sweep of one site, as a library.

1. **keep**: the command runs once with the site probe only; at the site's first occurrence in the
   step window its inputs are kept (``probes.keep_inputs``; bounded by ``budget_bytes``: refused
   with the size when over it);
2. **plan**: :func:`forensics.sweep.rows.plan_rows` picks the dimension of independent rows (or
   refuses: a reduction dimension, an op with none);
3. **replay**: one arm per row count (and per knob setting), each a fresh process running
   ``python -m forensics.sweep.replay`` under the device's instruments through
   :func:`forensics.pipeline.run_kernel` (CPU: torch.profiler + oneMKL/oneDNN logs; GPU:
   CUPTI + the cuBLASLt log, then ncu and nsys on the first arm);
4. **table**: :mod:`forensics.sweep.table` joins each arm's anchor-row result with what the
   instruments NAMED and logged, and gives the verdict.

Layout of the sweep directory (never overwritten: ``-2``, ``-3``... as for captures)::

    keep/keep.log, keep/rank<R>/site-inputs.{json,pt}, keep/rank<R>/sweep-plan.json
    replay/            the capture of the replay arms (forensics analyze / compare / bundle read it)
    replay/sweep/      sweep.json, table.md, repro.py, site-inputs.pt (what the bundle carries)
    results/<arm>.json each arm's anchor-row result
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.runtime.launch import Interrupted, launch, signal_name
from forensics.sweep.rows import NotBatchable, RowPlan, plan_rows, refuse_site

DEFAULT_BUDGET = 256 << 20
DEFAULT_OUT = "forensics-sweep"
BASE = "base"


class SweepRefused(Exception):
    """Nothing to sweep (the reason is the message): exit 1, never a finding."""


@dataclass
class Setting:
    """One environment the row counts are replayed under: the baseline, or a knob value."""

    name: str
    env: dict[str, str] = field(default_factory=dict)

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.env.items()) or "as run"


@dataclass
class SweepResult:
    sweep_dir: Path
    plan: RowPlan
    rows: list[int]
    skipped_rows: list[str]
    settings: list[Setting]
    kernel: Any  # forensics.capture.kernel.KernelResult of the replay arms
    tables: dict[str, Any]  # setting name -> forensics.sweep.table.Table
    kept: dict[str, Any]
    seconds: dict[str, float]
    discovered: list[int] = field(default_factory=list)  # --rows auto: sizes added at a flip by the plain scan


def parse_rows(spec: str) -> list[int] | None:
    """``1,2,3,8`` -> [1, 2, 3, 8]; ``auto`` -> None (discovered from the site's row count)."""
    spec = (spec or "").strip()
    if spec == "auto":
        return None
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--rows: {part!r} is not a row count >= 1; write e.g. --rows 1,2,3,8 or --rows auto")
        out.append(int(part))
    if not out:
        raise ValueError("--rows: no row count given; write e.g. --rows 1,2,3,8 or --rows auto")
    return sorted(set(out))


def auto_rows(full: int) -> list[int]:
    """1, 2, 3, then the powers of two below the site's row count, then the count itself."""
    rows = {r for r in (1, 2, 3) if r <= full}
    p = 4
    while p < full:
        rows.add(p)
        p *= 2
    rows.add(full)
    return sorted(rows)


def keep_inputs(site: str, command: list[str], folder: Path, *, steps: str, ranks: str, budget_bytes: int,
                timeout_s: float) -> tuple[dict[str, Any], Path]:
    """Run the command once with the site probe keeping the first occurrence's inputs; the kept JSON and its folder."""
    from probes.config import ProbeConfig, bootstrap_env  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    cfg = ProbeConfig(out_dir=str(folder), probes=["sites"], arm="keep", site=site, steps=steps, ranks=ranks,
                      nvtx=False, extra={"keep_inputs": {"budget_bytes": int(budget_bytes)}, "digests": False})
    cfg_path = cfg.write(folder / "probe.json")
    env = bootstrap_env(cfg_path, dict(os.environ, PYTHONUNBUFFERED="1"))
    log = folder / "keep.log"
    with open(log, "w") as f:
        f.write("$ " + " ".join(command) + "\n")
        f.flush()
        try:
            ended = launch(command, env, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                           timeout_s=timeout_s, who="forensics kernel --rows", what="the keep run")
        except OSError as e:
            raise SweepRefused(f"could not start {command[0]}: {e.strerror or e}") from None
    if ended.received is not None:
        raise Interrupted(ended.received, f"the keep run was stopped: forensics was sent {signal_name(ended.received)} "
                                          f"(passed on to it); log: {log}")
    if ended.timed_out:
        raise SweepRefused(f"the keep run stopped after {timeout_s:.0f} s (--timeout); log: {log}")
    rc = ended.returncode
    found = sorted(folder.glob("rank*/site-inputs.json"))
    if not found:
        why = f"exit status {rc}; " if rc else ""
        raise SweepRefused(f"{why}the site {site} did not run inside the step window --steps {steps} "
                           f"(ranks {ranks}): no inputs kept; log: {log}")
    info = json.loads(found[0].read_text())
    info["rank_dir"] = str(found[0].parent)
    info["returncode"] = rc
    if info.get("error"):
        raise SweepRefused(f"{info['label']}: its inputs could not be kept: {info['error']}")
    if info.get("refused"):
        raise SweepRefused(f"{info['refused']} (--keep-budget BYTES raises the budget)")
    return info, found[0].parent


def make_plan(info: dict[str, Any], rank_dir: Path) -> RowPlan:
    """Load the kept call and plan its rows (NotBatchable when it has none)."""
    import torch  # noqa: PLC0415

    kept = torch.load(rank_dir / "site-inputs.pt", weights_only=True)
    meta = dict(info.get("meta") or {})
    return plan_rows(kept["op"], tuple(kept["args"]), dict(kept["kwargs"]), meta, info.get("label"))


def _plan_json(plan: RowPlan, info: dict[str, Any]) -> dict[str, Any]:
    devices = sorted({t.get("device", "cpu") for t in info.get("tensors", [])})
    return plan.to_json() | {"threads": info.get("threads"), "label": info.get("label"),
                             "device": next((d for d in devices if d != "cpu"), "cpu")}


def discover_boundaries(inputs: Path, sizes: list[int], timeout_s: float, log_dir: Path) -> list[int]:
    """``--rows auto``: the sizes on both sides of each flip between the auto sizes, found by a plain scan
    (``python -m forensics.sweep.replay --discover``: one fresh process, no instrument). [] when it fails
    (the log says why): the auto sizes are swept anyway."""
    cmd = [sys.executable, "-m", "forensics.sweep.replay", "--discover", str(inputs), ",".join(map(str, sizes))]
    env = dict(os.environ)
    env.pop("FORENSICS_CONFIG", None)
    repo = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([repo] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    log, result = log_dir / "discover.log", log_dir / "discover.out"
    try:
        with open(log, "w") as err, open(result, "w") as out:
            err.write("$ " + " ".join(cmd) + "\n")
            err.flush()
            ended = launch(cmd, env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, timeout_s=timeout_s,
                           who="forensics kernel --rows", what="the boundary scan")
        if ended.received is not None:
            raise Interrupted(ended.received, f"the boundary scan was stopped: forensics was sent "
                                              f"{signal_name(ended.received)} (passed on to it); log: {log}")
        if ended.returncode == 0 and not ended.timed_out:
            return [int(m) for m in json.loads(result.read_text().strip().splitlines()[-1])["boundaries"]]
        with open(log, "a") as err:
            err.write("timed out (--timeout)\n" if ended.timed_out else f"exit status {ended.returncode}\n")
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        with open(log, "a") as err:
            err.write(f"failed: {type(e).__name__}: {e}\n")
    return []


def arm_name(setting: Setting, m: int) -> str:
    return f"r{m}" if setting.name == BASE else f"{setting.name}-r{m}"


def run_sweep(site: str, command: list[str], rows: str | list[int] | None = "auto", *, steps: str = "1-2",
              ranks: str = "0", settings: list[Setting] | None = None, device: str | None = None,
              instruments: tuple[str, ...] | None = None, out: str | os.PathLike[str] | None = None,
              timeout_s: float = 1800, budget_bytes: int = DEFAULT_BUDGET, progress: bool = False,
              tools: Any = None) -> SweepResult:
    """Keep the site's inputs, replay them per row count (and setting) under the instruments, build the tables.

    Raises :class:`NotBatchable` (no independent rows: a reduction dimension, an op with none) and
    :class:`SweepRefused` (nothing kept: the site never ran, its inputs are over the budget).
    """
    from forensics.capture.directory import fresh_dir  # noqa: PLC0415
    from forensics.pipeline import run_kernel  # noqa: PLC0415 - judge and pandas, only when a sweep runs
    from forensics.sweep import table as tbl  # noqa: PLC0415

    reason = refuse_site(site)
    if reason:
        raise NotBatchable(reason)
    wanted = parse_rows(rows) if isinstance(rows, str) else (sorted(set(rows)) if rows else None)
    settings = settings or [Setting(BASE)]
    sweep_dir = fresh_dir(Path(out or DEFAULT_OUT)).resolve()
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    info, rank_dir = keep_inputs(site, command, sweep_dir / "keep", steps=steps, ranks=ranks,
                                 budget_bytes=budget_bytes, timeout_s=timeout_s)
    seconds["keep"] = round(time.monotonic() - t0, 2)
    plan = make_plan(info, rank_dir)
    full = plan.full_rows
    skipped = []
    discovered: list[int] = []
    plan_d = _plan_json(plan, info)
    (rank_dir / "sweep-plan.json").write_text(json.dumps(plan_d, indent=1) + "\n")
    if wanted is None:
        row_list = auto_rows(full)
        discovered = discover_boundaries(rank_dir / "site-inputs.pt", row_list, timeout_s, sweep_dir / "keep")
        row_list = sorted(set(row_list) | set(discovered))
    else:
        row_list = [m for m in wanted if m <= full]
        skipped = [f"{m} (the site has {full} rows)" for m in wanted if m > full]
        if not any(m < full for m in row_list):  # only the full call would run: nothing compared, no verdict
            raise NotBatchable(f"no row count asked ({', '.join(map(str, wanted))}) is below the site's {full} rows: "
                               f"only the full call would run and nothing would be compared; ask for counts from 1 "
                               f"to {full - 1} (or --rows auto)" if full > 1 else
                               f"the site has {full} row: no smaller row count to compare")
        if full not in row_list:
            row_list.append(full)  # the full call: the reference row of the table
    results = sweep_dir / "results"
    env_arms: dict[str, dict[str, str]] = {}
    for s in settings:
        for m in row_list:
            name = arm_name(s, m)
            env_arms[name] = {"FORENSICS_SWEEP_ROWS": str(m), "FORENSICS_SWEEP_RESULT": str(results / f"{name}.json"),
                              **s.env}
    replay_cmd = [sys.executable, "-m", "forensics.sweep.replay", str(rank_dir / "site-inputs.pt")]
    op_site = f"{info['op']}#1" if info["op"].count(".") == 2 else f"{info['op']}.default#1"
    t1 = time.monotonic()
    kres = run_kernel(op_site, replay_cmd, steps="0", ranks="all", env_arms=env_arms, out=sweep_dir / "replay",
                      timeout_s=timeout_s, progress=progress, tools=tools, device=device, instruments=instruments)
    seconds["replay"] = round(time.monotonic() - t1, 2)
    tables = {}
    for s in settings:
        arms = [(m, arm_name(s, m)) for m in row_list]
        tables[s.name] = tbl.build(plan, arms, results, kres, setting=s.label())
    res = SweepResult(sweep_dir, plan, row_list, skipped, settings, kres, tables, info, seconds, discovered)
    write_outputs(res)
    return res


def write_outputs(res: SweepResult) -> None:
    """``replay/sweep/``: sweep.json, table.md, repro.py and a copy of the kept inputs."""
    from forensics.sweep import table as tbl  # noqa: PLC0415
    from forensics.sweep.repro import render_repro  # noqa: PLC0415

    d = res.kernel.capture_dir / "sweep"
    d.mkdir(parents=True, exist_ok=True)
    data = {"site": res.kept.get("label"), "op": res.plan.op, "plan": res.plan.to_json(), "rows": res.rows,
            "skipped_rows": res.skipped_rows, "discovered_rows": res.discovered, "threads": res.kept.get("threads"),
            "settings": [{"name": s.name, "env": s.env} for s in res.settings],
            "tables": {k: t.to_json() for k, t in res.tables.items()}, "seconds": res.seconds,
            "sweep_dir": str(res.sweep_dir)}
    (d / "sweep.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    md = [f"# Batch-invariance sweep of {res.kept.get('label')} ({res.plan.op})", "",
          f"Sliced: {res.plan.what}; used whole: {', '.join(res.plan.kept_whole) or 'nothing'}.", ""]
    for t in res.tables.values():
        md += tbl.markdown(t) + [""]
    (d / "table.md").write_text("\n".join(md))
    shutil.copyfile(Path(res.kept["rank_dir"]) / "site-inputs.pt", d / "site-inputs.pt")
    (d / "sweep-plan.json").write_text((Path(res.kept["rank_dir"]) / "sweep-plan.json").read_text())
    (d / "repro.py").write_text(render_repro(res.plan, res.rows, res.kept))
    os.chmod(d / "repro.py", 0o755)
