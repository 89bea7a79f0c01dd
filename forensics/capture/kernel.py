"""``forensics kernel`` as a library: plan the passes, run them, write the manifest, analyse.

``run_kernel(site, command)`` reruns ``command`` (unmodified; probes enter through the
environment) once per arm and once per instrument pass, each into its own folder of a fresh
capture directory, then calls :func:`forensics.judge.analysis.analyze` on it.
"""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from forensics import __version__
from forensics.capture.directory import fresh_dir, new_manifest, write_manifest
from forensics.capture.environment import describe
from forensics.core.environment import redact_env, redact_obj, relevant_env
from forensics.capture.exits import describe_exit, signal_of
from forensics.core.errors import BadInput
from forensics.capture.passes import (
    INSTRUMENTS,
    NCU_PERMISSION_REASON,
    Pass,
    Plan,
    Tools,
    default_instruments,
    discover_tools,
    ncu_permission_denied,
    plan_passes,
    resolve_device,
)
from forensics.core.site import parse_site_or_occurrence
from probes.config import bootstrap_env

#: Keys a ``--config run.yaml`` may hold (the flags' names; flags override the file).
CONFIG_KEYS = {"site", "command", "steps", "ranks", "arms", "instruments", "toggles", "env_arms", "out",
               "timeout_s", "timeout", "ncu_mode", "max_records", "device", "env", "arm_commands"}
DEFAULT_OUT = "forensics-capture"


@dataclass
class PassResult:
    """How one pass went: status is ok | failed | timeout | skipped."""

    name: str
    arm: str
    status: str
    reason: str | None
    log_path: Path
    returncode: int | None
    seconds: float


@dataclass
class KernelResult:
    """What ``run_kernel`` leaves: the capture directory, every pass, and the analysis (or None)."""

    capture_dir: Path
    passes: list[PassResult] = field(default_factory=list)
    analysis: Any = None
    analysis_error: str | None = None
    device: str = "cuda"
    cuda_reason: str | None = None  # why no CUDA device is usable here (None when one is)

    def ran(self, name: str) -> bool:
        return any(p.name == name and p.status == "ok" for p in self.passes)


# --------------------------------------------------------------------------- config
def load_run_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run YAML (the same keys as the flags). BadInput naming the file on any problem."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(path, "no such run config file")
    from forensics.runtime.inputs import read_utf8  # noqa: PLC0415 - strict UTF-8, size-bounded, no FIFO

    text = read_utf8(path, 1 << 20, "run config")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        if isinstance(e, yaml.reader.ReaderError):  # a NUL or another control character: its own words, one line
            line = text.count("\n", 0, e.position) + 1
            char = f"U+{e.character:04X}" if isinstance(e.character, int) else repr(e.character)
            why = f"character {char} is not allowed in YAML ({e.reason})"
        else:
            why = str(getattr(e, "problem", None) or e).splitlines()[0]
        raise BadInput(path, f"not valid YAML: {why}", line) from None
    if data is None:
        raise BadInput(path, "empty run config")
    if not isinstance(data, dict):
        raise BadInput(path, "a run config must be a mapping of option: value")
    unknown = sorted(set(data) - CONFIG_KEYS)
    if unknown:
        raise BadInput(path, f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(CONFIG_KEYS))}")
    if "timeout" in data:
        data.setdefault("timeout_s", data.pop("timeout"))
    for key in ("instruments", "toggles"):
        if isinstance(data.get(key), str):
            data[key] = [x.strip() for x in data[key].split(",") if x.strip()]
    if isinstance(data.get("command"), str):
        import shlex  # noqa: PLC0415

        try:
            data["command"] = shlex.split(data["command"])
        except ValueError as e:  # an unbalanced quote
            raise BadInput(path, f"command: {e} in {data['command'][:80]!r}") from None
    if "env_arms" in data and not isinstance(data["env_arms"], dict):
        raise BadInput(path, "env_arms must map arm names to {VAR: value}")
    for key in ("steps", "ranks"):
        if key in data:
            data[key] = str(data[key])
    data = {k: v for k, v in data.items() if v is not None}  # `key:` with no value means not given
    _check_config_types(data, path)
    return data


def _check_config_types(data: dict[str, Any], path: Path) -> None:
    """Each run-config value has the type its flag takes: else one BadInput naming the key (never a traceback)."""
    def is_int(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    checks = {
        "site": (lambda v: isinstance(v, str), "text such as gemm:NT:acc0:grad1"),
        "command": (lambda v: isinstance(v, list) and all(isinstance(x, (str, int, float)) and not isinstance(x, bool)
                                                          for x in v), "a command line (text or a list)"),
        "arms": (lambda v: is_int(v) and v >= 1, "a whole number >= 1"),
        "instruments": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of names"),
        "toggles": (lambda v: isinstance(v, list) and all(isinstance(x, str) and "=" in x for x in v),
                    "a list of NAME=VALUE"),
        "out": (lambda v: isinstance(v, str) and bool(v), "a directory path"),
        "timeout_s": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf"),
                      "a number of seconds > 0"),
        "ncu_mode": (lambda v: isinstance(v, str), "window or nvtx"),
        "max_records": (lambda v: is_int(v) and v >= 1, "a whole number >= 1"),
        "device": (lambda v: isinstance(v, str), "cuda or cpu"),
        "env": (lambda v: isinstance(v, dict) and all(isinstance(k, str) and isinstance(x, (str, int, float))
                                                      and not isinstance(x, bool) for k, x in v.items()),
                "a mapping NAME: value"),
        "arm_commands": (lambda v: isinstance(v, list) and all(isinstance(x, (str, list)) for x in v),
                         "a list of command lines"),
    }
    for key, (ok, what) in checks.items():
        if key in data and data[key] is not None and not ok(data[key]):
            raise BadInput(path, f"{key} must be {what}, not {type(data[key]).__name__} {data[key]!r}"[:300])
    for arm, env in (data.get("env_arms") or {}).items():
        if not isinstance(arm, str) or not isinstance(env, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int, float)) and not isinstance(v, bool)
                for k, v in env.items()):
            raise BadInput(path, f"env_arms.{arm} must map NAME: VALUE (plain values)")
    if isinstance(data.get("command"), list):
        data["command"] = [str(x) for x in data["command"]]
    if isinstance(data.get("arm_commands"), list):
        import shlex  # noqa: PLC0415

        data["arm_commands"] = [shlex.split(x) if isinstance(x, str) else [str(y) for y in x]
                                for x in data["arm_commands"]]


# --------------------------------------------------------------------------- running
def default_command(device: str = "cuda") -> list[str]:
    """The bundled example workload (TE-style linear layers), run with this Python on ``device``."""
    cmd = [sys.executable, "-m", "forensics.capture.example_workload"]
    return cmd + (["--cpu"] if device == "cpu" else [])


def prepare(plan: Plan) -> None:
    """Create every folder and probe config of the plan (the capture directory exists already)."""
    (plan.out / "passes").mkdir(parents=True, exist_ok=True)
    for p in plan.passes:
        if p.skip_reason is None:
            p.folder.mkdir(parents=True, exist_ok=True)
            if p.probe_config is not None and p.config_path is not None:
                p.probe_config.write(p.config_path)


def pass_env(p: Pass, base: dict[str, str] | None = None) -> dict[str, str]:
    """The full environment of a pass: parent env + bootstrap + the pass's additions."""
    env = dict(os.environ if base is None else base)
    env.update(p.env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if p.config_path is not None:
        env = bootstrap_env(p.config_path, env)
    return env


def run_pass(p: Pass, timeout_s: float, base_env: dict[str, str] | None = None) -> PassResult:
    """Run one pass (and its post steps) with its own log and timeout; never raises for the pass's failure."""
    p.log_path.parent.mkdir(parents=True, exist_ok=True)
    if p.skip_reason:
        p.log_path.write_text(f"skipped: {p.skip_reason}\n")
        return PassResult(p.name, p.arm, "skipped", p.skip_reason, p.log_path, None, 0.0)
    env = pass_env(p, base_env)
    t0 = time.monotonic()
    status, reason, rc = "ok", None, None
    with open(p.log_path, "w") as log:
        for argv in [p.argv] + p.post:
            log.write("$ " + " ".join(argv) + "\n")
            log.flush()
            try:
                left = max(1.0, timeout_s - (time.monotonic() - t0))
                proc = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=left,
                                      stdin=subprocess.DEVNULL)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                status, reason = "timeout", f"stopped after {timeout_s:.0f} s (--timeout)"
                break
            except OSError as e:
                status, reason, rc = "failed", f"could not start {argv[0]}: {e.strerror or e}", None
                break
            if rc != 0:
                status, reason = "failed", describe_exit(rc)
                break
    text = p.log_path.read_text(errors="replace")
    if p.name == "ncu" and ncu_permission_denied(text):
        status, reason = "failed", NCU_PERMISSION_REASON
    elif status == "failed" and reason and reason.startswith(("exit status", "killed by")):
        last = _last_line(text)
        if last:
            reason = f"{reason}: {last}"
    return PassResult(p.name, p.arm, status, reason, p.log_path, rc, round(time.monotonic() - t0, 2))


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    return lines[-1][:200] if lines else ""


def build_manifest(plan: Plan, command: list[str], instruments: tuple[str, ...]) -> dict[str, Any]:  # noqa: D401
    """The manifest contract: arms and passes, knobs and environment, without secrets."""
    arms = []
    for p in plan.passes:
        entry: dict[str, Any] = {"name": p.name, "role": p.role}
        if p.role == "pass":
            entry["of"] = p.arm
        entry["env"] = redact_env({k: v for k, v in p.env.items()})
        if (p.command or p.argv) != list(command) and p.role == "arm":  # p.command: without a tool's wrapper
            entry["command"] = [str(c) for c in (p.command or p.argv)]  # an --arm-command arm: the other run's command line
        if p.toggle:
            entry["toggle"] = redact_env(p.toggle)
        arms.append(entry)
    return new_manifest(
        tool_version=__version__,
        command=[str(c) for c in command],
        site=plan.site,
        steps=plan.steps,
        ranks=plan.ranks,
        device=plan.device,
        instruments=list(instruments),
        arms=arms,
        knobs=relevant_env(),
        environment=describe(probe_torch=False),
    )


@functools.lru_cache(maxsize=1)
def environment_snapshot(timeout_s: float = 120) -> dict[str, Any]:
    """``describe()`` run in a subprocess (CUDA never initialised in this process); without torch on failure.

    Taken once per ``forensics`` process (``forensics knob`` runs several captures in a row).
    """
    import json  # noqa: PLC0415

    code = "import json,sys; from forensics.capture.environment import describe; sys.stdout.write(json.dumps(describe()))"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        if r.returncode == 0:
            return json.loads(r.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    return describe(probe_torch=False)


def _record_results(capture_dir: Path, results: list[PassResult], environment: dict[str, Any] | None = None) -> None:
    """Add each pass's outcome (and the full environment) to the manifest we wrote moments ago."""
    from forensics.capture.directory import MANIFEST  # noqa: PLC0415

    path = capture_dir / MANIFEST
    data = yaml.safe_load(path.read_text()) or {}
    by_name = {r.name: r for r in results}
    for entry in data.get("arms", []):
        r = by_name.get(entry["name"])
        if r is not None:
            entry.update(status=r.status, rc=r.returncode, seconds=r.seconds)
            if r.reason:
                entry["reason"] = r.reason
            if signal_of(r.returncode) and r.status == "failed":
                entry["signal"] = signal_of(r.returncode)  # a crash: the program was killed by it
    if environment:
        data["environment"] = redact_obj(dict(environment))
    write_manifest(capture_dir, data, overwrite=True)


def run_kernel(
    site: str,
    command: list[str] | None,
    *,
    steps: str = "1-2",
    ranks: str = "all",
    arms: int = 2,
    instruments: tuple[str, ...] | list[str] | None = None,
    toggles: tuple[str, ...] | list[str] = (),
    env_arms: dict[str, dict[str, str]] | None = None,
    out: str | os.PathLike[str] | None = None,
    timeout_s: float = 1800,
    config: str | os.PathLike[str] | dict[str, Any] | None = None,
    progress: bool = True,
    tools: Tools | None = None,
    ncu_mode: str = "window",
    max_records: int = 2_000_000,
    device: str | None = None,
    base_env: dict[str, str] | None = None,
    arm_commands: tuple[list[str], ...] | list[list[str]] = (),
) -> KernelResult:
    """Run every pass of ``command`` for ``site`` into a fresh capture directory, then analyse it.

    ``config`` (a run YAML path or a dict) fills any argument left at its default. ``tools``
    overrides the discovery of ncu/nsys/CUDA (tests); ``max_records`` is the per-rank CUPTI record
    budget. ``device`` (cuda | cpu; default: cuda when a CUDA device is present, else cpu) picks
    the backend; ``instruments=None`` means all of the device's. Never overwrites an existing capture.
    """
    given = dict(steps=steps, ranks=ranks, arms=arms, instruments=None if instruments is None else tuple(instruments),
                 toggles=tuple(toggles), env_arms=env_arms, out=out, timeout_s=timeout_s, ncu_mode=ncu_mode,
                 command=command, site=site, max_records=max_records, device=device, env=base_env,
                 arm_commands=tuple(arm_commands))
    defaults = dict(steps="1-2", ranks="all", arms=2, instruments=None, toggles=(), env_arms=None, out=None,
                    timeout_s=1800, ncu_mode="window", command=None, site=None, max_records=2_000_000, device=None,
                    env=None, arm_commands=())
    if config is not None:
        cfg = load_run_config(config) if not isinstance(config, dict) else dict(config)
        for k, v in cfg.items():
            if k in given and given[k] == defaults[k]:
                given[k] = tuple(v) if k in ("instruments", "toggles") else v
    site = given["site"]
    if not site:
        raise ValueError("no site given (--site or site: in the run config)")
    parse_site_or_occurrence(str(site))
    tools = tools or discover_tools()
    dev = resolve_device(given["device"], tools, given["instruments"])
    instruments = tuple(given["instruments"]) if given["instruments"] is not None else default_instruments(dev)
    cmd = list(given["command"] or default_command(dev))
    out_base = Path(given["out"] or DEFAULT_OUT)
    if out_base.exists() and not out_base.is_dir():
        raise BadInput(out_base, "exists and is not a directory; --out takes a capture directory")
    plan_passes(str(site), cmd, out=out_base, steps=str(given["steps"]), ranks=str(given["ranks"]),
                arms=int(given["arms"]), instruments=instruments, toggles=given["toggles"],
                env_arms=given["env_arms"], tools=tools, ncu_mode=given["ncu_mode"],
                max_records=int(given["max_records"]), device=dev, base_env=given["env"],
                arm_commands=tuple(given["arm_commands"]))  # ValueError before any folder is made
    capture_dir = fresh_dir(out_base).resolve()
    plan = plan_passes(str(site), cmd, out=capture_dir, steps=str(given["steps"]), ranks=str(given["ranks"]),
                       arms=int(given["arms"]), instruments=instruments, toggles=given["toggles"],
                       env_arms=given["env_arms"], tools=tools, ncu_mode=given["ncu_mode"],
                       max_records=int(given["max_records"]), device=dev, base_env=given["env"],
                       arm_commands=tuple(given["arm_commands"]))
    prepare(plan)
    env_box: dict[str, Any] = {}
    env_thread = threading.Thread(target=lambda: env_box.update(environment=environment_snapshot()), daemon=True)
    env_thread.start()  # torch's import in a side process overlaps the first pass
    write_manifest(capture_dir, build_manifest(plan, cmd, instruments))
    results = _run_all(plan, float(given["timeout_s"]), progress)
    env_thread.join(timeout=180)
    _record_results(capture_dir, results, env_box.get("environment"))
    result = KernelResult(capture_dir=capture_dir, passes=results, device=dev,
                          cuda_reason=None if tools.cuda else tools.cuda_reason)
    result.analysis, result.analysis_error = _analyse(capture_dir, str(site))
    return result


def _run_all(plan: Plan, timeout_s: float, progress: bool) -> list[PassResult]:
    results: list[PassResult] = []
    if not progress:
        return [run_pass(p, timeout_s) for p in plan.passes]
    from forensics.runtime.console import make_console  # noqa: PLC0415
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    console = make_console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=False) as bar:
        for p in plan.passes:
            task = bar.add_task(f"pass {p.name}", total=1)
            r = run_pass(p, timeout_s)
            # the status only: the reason is printed once, whole, with the results (stdout)
            bar.update(task, completed=1, description=f"pass {p.name}: {r.status}")
            results.append(r)
    return results


def _analyse(capture_dir: Path, site: str) -> tuple[Any, str | None]:
    """``forensics.judge.analysis.analyze`` on the capture, or (None, why) when it is absent or fails."""
    try:
        from forensics.judge import analysis  # noqa: PLC0415
    except ImportError as e:
        return None, f"analysis unavailable ({e})"
    try:
        return analysis.analyze(capture_dir, site=site, keep_going=True), None
    except TypeError:
        try:
            return analysis.analyze(capture_dir, site=site), None
        except Exception as e:  # noqa: BLE001
            return None, f"analysis failed: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001
        return None, f"analysis failed: {type(e).__name__}: {e}"
