"""Pass planning for ``forensics kernel``: which processes to start, with which argv and env.

Pure functions (no process is started here) so the exact ncu/nsys argument lists can be unit
tested. A *pass* is one run of the user's command:

* an **arm pass** per arm (``a1``, ``a2``, toggle arms): the command under the probe bootstrap
  (site ranges + digests, CUPTI JSONL) with ``CUBLASLT_LOG_LEVEL=5`` and a per-process
  ``CUBLASLT_LOG_FILE=<arm>/cublaslt.%i.log`` (the rank is unknown before launch under torchrun;
  the probes record their pid so the loader maps pid -> rank);
* an **ncu pass** of the first arm: ``ncu --target-processes all --nvtx`` over the step window
  bracketed by cudaProfilerStart/Stop from the probe (default), or filtered to the site's NVTX
  start/end ranges in the ``forensics`` domain (``ncu_filter="nvtx"``);
* an **nsys pass** of the first arm: ``nsys profile -t cuda,nvtx,cublas
  --capture-range=cudaProfilerApi`` then ``nsys export --type sqlite``.

What each instrument contributes (an arm's env, an in-process probe, a pass of its own with its
argv) is its module's ``Switch`` (:mod:`forensics.instruments`); this module only assembles them.
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from forensics import instruments as registry
from forensics.core.redact import Redactor, is_secret_key
from forensics.instruments.ncu import NCU_PERMISSION_REASON, ncu_permission_denied  # noqa: F401 (capture.kernel's)
from probes.config import ProbeConfig, bootstrap_env
from probes.window import parse_ranks, parse_steps

#: Instruments each device backend runs, in pass order (the registry's ``Switch`` of each;
#: docs/cpu-backend.md maps one backend onto the other). The functions below ask the registry when
#: called (an instrument registered later is planned too); these are the names at import.
DEVICE_INSTRUMENTS: dict[str, tuple[str, ...]] = registry.capture_devices()
INSTRUMENTS = DEVICE_INSTRUMENTS["cuda"]  # the CUDA backend's instruments (the default)
DEVICES = tuple(DEVICE_INSTRUMENTS)
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Tools:
    """What this machine offers; resolved once by :func:`discover_tools` (or given by a test).
    ``ncu``/``nsys``: their paths; ``other``: the path of any other own-pass instrument's tool."""

    ncu: str | None = None
    nsys: str | None = None
    cuda: bool = False
    cuda_reason: str = "no CUDA device visible"
    other: dict[str, str | None] = field(default_factory=dict)
    #: An AMD GPU (ROCm) is present (:func:`rocm_gpu_status`; asked only where no CUDA device is).
    rocm: bool = False
    rocm_reason: str = "not asked"

    def path(self, tool: str) -> str | None:
        """Where ``tool`` is on this machine (None: not found)."""
        return getattr(self, tool) if tool in ("ncu", "nsys") else self.other.get(tool)


@dataclass
class Pass:
    """One planned process: the exact argv, the environment additions, where its log goes."""

    name: str  # a1, a2, t1-..., ncu, nsys
    arm: str  # the arm whose configuration it runs (the pass's own name for an arm pass)
    role: str  # "arm" | "pass"
    folder: Path  # <out>/<name>
    argv: list[str]
    env: dict[str, str]  # additions to the parent environment
    log_path: Path
    probe_config: ProbeConfig | None = None
    config_path: Path | None = None
    post: list[list[str]] = field(default_factory=list)  # run after the pass (nsys export)
    skip_reason: str | None = None  # set when the pass cannot run here
    toggle: dict[str, str] = field(default_factory=dict)
    arm_env: dict[str, str] = field(default_factory=dict)  # the arm's own env (toggles), for the manifest
    notes: list[str] = field(default_factory=list)  # said by --dry-run (an arm wrapper that cannot run here)
    command: list[str] = field(default_factory=list)  # an arm's own command, without a tool's wrapper (rocprofv3)


@dataclass
class Plan:
    """Everything ``forensics kernel`` will do, in order."""

    out: Path
    site: str
    command: list[str]
    steps: str
    ranks: str
    instruments: tuple[str, ...]
    passes: list[Pass]
    device: str = "cuda"

    @property
    def arms(self) -> list[Pass]:
        return [p for p in self.passes if p.role == "arm"]


# --------------------------------------------------------------------------- tool discovery
def find_tool(name: str, patterns: tuple[str, ...] = ()) -> str | None:
    """``name`` on PATH, else the newest match of ``patterns`` (CUDA / Nsight install dirs)."""
    hit = shutil.which(name)
    if hit:
        return hit
    for pattern in patterns:
        found = sorted(glob.glob(pattern))
        if found:
            return found[-1]
    return None


def cuda_status(timeout_s: float = 60) -> tuple[bool, str]:
    """(available, one-line reason): no GPU device node (``/dev/nvidia0``..., or WSL's ``/dev/dxg``)
    means no GPU; else ``nvidia-smi -L``, else torch in a subprocess (which keeps CUDA out of the
    ``forensics`` process itself). A driver's control node alone (``/dev/nvidiactl`` on a VM with
    the driver and no GPU) is no device: asking torch there cost ~2 s of every CPU ``kernel``.
    """
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    if not glob.glob("/dev/nvidia[0-9]*") and not os.path.exists("/dev/dxg"):
        why = " (/dev/nvidiactl only: a driver, no GPU)" if os.path.exists("/dev/nvidiactl") else ""
        return False, f"no CUDA device (no /dev/nvidia<N> device node on this machine{why})"
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            r = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout_s)
            if r.returncode == 0 and "GPU" in r.stdout:
                return True, r.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    code = "import torch,sys; sys.stdout.write('1' if torch.cuda.is_available() else '0')"
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"no CUDA device (could not ask torch: {type(e).__name__})"
    if r.stdout.strip() == "1":
        return True, "torch.cuda.is_available()"
    return False, "no CUDA device visible (nvidia-smi absent or no GPU, torch.cuda.is_available() is False)"


def rocm_gpu_status(timeout_s: float = 60) -> tuple[bool, str]:
    """(an AMD GPU is present, one-line reason), cheaply and without importing torch here: the ROCm
    kernel driver's nodes first (``/dev/kfd`` and a ``/dev/dri/renderD*`` render node: no node, no
    AMD GPU, nothing run); then ``rocminfo``/``rocm-smi`` on PATH or under /opt/rocm (a gfx agent, or a
    GPU line); else torch in a subprocess (``torch.version.hip`` and ``torch.cuda.is_available()``:
    a ROCm build of PyTorch sees the AMD GPU through its CUDA API)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    if not os.path.exists("/dev/kfd"):
        return False, "no AMD GPU (no /dev/kfd: the amdgpu kernel driver's compute node is absent)"
    if not glob.glob("/dev/dri/renderD*"):
        return False, "no AMD GPU (/dev/kfd but no /dev/dri/renderD* render node)"
    for tool, args, seen in (("rocminfo", [], re.compile(r"^\s*Name:\s+(gfx\w+)", re.M)),
                             ("rocm-smi", ["--showproductname"], re.compile(r"^GPU\[\d+\][^\n]*", re.M))):
        path = find_tool(tool, (f"/opt/rocm/bin/{tool}", f"/opt/rocm-*/bin/{tool}"))
        if path is None:
            continue
        try:
            r = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.SubprocessError):
            continue
        m = seen.search(r.stdout or "")
        if r.returncode == 0 and m:
            return True, f"{tool}: {m.group(m.lastindex or 0).strip()}"
    code = ("import torch,sys; sys.stdout.write('1' if getattr(torch.version, 'hip', None) "
            "and torch.cuda.is_available() else '0')")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"no AMD GPU confirmed (/dev/kfd present; could not ask torch: {type(e).__name__})"
    if r.stdout.strip() == "1":
        return True, "torch.version.hip and torch.cuda.is_available()"
    return False, "no AMD GPU confirmed (/dev/kfd present; no rocminfo/rocm-smi, and no ROCm build of torch sees one)"


def resolve_device(device: str | None, tools: Tools, instruments: tuple[str, ...] | list[str] | None = None) -> str:
    """The backend to run: ``device`` when given (cuda | rocm | cpu); else the one device whose
    instruments were named (``--instruments cupti,cublaslt`` is cuda); else cuda when a CUDA device is
    present, rocm when an AMD GPU is (:func:`rocm_gpu_status`), else cpu."""
    if device is None or str(device).strip() == "":
        if instruments:
            owners = [d for d, known in registry.capture_devices().items() if set(instruments) <= set(known)]
            if len(owners) == 1:
                return owners[0]
        return "cuda" if tools.cuda else "rocm" if tools.rocm else "cpu"
    d = str(device).strip().lower()
    if d not in (known := registry.capture_devices()):
        raise ValueError(f"--device {device!r} must be one of {', '.join(known)}")
    return d


def default_instruments(device: str) -> tuple[str, ...]:
    """Every instrument of a device backend."""
    return registry.capture_devices()[device]


def discover_tools() -> Tools:
    """Look for every own-pass instrument's tool (ncu, nsys, rocprofv3), a CUDA device on this machine
    and, where there is none, an AMD GPU."""
    ok, reason = cuda_status()
    found = {p.tool: find_tool(p.tool, p.globs) for i in registry.INSTRUMENTS
             if i.switch is not None and (p := i.switch.own_pass) is not None}
    rocm, rocm_reason = rocm_gpu_status() if not ok else (False, "not asked: a CUDA device is present")
    return Tools(ncu=found.pop("ncu", None), nsys=found.pop("nsys", None), cuda=ok, cuda_reason=reason, other=found,
                 rocm=rocm, rocm_reason=rocm_reason)


# --------------------------------------------------------------------------- argv builders
def parse_toggle(text: str) -> tuple[str, str]:
    """``"NAME=VALUE"`` -> (NAME, VALUE); ValueError with a one-line reason otherwise."""
    if "=" not in text:
        raise ValueError(f"toggle {text!r} must be NAME=VALUE, e.g. CUBLAS_WORKSPACE_CONFIG=:4096:8")
    name, value = text.split("=", 1)
    name = name.strip()
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
        raise ValueError(f"toggle {text!r}: {name!r} is not an environment variable name")
    return name, value


def toggle_arm_name(index: int, name: str) -> str:
    """Folder name of the index-th toggle arm (1-based): ``t1-cublas_workspace_config``; a knob named
    like a secret (``NVTE_API_TOKEN``) gives ``t1-redacted-knob``
    (an arm's name is a folder and a key of reports, and a bundle redacts the values of secret names)."""
    return f"t{index}-redacted-knob" if is_secret_key(name) else f"t{index}-{name.lower()}"


# --------------------------------------------------------------------------- the plan
def plan_passes(
    site: str,
    command: list[str],
    *,
    out: Path,
    steps: str = "1-2",
    ranks: str = "all",
    arms: int = 2,
    instruments: tuple[str, ...] | list[str] | None = None,
    toggles: tuple[str, ...] | list[str] = (),
    env_arms: dict[str, dict[str, str]] | None = None,
    tools: Tools | None = None,
    ncu_mode: str = "window",
    max_records: int = 2_000_000,
    device: str = "cuda",
    base_env: dict[str, str] | None = None,
    arm_commands: tuple[list[str], ...] | list[list[str]] = (),
) -> Plan:
    """Plan every pass. ``env_arms`` (explicit ``{arm: {VAR: value}}``) replaces the ``arms`` copies.

    ``device="cpu"``: the arms run the CPU instruments inside the process (:mod:`probes.cpu`:
    torch.profiler, oneDNN and oneMKL verbose logs); there are no ncu/nsys passes.
    ``instruments=None`` means every instrument of the device.

    ``base_env`` (``--env``) is set in every arm and pass (a toggle overrides it); each of
    ``arm_commands`` (``--arm-command``) is one more arm ``c1``, ``c2``... running that command
    instead (declared in the manifest as ``toggle: {command: ...}``: run B's command line).

    Each arm pass gets its own probe config (written later, at ``<out>/<arm>/probe.json``).
    Passes that cannot run carry ``skip_reason`` (one line) instead of being dropped.
    """
    tools = tools or Tools()
    out = Path(out)
    backends = registry.capture_devices()
    if device not in backends:
        raise ValueError(f"--device {device!r} must be one of {', '.join(backends)}")
    own = backends[device]
    instruments = tuple(own if instruments is None else instruments)
    bad = [i for i in instruments if i not in own]
    unknown = [i for i in bad if not any(i in known for known in backends.values())]
    if unknown:
        raise ValueError(f"unknown instrument(s) {', '.join(unknown)}; choose from {', '.join(own)} (--device {device})")
    if bad:
        other = [d for d, known in backends.items() if d != device and set(bad) <= set(known)]
        hint = f" ({', '.join(bad)}: --device {other[0]})" if other else ""
        raise ValueError(f"instrument(s) {', '.join(bad)} not available with --device {device}; "
                         f"choose from {', '.join(own)}{hint}")
    if not command:
        raise ValueError("no command to run")
    parse_steps(steps)  # ValueError with a one-line reason, before anything runs
    parse_ranks(ranks)
    arm_specs: list[tuple[str, dict[str, str], dict[str, str]]] = []  # (name, env, toggle)
    if env_arms:
        # folders of their own: the passes' logs and each own-pass instrument's pass (ncu, nsys)
        reserved = ("passes", *(i.name for i in registry.INSTRUMENTS if i.switch and i.switch.own_pass))
        for name, env in env_arms.items():
            if not _ARM_NAME.match(name) or name in reserved:
                raise ValueError(f"arm name {name!r} must be letters, digits, '_.-' and not {'/'.join(reserved)}")
            env = {str(k): str(v) for k, v in (env or {}).items()}
            arm_specs.append((name, env, dict(env)))
    else:
        if arms < 1:
            raise ValueError("--arms must be at least 1")
        arm_specs += [(f"a{i}", {}, {}) for i in range(1, arms + 1)]
    for i, text in enumerate(toggles, 1):
        name, value = parse_toggle(text)
        arm_specs.append((toggle_arm_name(i, name), {name: value}, {name: value}))
    commands = {name: list(command) for name, _, _ in arm_specs}
    for i, other in enumerate(arm_commands, 1):
        other = [str(x) for x in other or []]
        if not other:
            raise ValueError(f"--arm-command {i} is empty: give the other run's command line")
        name = f"c{i}"
        arm_specs.append((name, {}, {"command": shlex.join(other)}))
        commands[name] = other
    base = {str(k): str(v) for k, v in (base_env or {}).items()}
    for k in base:
        parse_toggle(f"{k}=")  # a variable name, or ValueError
    arm_specs = [(name, {**base, **env}, toggle) for name, env, toggle in arm_specs]

    # each chosen instrument's switch: env in every arm, an in-process probe, or a pass of its own
    chosen = [i for i in registry.captured(device) if i.name in instruments]
    cpu_list = [i.name for i in chosen if i.switch.probe == "cpu"]
    probe_list = ["sites"] + list(dict.fromkeys(i.switch.probe for i in chosen if i.switch.probe))
    passes: list[Pass] = []
    for name, env, toggle in arm_specs:
        folder = out / name
        add = dict(env)
        for inst in chosen:
            if inst.switch.env is not None:
                add.update(inst.switch.env(folder))
        cfg = ProbeConfig(out_dir=str(folder), probes=probe_list, arm=name, site=site, steps=steps, ranks=ranks,
                          max_records=max_records, cpu_instruments=cpu_list, nvtx=device != "cpu")
        argv, notes = list(commands[name]), []
        for inst in chosen:  # a tool that wraps every arm (rocprofv3); the arm runs unwrapped where it cannot
            own = inst.switch.own_pass
            if own is not None and own.wraps_arms:
                why = _skip(tools, tools.path(own.tool), own.missing, own.device_status)
                wrapped = own.argv(tools.path(own.tool) or own.tool, folder / "window", argv)
                argv = argv if why else wrapped
                notes += [f"{inst.name} cannot run here ({why}): the arm runs unwrapped; "
                          f"where it can: {shlex.join(wrapped)}"] if why else []
        passes.append(Pass(name=name, arm=name, role="arm", folder=folder, argv=argv, env=add,
                           log_path=out / "passes" / f"{name}.log", probe_config=cfg,
                           config_path=folder / "probe.json", toggle=toggle, arm_env=env, notes=notes,
                           command=list(commands[name])))
    first = arm_specs[0][0]
    first_env = arm_specs[0][1]
    for inst in chosen:
        own = inst.switch.own_pass
        if own is None or own.wraps_arms:
            continue
        folder = out / inst.name
        cfg = ProbeConfig(out_dir=str(folder), probes=["sites"], arm=inst.name, site=site, steps=steps, ranks=ranks,
                          cuda_profiler_window=own.profiler_window(ncu_mode), max_records=max_records,
                          extra={"digests": False})  # no hash kernels to replay; the arms have the digests
        report = folder / "window"
        tool = tools.path(own.tool) or own.tool
        p = Pass(name=inst.name, arm=first, role="pass", folder=folder,
                 argv=own.argv(tool, report, command, site=site, mode=ncu_mode), env=dict(first_env),
                 log_path=out / "passes" / f"{inst.name}.log", probe_config=cfg, config_path=folder / "probe.json",
                 post=own.post(tool, report), arm_env=first_env)
        p.skip_reason = _skip(tools, tools.path(own.tool), own.missing, own.device_status)
        passes.append(p)
    return Plan(out=out, site=site, command=list(command), steps=steps, ranks=ranks, instruments=instruments,
                passes=passes, device=device)


def _skip(tools: Tools, tool: str | None, missing: str, device_status=None) -> str | None:
    present, reason = device_status() if device_status is not None else (tools.cuda, tools.cuda_reason)
    if not present:
        return reason
    if tool is None:
        return missing
    return None


def describe_plan(plan: Plan, base_env: dict[str, str] | None = None) -> str:
    """Human-readable plan: every pass's exact argv and environment additions (``--dry-run``)."""
    lines = [f"capture: {plan.out}", f"site: {plan.site}   steps: {plan.steps}   ranks: {plan.ranks}   "
             f"device: {plan.device}   instruments: {','.join(plan.instruments)}"]
    for p in plan.passes:
        state = f"  [cannot run: {p.skip_reason}]" if p.skip_reason else ""
        lines.append(f"\npass {p.name} ({p.role}{'' if p.role == 'arm' else ' of ' + p.arm}){state}")
        lines.append(f"  argv: {shlex.join(p.argv)}")
        lines += [f"  note: {n}" for n in p.notes]
        env = dict(p.env)
        if p.config_path is not None:
            env["FORENSICS_CONFIG"] = str(p.config_path)
            # the exact value the pass gets: the bootstrap dir, then the inherited PYTHONPATH
            env["PYTHONPATH"] = bootstrap_env(p.config_path, dict(base_env or os.environ))["PYTHONPATH"]
        for k, v in env.items():
            lines.append(f"  env:  {k}={v}")
        if p.probe_config is not None:
            c = p.probe_config
            lines.append(f"  probes: {','.join(c.probes)}  cuda_profiler_window={c.cuda_profiler_window}"
                         f"  digests={c.extra.get('digests', True)}"
                         + (f"  cpu_instruments={','.join(c.cpu_instruments)}" if c.cpu_instruments else ""))
        for post in p.post:
            lines.append(f"  then: {shlex.join(post)}")
        lines.append(f"  log:  {p.log_path}")
    # the exact argv and env, except a secret (``--api-key X``, a toggled ``NVTE_API_TOKEN``): never printed
    red = Redactor()
    for p in plan.passes:
        red.learn(list(p.argv)).learn(dict(p.env))
    return red.text("\n".join(lines))
