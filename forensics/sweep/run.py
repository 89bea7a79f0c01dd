"""``forensics kernel --rows`` / ``--repeat``: the batch-invariance sweep and the repeat axis of one site, as a library.

1. **keep**: the command runs once with the site probe only; at the site's first occurrence in the
   step window its inputs are kept (``probes.keep_inputs``; bounded by ``budget_bytes``: refused
   with the size when over it);
2. **plan**: :func:`forensics.sweep.rows.plan_rows` picks the dimension of independent rows (or
   refuses: a reduction dimension, an op with none);
3. **replay**: one arm per setting (as run, or a knob's value), a fresh process running
   ``python -m forensics.sweep.replay`` under the device's instruments through
   :func:`forensics.pipeline.run_kernel` (CPU: torch.profiler + oneMKL/oneDNN logs; GPU:
   CUPTI + the cuBLASLt log, then ncu and nsys on the first arm); inside it every row count, each
   ``--repeat`` times, is one occurrence ``OP#k`` the instruments see: the sweep costs one keep run
   and one replay process per setting, whatever the number of sizes;
4. **table**: :mod:`forensics.sweep.table` joins each size's anchor-row result with what the
   instruments NAMED and logged at its occurrence, and gives the batch-invariance verdict; the
   repeats give the determinism verdict (a separate question, a separate word).

Layout of the sweep directory (never overwritten: ``-2``, ``-3``... as for captures)::

    keep/keep.log, keep/rank<R>/site-inputs.{json,pt}, keep/rank<R>/sweep-plan.json
    replay/            the capture of the replay arms (forensics analyze / compare / bundle read it)
    replay/sweep/      sweep.json, table.md, repro.py, site-inputs.pt (what the bundle carries)
    results/<setting>.json each setting's replay result (every size, every repeat)
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.runtime.launch import Interrupted, launch, signal_name
from forensics.sweep.rows import NotBatchable, RowPlan, from_skeleton, plan_rows, refuse_by_name
from probes.keep_inputs import OUTPUT_JSON

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
    tables: dict[str, Any]  # setting name -> forensics.sweep.table.Table (empty without --rows)
    kept: dict[str, Any]
    seconds: dict[str, float]
    repeats: dict[str, Any] = field(default_factory=dict)  # setting name -> forensics.sweep.table.Repeats
    repeat: int = 1
    auto: bool = False  # --rows auto: the sizes are auto_rows' (AUTO_DENSE, then AUTO_PER_OCTAVE per doubling)


#: ``--rows auto`` tries every size up to this bound...
AUTO_DENSE = 32
#: ...then this many evenly spaced sizes in each doubling above it (spacing bound/8, then doubled with the size)
AUTO_PER_OCTAVE = 8
#: the most repeats ``--repeat`` takes (every repeat's outputs are held until the window closes)
MAX_REPEAT = 1000


def parse_repeat(n: int | None) -> int:
    if n is None:
        return 1
    if int(n) < 1 or int(n) > MAX_REPEAT:
        raise ValueError(f"--repeat: {n} is not a repeat count from 1 to {MAX_REPEAT}; write e.g. --repeat 10")
    return int(n)


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
    """Every size from 1 to :data:`AUTO_DENSE`, then :data:`AUTO_PER_OCTAVE` evenly spaced sizes per
    doubling (33-64 by 4, 65-128 by 8, 129-256 by 16...), then the site's row count itself. Dense where
    library blockings change (a GEMM's m-blocking flips sizes 4 and 8 equal between unequal ones on
    an AVX-512 CPU), so a non-monotonic pattern is seen rather than bisected past."""
    rows = set(range(1, min(full, AUTO_DENSE) + 1))
    lo = AUTO_DENSE
    while lo < full:
        step = max(1, lo // AUTO_PER_OCTAVE)
        rows.update(range(lo + step, min(2 * lo, full) + 1, step))
        lo *= 2
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
        hint = ""
        if not _window_has_zero(steps) and _max_step(folder) in (None, 0):
            hint = (" (the program took no optimizer step, so only step 0 ran: the window counts steps from 0 at "
                    "each optimizer step or probes.step(); for a program with no optimizer step pass --steps 0)")
        raise SweepRefused(f"{why}the site {site} did not run inside the step window --steps {steps} "
                           f"(ranks {ranks}): no inputs kept{hint}; log: {log}")
    info = json.loads(found[0].read_text())
    info["rank_dir"] = str(found[0].parent)
    info["returncode"] = rc
    if info.get("error"):
        raise SweepRefused(f"{info['label']}: its inputs could not be kept: {info['error']}")
    if info.get("refused"):
        raise SweepRefused(f"{info['refused']} (--keep-budget BYTES raises the budget)")
    return info, found[0].parent


def _window_has_zero(steps: str) -> bool:
    from forensics.core.window import parse_steps  # noqa: PLC0415

    try:
        return 0 in parse_steps(steps)
    except Exception:  # noqa: BLE001  (a window the probe refused: no hint)
        return True


def _max_step(folder: Path) -> int | None:
    """The last step boundary the keep run's site probe recorded (None: it recorded none)."""
    last = None
    for f in folder.glob("rank*/sites*.jsonl"):
        for line in f.read_text(errors="replace").splitlines():
            if '"iteration"' in line and '"event": "iteration"' in line:
                try:
                    last = max(last or 0, int(json.loads(line)["iteration"]))
                except (ValueError, KeyError):
                    pass
    return last


def make_plan(info: dict[str, Any], rank_dir: Path) -> RowPlan:
    """Plan the kept call's rows (NotBatchable when it has none) from its description (shapes, strides and
    every other argument: ``site-inputs.json``); a description without them (an older keep) loads the tensors."""
    meta = dict(info.get("meta") or {})
    if info.get("skeleton") is not None:
        args, kwargs = from_skeleton(info["skeleton"], info.get("tensors", []))
        return plan_rows(info["op"], args, kwargs, meta, info.get("label"))
    import torch  # noqa: PLC0415

    kept = torch.load(rank_dir / "site-inputs.pt", weights_only=True)
    return plan_rows(kept["op"], tuple(kept["args"]), dict(kept["kwargs"]), meta, info.get("label"))


def _plan_json(plan: RowPlan, info: dict[str, Any]) -> dict[str, Any]:
    devices = sorted({t.get("device", "cpu") for t in info.get("tensors", [])})
    return plan.to_json() | {"threads": info.get("threads"), "label": info.get("label"),
                             "device": next((d for d in devices if d != "cpu"), "cpu")}


def _warm_imports() -> None:
    """Import what the replay's capture and its analysis need (the judge, pandas): heavy, and independent of
    the keep run, which waits on a child process meanwhile. (torch is not needed here: the plan is made
    from the kept call's description.)"""
    try:
        import forensics.pipeline  # noqa: F401, PLC0415
        import forensics.sweep.table  # noqa: F401, PLC0415
    except Exception:  # noqa: BLE001  (the import is retried, and fails loudly, where it is used)
        pass


def whole_plan(op: str) -> RowPlan:
    """``--repeat`` without ``--rows``: the kept call as it ran, nothing sliced (``full_rows`` 0)."""
    return RowPlan(op, 0, [], "the whole call (nothing sliced)", 0, [])


def run_sweep(site: str, command: list[str], rows: str | list[int] | None = "auto", *, repeat: int = 1,
              steps: str = "1-2", ranks: str = "0", settings: list[Setting] | None = None, device: str | None = None,
              instruments: tuple[str, ...] | None = None, out: str | os.PathLike[str] | None = None,
              timeout_s: float = 1800, budget_bytes: int = DEFAULT_BUDGET, progress: bool = False,
              tools: Any = None) -> SweepResult:
    """Keep the site's inputs, replay them (every row count, ``repeat`` times each) in one process per
    setting under the instruments, build the tables. ``rows`` None: no row axis (``--repeat`` alone).

    Raises :class:`NotBatchable` (no independent rows: a reduction dimension, an op with none; from the
    site's name alone before anything runs when it can tell) and :class:`SweepRefused` (nothing kept:
    the site never ran, its inputs are over the budget).
    """
    from forensics.capture.directory import fresh_dir  # noqa: PLC0415

    repeat = parse_repeat(repeat)
    if rows is not None:
        reason = refuse_by_name(site)
        if reason:
            raise NotBatchable(reason)
    wanted = (parse_rows(rows) if isinstance(rows, str) else sorted(set(rows))) if rows is not None else []
    auto = rows is not None and wanted is None
    settings = settings or [Setting(BASE)]
    sweep_dir = fresh_dir(Path(out or DEFAULT_OUT)).resolve()
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    warm = threading.Thread(target=_warm_imports, name="forensics-sweep-imports", daemon=True)
    warm.start()  # the judge and pandas load while the keep run runs
    info, rank_dir = keep_inputs(site, command, sweep_dir / "keep", steps=steps, ranks=ranks,
                                 budget_bytes=budget_bytes, timeout_s=timeout_s)
    seconds["keep"] = round(time.monotonic() - t0, 2)
    warm.join()
    from forensics.pipeline import run_kernel  # noqa: PLC0415 - judge and pandas, only when a sweep runs
    from forensics.sweep import table as tbl  # noqa: PLC0415

    plan = make_plan(info, rank_dir) if rows is not None else whole_plan(info["op"])
    full = plan.full_rows
    skipped: list[str] = []
    plan_d = _plan_json(plan, info)
    (rank_dir / "sweep-plan.json").write_text(json.dumps(plan_d, indent=1) + "\n")
    if rows is None:
        row_list = [full]
    elif auto:
        row_list = auto_rows(full)
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
        env_arms[s.name] = {"FORENSICS_SWEEP_SIZES": ",".join(map(str, row_list)),
                            "FORENSICS_SWEEP_REPEAT": str(repeat),
                            "FORENSICS_SWEEP_RESULT": str(results / f"{s.name}.json"), **s.env}
    replay_cmd = [sys.executable, "-m", "forensics.sweep.replay", str(rank_dir / "site-inputs.pt")]
    op_site = info["op"] if info["op"].count(".") == 2 else f"{info['op']}.default"
    t1 = time.monotonic()
    kres = run_kernel(op_site, replay_cmd, steps="0", ranks="all", env_arms=env_arms, out=sweep_dir / "replay",
                      timeout_s=timeout_s, progress=progress, tools=tools, device=device, instruments=instruments)
    seconds["replay"] = round(time.monotonic() - t1, 2)
    program = None
    if (rank_dir / OUTPUT_JSON).is_file():
        program = json.loads((rank_dir / OUTPUT_JSON).read_text())
    tables, reps = {}, {}
    for s in settings:
        res_path = results / f"{s.name}.json"
        result = json.loads(res_path.read_text()) if res_path.is_file() else None
        if rows is not None:
            tables[s.name] = tbl.build(plan, s.name, result, kres, setting=s.label(), sizes=row_list)
        racy = result is not None and not all(e.get("repeats_equal", True) for e in result.get("sizes", []))
        if repeat > 1 or rows is None or racy:  # (the full size's two calls differing: the repeat verdict says so)
            reps[s.name] = tbl.repeat_verdict(plan, s.name, result, kres, program, setting=s.label())
    res = SweepResult(sweep_dir, plan, row_list, skipped, settings, kres, tables, info, seconds, reps, repeat, auto)
    write_outputs(res)
    return res


def write_outputs(res: SweepResult) -> None:
    """``replay/sweep/``: sweep.json, table.md, repro.py and a copy of the kept inputs."""
    from forensics.sweep import table as tbl  # noqa: PLC0415
    from forensics.sweep.repro import render_repro  # noqa: PLC0415

    d = res.kernel.capture_dir / "sweep"
    d.mkdir(parents=True, exist_ok=True)
    data = {"site": res.kept.get("label"), "op": res.plan.op, "plan": res.plan.to_json(), "rows": res.rows,
            "auto": res.auto, "skipped_rows": res.skipped_rows, "threads": res.kept.get("threads"),
            "repeat": res.repeat, "settings": [{"name": s.name, "env": s.env} for s in res.settings],
            "tables": {k: t.to_json() for k, t in res.tables.items()},
            "repeats": {k: r.to_json() for k, r in res.repeats.items()}, "seconds": res.seconds,
            "sweep_dir": str(res.sweep_dir)}
    (d / "sweep.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    md = [f"# Batch-invariance sweep of {res.kept.get('label')} ({res.plan.op})", "",
          f"Sliced: {res.plan.what}; used whole: {', '.join(res.plan.kept_whole) or 'nothing'}.", ""]
    for t in res.tables.values():
        md += tbl.markdown(t) + [""]
    for r in res.repeats.values():
        md += [f"## Repeats ({r.setting})", "", "Repeat verdict: " + r.verdict_line, "", f"Evidence: {r.evidence}.", ""]
    (d / "table.md").write_text("\n".join(md))
    shutil.copyfile(Path(res.kept["rank_dir"]) / "site-inputs.pt", d / "site-inputs.pt")
    (d / "sweep-plan.json").write_text((Path(res.kept["rank_dir"]) / "sweep-plan.json").read_text())
    if res.tables:  # the anchor-row check needs rows to slice
        (d / "repro.py").write_text(render_repro(res.plan, res.rows, res.kept))
        os.chmod(d / "repro.py", 0o755)
