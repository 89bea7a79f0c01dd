"""``forensics kernel``'s capture as a library: merge the options, plan the passes once, run them, write the manifest.

``capture_kernel(site, command)`` reruns ``command`` (unmodified; probes enter through the
environment) once per arm and once per instrument pass, each into its own folder of a fresh
capture directory, one process start per pass (:func:`forensics.runtime.launch.launch`). The
analysis is the judge's (:mod:`forensics.pipeline` runs one after the other): nothing here
imports :mod:`forensics.judge`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from forensics import __version__
from forensics.capture.directory import fresh_dir, new_manifest, write_manifest
from forensics.capture.environment import describe, describe_without_torch
from forensics.core.environment import redact_env, redact_obj, relevant_env
from forensics.capture.exits import describe_exit, signal_of
from forensics.core.errors import BadInput
from forensics.capture.passes import (
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
from forensics.core.site import Occurrence, Site, parse_site_or_occurrence
from forensics.runtime.launch import Interrupted, launch, signal_name
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
    received: int | None = None  # a signal forensics was sent while this pass ran (passed on to it)


@dataclass
class KernelResult:
    """What ``capture_kernel`` leaves: the capture directory, every pass, and (filled by
    :func:`forensics.pipeline.analyse`) the analysis or why there is none."""

    capture_dir: Path
    passes: list[PassResult] = field(default_factory=list)
    analysis: Any = None
    analysis_error: str | None = None
    analysis_exit: int | None = None  # the exit code of an analysis that refused the capture (bad input)
    device: str = "cuda"
    cuda_reason: str | None = None  # why no CUDA device is usable here (None when one is)
    site: Site | Occurrence | None = None  # the site, parsed once (forensics.core.site)

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


# --------------------------------------------------------------------------- options
#: Every option of ``forensics kernel`` and its default (the config keys, with ``env`` for ``--env``).
DEFAULTS: dict[str, Any] = dict(site=None, command=None, steps="1-2", ranks="all", arms=2, instruments=None,
                                toggles=(), env_arms=None, out=None, timeout_s=1800, ncu_mode="window",
                                max_records=2_000_000, device=None, env=None, arm_commands=())


def merge_options(given: dict[str, Any], config: str | os.PathLike[str] | dict[str, Any] | None = None) -> dict[str, Any]:
    """The one merge of flags and run config: a flag given (not None, not empty) wins, else the
    config's value, else the default. ``config`` is a run YAML path (read with
    :func:`load_run_config`) or a dict of the same keys. Every key of :data:`DEFAULTS` is in the result."""
    cfg = (load_run_config(config) if not isinstance(config, dict) else dict(config)) if config is not None else {}
    out: dict[str, Any] = {}
    for key, default in DEFAULTS.items():
        v = given.get(key)
        if v is None or (isinstance(v, (list, tuple, dict, str)) and not v and key != "site"):
            v = cfg.get(key)
        out[key] = default if v is None else v
    for key in ("instruments", "toggles", "arm_commands"):
        if out[key] is not None:
            out[key] = tuple(out[key])
    if out["instruments"] == ():
        out["instruments"] = None
    for key in ("steps", "ranks"):
        out[key] = str(out[key])
    return out


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
    status, reason, rc, received = "ok", None, None, None
    with open(p.log_path, "w") as log:
        for argv in [p.argv] + p.post:
            log.write("$ " + " ".join(argv) + "\n")
            log.flush()
            try:
                left = max(1.0, timeout_s - (time.monotonic() - t0))
                ended = launch(argv, env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                               timeout_s=left, who="forensics kernel", what=f"pass {p.name}")
            except OSError as e:
                status, reason, rc = "failed", f"could not start {argv[0]}: {e.strerror or e}", None
                break
            rc = ended.returncode
            if ended.received is not None:
                status, reason = "interrupted", f"forensics was sent {signal_name(ended.received)} (passed on to the pass)"
                received = ended.received
                break
            if ended.timed_out:
                status, reason = "timeout", f"stopped after {timeout_s:.0f} s (--timeout)"
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
    return PassResult(p.name, p.arm, status, reason, p.log_path, rc, round(time.monotonic() - t0, 2), received)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("$ ")]
    return lines[-1][:200] if lines else ""


def build_manifest(plan: Plan, command: list[str], instruments: tuple[str, ...],
                   environment: dict[str, Any] | None = None) -> dict[str, Any]:  # noqa: D401
    """The manifest contract: arms and passes, knobs and environment (``describe(probe_torch=False)``
    when not given), without secrets."""
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
        environment=redact_obj(dict(environment)) if environment is not None else describe(probe_torch=False),
        passes_run="sequential",  # see _run_all: arms sharing cores or a GPU could run differently
    )


class EnvironmentProbe:
    """The environment of the capture, described beside the first pass, never twice.

    With a CUDA device to describe (its name, SMs, capability, cuBLAS), ``describe()`` runs in one
    side process started before the first pass (CUDA is never initialised in this process) and is
    collected after the last. Otherwise (the CPU backend, or no CUDA device here) nothing is
    started: :func:`forensics.capture.environment.describe_without_torch` reads torch's version
    file instead of importing torch (a second torch import per ``kernel`` was ~1.7 s of CPU on a
    2-core machine, competing with the arms).
    """

    def __init__(self, device: str, tools: Tools):
        self.proc: subprocess.Popen | None = None
        self.static: dict[str, Any] | None = None
        if device == "cuda" and tools.cuda:
            code = ("import json,sys; from forensics.capture.environment import describe; "
                    "sys.stdout.write(json.dumps(describe()))")
            try:
                self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,  # noqa: S603
                                             stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
            except OSError:
                self.proc = None
        if self.proc is None:
            self.static = describe_without_torch(cuda_available=tools.cuda if device == "cuda" else None)

    def now(self) -> dict[str, Any]:
        """What is known before the passes run (the whole description when no side process runs)."""
        return self.static if self.static is not None else describe(probe_torch=False)

    def result(self, timeout_s: float = 120) -> dict[str, Any]:
        if self.static is not None:
            return self.static
        assert self.proc is not None
        try:
            out, _ = self.proc.communicate(timeout=timeout_s)
            if self.proc.returncode == 0:
                return json.loads(out)
        except (subprocess.SubprocessError, ValueError):
            self.proc.kill()
            self.proc.wait()
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


def as_site(site: Site | Occurrence | str | None) -> Site | Occurrence:
    """The parsed site: a :class:`Site` or :class:`Occurrence` as given, text parsed (BadSite)."""
    if isinstance(site, (Site, Occurrence)):
        return site
    if not site:
        raise ValueError("no site given (--site or site: in the run config)")
    return parse_site_or_occurrence(str(site))


def capture_kernel(opts: dict[str, Any], *, progress: bool = True, tools: Tools | None = None) -> KernelResult:
    """Run every pass of ``opts`` (:func:`merge_options`'s result) into a fresh capture directory.

    ``opts["site"]`` is parsed once here when it is text (a parsed value is used as it is).
    ``tools`` is what :func:`discover_tools` found (looked up here when None). The plan is made
    once, into the capture directory; a plan that is refused (ValueError) leaves no folder. A
    signal sent to this process is passed on to the pass that runs, the passes after it are not
    run, the manifest records what ran, and :class:`Interrupted` (exit 128+N) is raised.
    """
    site = as_site(opts["site"])
    tools = tools or discover_tools()
    dev = resolve_device(opts["device"], tools, opts["instruments"])
    instruments = tuple(opts["instruments"]) if opts["instruments"] is not None else default_instruments(dev)
    cmd = list(opts["command"] or default_command(dev))
    out_base = Path(opts["out"] or DEFAULT_OUT)
    if out_base.exists() and not out_base.is_dir():
        raise BadInput(out_base, "exists and is not a directory; --out takes a capture directory")
    before = set(os.listdir(out_base.parent)) if out_base.parent.is_dir() else set()
    capture_dir = fresh_dir(out_base).resolve()
    try:
        plan = plan_passes(str(site), cmd, out=capture_dir, steps=opts["steps"], ranks=opts["ranks"],
                           arms=int(opts["arms"]), instruments=instruments, toggles=opts["toggles"],
                           env_arms=opts["env_arms"], tools=tools, ncu_mode=opts["ncu_mode"],
                           max_records=int(opts["max_records"]), device=dev, base_env=opts["env"],
                           arm_commands=tuple(opts["arm_commands"]))
    except ValueError:
        _unclaim(capture_dir, made=capture_dir.name not in before)
        raise
    prepare(plan)
    environment = EnvironmentProbe(dev, tools)
    write_manifest(capture_dir, build_manifest(plan, cmd, instruments, environment.now()))
    results = _run_all(plan, float(opts["timeout_s"]), progress)
    _record_results(capture_dir, results, None if environment.static is not None else environment.result())
    result = KernelResult(capture_dir=capture_dir, passes=results, device=dev,
                          cuda_reason=None if tools.cuda else tools.cuda_reason, site=site)
    stopped = next((r for r in results if r.status == "interrupted"), None)
    if stopped is not None:
        raise Interrupted(stopped.received or 2, f"kernel: {stopped.reason}; the passes after {stopped.name} were "
                                                 f"not run; what ran is in {capture_dir} (`forensics analyze` reads it)")
    return result


def _unclaim(capture_dir: Path, made: bool) -> None:
    """Undo the claim of a capture directory nothing was written to (removed when this run made it)."""
    from forensics.runtime.atomic import release_dir  # noqa: PLC0415 - used only when a plan is refused

    release_dir(capture_dir)
    if made:
        try:
            capture_dir.rmdir()
        except OSError:
            pass


def _run_all(plan: Plan, timeout_s: float, progress: bool) -> list[PassResult]:
    """Every pass, one after the other (the capture records ``passes_run: sequential``): on a CPU
    arm its threads and its oneDNN/oneMKL kernel choice depend on the cores it finds free, so two
    arms sharing the cores could run differently from each other and from the program alone;
    on a GPU, arms sharing a device change its timing-dependent paths. After an interrupted pass
    the rest are recorded as not run."""
    results: list[PassResult] = []

    def one(p: Pass) -> PassResult:
        if any(r.status == "interrupted" for r in results):
            why = "not run: an earlier pass was interrupted"
            return PassResult(p.name, p.arm, "skipped", why, p.log_path, None, 0.0)
        return run_pass(p, timeout_s)

    if not progress:
        for p in plan.passes:
            results.append(one(p))
        return results
    from forensics.runtime.console import make_console  # noqa: PLC0415 - rich, only with a progress display
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    console = make_console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=False) as bar:
        for p in plan.passes:
            task = bar.add_task(f"pass {p.name}", total=1)
            r = one(p)
            # the status only: the reason is printed once, whole, with the results (stdout)
            bar.update(task, completed=1, description=f"pass {p.name}: {r.status}")
            results.append(r)
    return results
