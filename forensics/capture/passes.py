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
"""
from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from probes.config import ProbeConfig
from probes.window import parse_ranks, parse_steps

INSTRUMENTS = ("cupti", "cublaslt", "ncu", "nsys")  # the CUDA backend's instruments (the default)
#: Instruments each device backend runs (docs/cpu-backend.md maps one onto the other).
DEVICE_INSTRUMENTS: dict[str, tuple[str, ...]] = {
    "cuda": INSTRUMENTS,
    "cpu": ("torch_profiler", "onednn", "mkl"),
}
DEVICES = tuple(DEVICE_INSTRUMENTS)
NVTX_DOMAIN = "forensics"
NCU_PERMISSION_MARK = "ERR_NVGPUCTRPERM"
NCU_GLOBS = ("/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu")
NSYS_GLOBS = ("/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
              "/usr/local/cuda*/nsight-systems*/bin/nsys")
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Tools:
    """What this machine offers; resolved once by :func:`discover_tools` (or given by a test)."""

    ncu: str | None = None
    nsys: str | None = None
    cuda: bool = False
    cuda_reason: str = "no CUDA device visible"


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


def resolve_device(device: str | None, tools: Tools, instruments: tuple[str, ...] | list[str] | None = None) -> str:
    """The backend to run: ``device`` when given (cuda | cpu); else the one device whose instruments were
    named (``--instruments cupti,cublaslt`` is cuda); else cuda when a CUDA device is present, else cpu."""
    if device is None or str(device).strip() == "":
        if instruments:
            owners = [d for d, known in DEVICE_INSTRUMENTS.items() if set(instruments) <= set(known)]
            if len(owners) == 1:
                return owners[0]
        return "cuda" if tools.cuda else "cpu"
    d = str(device).strip().lower()
    if d not in DEVICE_INSTRUMENTS:
        raise ValueError(f"--device {device!r} must be one of {', '.join(DEVICES)}")
    return d


def default_instruments(device: str) -> tuple[str, ...]:
    """Every instrument of a device backend."""
    return DEVICE_INSTRUMENTS[device]


def discover_tools() -> Tools:
    """Look for ncu, nsys and a CUDA device on this machine."""
    ok, reason = cuda_status()
    return Tools(ncu=find_tool("ncu", NCU_GLOBS), nsys=find_tool("nsys", NSYS_GLOBS), cuda=ok, cuda_reason=reason)


def ncu_permission_denied(log_text: str) -> bool:
    """True when an ncu log says the GPU performance counters are not accessible to this user."""
    return NCU_PERMISSION_MARK in log_text


NCU_PERMISSION_REASON = (
    "ncu has no permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or set "
    "NVreg_RestrictProfilingToAdminUsers=0 for the nvidia module (docs/capture.md)"
)


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
    from forensics.core.redact import is_secret_key  # noqa: PLC0415

    return f"t{index}-redacted-knob" if is_secret_key(name) else f"t{index}-{name.lower()}"


def ncu_nvtx_include(site: str) -> str:
    """ncu ``--nvtx-include`` expression matching every ``SITE#N`` start/end range (or one occurrence).

    Start/end ranges are written ``Domain@Range`` (no trailing ``/``, which would mean push/pop);
    a whole site needs a regex over its occurrences.
    """
    if "#" in site:
        return f"{NVTX_DOMAIN}@{site}"
    return f"regex:{NVTX_DOMAIN}@{re.escape(site)}#[0-9]+"


def ncu_argv(ncu: str, report: Path, command: list[str], *, site: str, mode: str = "window") -> list[str]:
    """The ncu wrapper: all processes, NVTX state per kernel, base units, LaunchStats, ``-o`` report.

    ``mode="window"``: profiling starts off and the probe brackets the step window with
    cudaProfilerStart/Stop (what the GPU campaign used). ``mode="nvtx"``: only kernels inside the
    site's NVTX start/end ranges. Never ``-f``: the report goes into a fresh capture folder.
    """
    argv = [ncu, "--target-processes", "all", "--nvtx"]
    if mode == "window":
        argv += ["--profile-from-start", "off"]
    elif mode == "nvtx":
        argv += ["--nvtx-include", ncu_nvtx_include(site)]
    else:
        raise ValueError(f"ncu mode {mode!r} must be 'window' or 'nvtx'")
    argv += ["--clock-control", "none", "--print-units", "base", "--section", "LaunchStats",
             "--metrics", "gpu__time_duration.sum", "-o", str(report)]
    return argv + list(command)


def nsys_argv(nsys: str, report: Path, command: list[str]) -> list[str]:
    """``nsys profile`` over the cudaProfilerStart/Stop window, CUDA + NVTX + cuBLAS traces."""
    return [nsys, "profile", "-t", "cuda,nvtx,cublas", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--sample=none", "--cpuctxsw=none", "-o", str(report)] + list(command)


def nsys_export_argv(nsys: str, report: Path) -> list[str]:
    """``nsys export --type sqlite`` of ``<report>.nsys-rep`` to ``<report>.sqlite`` (never over a file)."""
    return [nsys, "export", "--type", "sqlite", "-o", f"{report}.sqlite", f"{report}.nsys-rep"]


def onednn_env() -> dict[str, str]:
    """oneDNN stamps each verbose line with the primitive's start (epoch ms): how lines meet site occurrences.

    Verbose itself is switched on only inside the step window, by the probe (``mkldnn_set_verbose``);
    so is oneMKL's (``mkl_verbose``), whose output file the probe names per process.
    """
    return {"ONEDNN_VERBOSE_TIMESTAMP": "1"}


def cublaslt_env(folder: Path) -> dict[str, str]:
    """cuBLASLt API-trace logging into the arm folder, one file per process (``%i`` = pid)."""
    return {"CUBLASLT_LOG_LEVEL": "5", "CUBLASLT_LOG_FILE": str(folder / "cublaslt.%i.log")}


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
    if device not in DEVICE_INSTRUMENTS:
        raise ValueError(f"--device {device!r} must be one of {', '.join(DEVICES)}")
    own = DEVICE_INSTRUMENTS[device]
    instruments = tuple(own if instruments is None else instruments)
    bad = [i for i in instruments if i not in own]
    unknown = [i for i in bad if not any(i in known for known in DEVICE_INSTRUMENTS.values())]
    if unknown:
        raise ValueError(f"unknown instrument(s) {', '.join(unknown)}; choose from {', '.join(own)} (--device {device})")
    if bad:
        other = [d for d, known in DEVICE_INSTRUMENTS.items() if d != device and set(bad) <= set(known)]
        hint = f" ({', '.join(bad)}: --device {other[0]})" if other else ""
        raise ValueError(f"instrument(s) {', '.join(bad)} not available with --device {device}; "
                         f"choose from {', '.join(own)}{hint}")
    if not command:
        raise ValueError("no command to run")
    parse_steps(steps)  # ValueError with a one-line reason, before anything runs
    parse_ranks(ranks)
    arm_specs: list[tuple[str, dict[str, str], dict[str, str]]] = []  # (name, env, toggle)
    if env_arms:
        for name, env in env_arms.items():
            if not _ARM_NAME.match(name) or name in ("passes", "ncu", "nsys"):
                raise ValueError(f"arm name {name!r} must be letters, digits, '_.-' and not passes/ncu/nsys")
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

    cpu_list = [i for i in DEVICE_INSTRUMENTS["cpu"] if i in instruments] if device == "cpu" else []
    probe_list = ["sites"] + (["cupti"] if "cupti" in instruments else []) + (["cpu"] if cpu_list else [])
    passes: list[Pass] = []
    for name, env, toggle in arm_specs:
        folder = out / name
        add = dict(env)
        if "cublaslt" in instruments:
            add.update(cublaslt_env(folder))
        if "onednn" in cpu_list:
            add.update(onednn_env())
        cfg = ProbeConfig(out_dir=str(folder), probes=probe_list, arm=name, site=site, steps=steps, ranks=ranks,
                          max_records=max_records, cpu_instruments=cpu_list, nvtx=device != "cpu")
        passes.append(Pass(name=name, arm=name, role="arm", folder=folder, argv=list(commands[name]), env=add,
                           log_path=out / "passes" / f"{name}.log", probe_config=cfg,
                           config_path=folder / "probe.json", toggle=toggle, arm_env=env))
    first = arm_specs[0][0]
    first_env = arm_specs[0][1]
    if "ncu" in instruments:
        folder = out / "ncu"
        cfg = ProbeConfig(out_dir=str(folder), probes=["sites"], arm="ncu", site=site, steps=steps, ranks=ranks,
                          cuda_profiler_window=(ncu_mode == "window"), max_records=max_records,
                          extra={"digests": False})  # no hash kernels to replay; the arms have the digests
        p = Pass(name="ncu", arm=first, role="pass", folder=folder,
                 argv=ncu_argv(tools.ncu or "ncu", folder / "window", command, site=site, mode=ncu_mode),
                 env=dict(first_env), log_path=out / "passes" / "ncu.log", probe_config=cfg,
                 config_path=folder / "probe.json", arm_env=first_env)
        p.skip_reason = _skip(tools, tools.ncu, "ncu (Nsight Compute) not found on PATH, /usr/local/cuda*/bin or /opt/nvidia")
        passes.append(p)
    if "nsys" in instruments:
        folder = out / "nsys"
        cfg = ProbeConfig(out_dir=str(folder), probes=["sites"], arm="nsys", site=site, steps=steps, ranks=ranks,
                          cuda_profiler_window=True, max_records=max_records, extra={"digests": False})
        report = folder / "window"
        p = Pass(name="nsys", arm=first, role="pass", folder=folder,
                 argv=nsys_argv(tools.nsys or "nsys", report, command), env=dict(first_env),
                 log_path=out / "passes" / "nsys.log", probe_config=cfg, config_path=folder / "probe.json",
                 post=[nsys_export_argv(tools.nsys or "nsys", report)], arm_env=first_env)
        p.skip_reason = _skip(tools, tools.nsys, "nsys (Nsight Systems) not found on PATH, /usr/local/cuda*/bin or /opt/nvidia")
        passes.append(p)
    return Plan(out=out, site=site, command=list(command), steps=steps, ranks=ranks, instruments=instruments,
                passes=passes, device=device)


def _skip(tools: Tools, tool: str | None, missing: str) -> str | None:
    if not tools.cuda:
        return tools.cuda_reason
    if tool is None:
        return missing
    return None


def describe_plan(plan: Plan, base_env: dict[str, str] | None = None) -> str:
    """Human-readable plan: every pass's exact argv and environment additions (``--dry-run``)."""
    import shlex  # noqa: PLC0415

    lines = [f"capture: {plan.out}", f"site: {plan.site}   steps: {plan.steps}   ranks: {plan.ranks}   "
             f"device: {plan.device}   instruments: {','.join(plan.instruments)}"]
    for p in plan.passes:
        state = f"  [cannot run: {p.skip_reason}]" if p.skip_reason else ""
        lines.append(f"\npass {p.name} ({p.role}{'' if p.role == 'arm' else ' of ' + p.arm}){state}")
        lines.append(f"  argv: {shlex.join(p.argv)}")
        env = dict(p.env)
        if p.config_path is not None:
            env["FORENSICS_CONFIG"] = str(p.config_path)
            from probes.config import bootstrap_env  # noqa: PLC0415

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
    return "\n".join(lines)
