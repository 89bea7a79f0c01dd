"""CPU instruments inside the user's process: torch.profiler (CPU activities), oneDNN and oneMKL verbose logs.

The CPU backend's counterpart of :mod:`probes.cupti` plus the cuBLASLt log. Three independent
sources, each switched on only inside the step window:

``torch_profiler``
    ``torch.profiler.profile(activities=[CPU], record_shapes=True)`` entered at the window's
    first GEMM outside backward or first site occurrence, whichever comes first (every instrument
    starts there: a process that runs no GEMM, such as the torchrun agent, starts nothing and
    writes nothing; never inside backward, see :meth:`CpuCollector._start`); at window exit its Kineto trace is written to ``rank<R>/torchprof.<pid>.json.gz``. Each site
    occurrence is a ``record_function`` range named ``SITE#N`` (the NVTX range's twin), so the
    implementation ops below the dispatcher (``aten::mkldnn_convolution``,
    ``aten::_slow_conv2d_forward``, ``aten::mm``) nest inside it.
``onednn``
    oneDNN prints its verbose lines to stdout only (this build has no log-file option). At the
    start fd 1 is pointed at ``rank<R>/onednn-window.<pid>.raw`` and ``mkldnn_set_verbose(1)``
    is called; at window exit verbose is switched off, fd 1 restored, the ``onednn_verbose`` lines
    go to ``rank<R>/onednn.<pid>.log`` and every other byte the program wrote meanwhile is
    written to the real stdout (late, never lost). ``ONEDNN_VERBOSE_TIMESTAMP=1`` (set by the
    pass, or here before oneDNN starts) stamps each line with the primitive's start time
    (epoch ms): the same clock as ``time.time_ns()``.
``mkl``
    ``MKL_VERBOSE_OUTPUT_FILE`` is set at activation (before torch is imported) to
    ``rank<R>/mkl.<pid>.log``; ``mkl_verbose(1)`` at the start, ``mkl_verbose(0)`` at window exit.
    oneMKL writes each line when the call returns and stamps none, so each site occurrence
    records the file's size before and after the call: the lines in between belong to it.

Per occurrence the site probe records ``cpu: {t0_ns, t1_ns, tid, mkl_span: [start, end]}``
(:meth:`CpuCollector.begin`/:meth:`end`). ``rank<R>/cpuprobe.<pid>.jsonl`` holds a header (what
was switched on, files, environment changes), ``unavailable`` lines for an instrument that could
not start (one line to stderr too) and a summary. The program is never stopped by this probe.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from probes.config import ProbeConfig
from probes.window import StepWindow

SCHEMA = "forensics.cpuprobe"
VERSION = 1
INSTRUMENTS = ("torch_profiler", "onednn", "mkl")
ONEDNN_MARK = b"onednn_verbose,"

_active: "CpuCollector | None" = None


def active() -> "CpuCollector | None":
    """The collector of this process while the window is open (the site probe brackets occurrences with it)."""
    return _active if _active is not None and _active.collecting else None


def _fflush_all() -> None:
    """Flush every C stdio stream (oneDNN prints with printf) and Python's stdout."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).fflush(None)


def split_onednn(raw: bytes) -> tuple[bytes, bytes]:
    """(oneDNN lines, everything else) from a stdout capture; a line glued after program output is split off."""
    ours, theirs = bytearray(), bytearray()
    for line in raw.splitlines(keepends=True):
        at = line.find(ONEDNN_MARK)
        if at < 0:
            theirs += line
            continue
        theirs += line[:at]
        body = line[at:]
        ours += body if body.endswith(b"\n") else body + b"\n"
    return bytes(ours), bytes(theirs)


class CpuCollector:
    """Switches the CPU instruments on at window entry and off at exit; brackets site occurrences."""

    def __init__(self, cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int):
        self.cfg = cfg
        self.window = window
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.pid = os.getpid()
        wanted = list(getattr(cfg, "cpu_instruments", None) or cfg.extra.get("cpu_instruments") or INSTRUMENTS)
        self.instruments = [i for i in INSTRUMENTS if i in wanted]
        self.unavailable: dict[str, str] = {}
        self.env_changes: dict[str, dict[str, str | None]] = {}
        self.collecting = False
        self.closed = False
        self.started = False
        self.window_step: int | None = None
        self.occurrences = 0
        self.lock = threading.Lock()
        self.file = None
        self.prof = None
        self._saved_stdout: int | None = None
        self.mkl_path = self.out_dir / f"mkl.{self.pid}.log"
        self.onednn_raw = self.out_dir / f"onednn-window.{self.pid}.raw"
        self.onednn_path = self.out_dir / f"onednn.{self.pid}.log"
        self.trace_path = self.out_dir / f"torchprof.{self.pid}.json.gz"
        self._prepare_env()
        window.on_enter.append(self._enter)
        window.on_exit.append(self._exit)

    # ------------------------------------------------------------------ before torch is imported
    def _set_env(self, name: str, value: str) -> None:
        old = os.environ.get(name)
        if old != value:
            self.env_changes[name] = {"was": old, "now": value}
            os.environ[name] = value

    def _prepare_env(self) -> None:
        """Environment the libraries read when they start: set now, in this process only (children inherit)."""
        if "mkl" in self.instruments:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._set_env("MKL_VERBOSE_OUTPUT_FILE", str(self.mkl_path))
            if os.environ.get("MKL_VERBOSE", "0") not in ("", "0"):
                # the window switches verbose on and off; a global MKL_VERBOSE would log the whole run
                self.env_changes["MKL_VERBOSE"] = {"was": os.environ.pop("MKL_VERBOSE"), "now": None}
        if "onednn" in self.instruments:
            self._set_env("ONEDNN_VERBOSE_TIMESTAMP", "1")
            for name in ("ONEDNN_VERBOSE", "DNNL_VERBOSE"):
                if os.environ.get(name, "0") not in ("", "0", "none"):
                    self.env_changes[name] = {"was": os.environ.pop(name), "now": None}

    # ------------------------------------------------------------------ output
    def _open(self) -> None:
        if self.file is not None:
            return
        from probes.sites import open_exclusive, process_settings  # noqa: PLC0415

        self.file = open_exclusive(self.out_dir, "cpuprobe", ".jsonl")
        self._write({"event": "header", "schema": SCHEMA, "version": VERSION, "rank": self.rank, "pid": self.pid,
                     "arm": self.cfg.arm, "steps": self.cfg.steps, "instruments": self.instruments,
                     "files": {"torch_profiler": self.trace_path.name, "onednn": self.onednn_path.name,
                               "mkl": self.mkl_path.name},
                     "env_changes": self.env_changes, "host": os.uname().nodename,
                     "cpu_capability": _cpu_capability(), "t_ns": time.time_ns(), **process_settings()})

    def _write(self, obj: dict[str, Any]) -> None:
        self.file.write(json.dumps(obj) + "\n")
        self.file.flush()

    def _unavailable(self, name: str, reason: str) -> None:
        self.unavailable[name] = reason
        self._write({"event": "unavailable", "instrument": name, "reason": reason})
        sys.stderr.write(f"forensics: CPU instrument {name} unavailable on rank {self.rank}: {reason}\n")

    # ------------------------------------------------------------------ window
    def _enter(self, step: int) -> None:
        """Arm: the instruments go on at the window's first GEMM outside backward (:meth:`prime`) or
        at its first site occurrence (:meth:`begin`), whichever comes first.

        A process that runs no GEMM in the window (the torchrun agent, a launcher whose window holds
        step 0) starts nothing and leaves no file: its stdout is never redirected, no profiler runs in it.
        """
        global _active
        self.window_step = step
        self.collecting = True
        _active = self

    def prime(self) -> None:
        """Start the instruments now, from a GEMM the program runs outside the autograd engine.

        The site probe's dispatch mode calls this for every GEMM in the window until the instruments
        are on. A profiler started inside backward would be lost (see :meth:`_start`), so the forward
        GEMMs before it are where it starts.
        """
        if self.collecting:
            self._start_once(trigger="the window's first GEMM outside backward")

    def _start_once(self, **how: Any) -> None:
        """:meth:`_start` unless the instruments already started or stopped (any thread, once)."""
        if not self.started and not self.closed:
            with self.lock:
                if not self.started and not self.closed:
                    self._start(**how)

    def _start(self, in_backward: bool = False, trigger: str = "the window's first site occurrence") -> None:
        """Switch the instruments on (once, at the first GEMM or occurrence in the window).

        ``in_backward``: the caller runs inside the autograd engine, which runs each backward node
        under the thread state of the ``backward()`` call and restores it afterwards; a
        torch.profiler started there loses its callbacks when the node returns, and stopping it
        later crashed the program (SIGSEGV, torch 2.13). The profiler is then not started and says
        why; oneDNN and oneMKL verbose are process-wide and start as usual.
        """
        self.started = True
        self._open()
        step = self.window_step
        try:
            import torch  # noqa: PLC0415
        except Exception as e:  # noqa: BLE001
            for name in self.instruments:
                self._unavailable(name, f"torch not importable ({type(e).__name__})")
            return
        verbose = getattr(torch._C, "_verbose", None)
        if "onednn" in self.instruments:
            self._start_onednn(torch, verbose)
        if "mkl" in self.instruments:
            try:
                if not torch.backends.mkl.is_available():
                    raise RuntimeError("this torch build has no oneMKL")
                if not verbose.mkl_set_verbose(1):
                    raise RuntimeError("mkl_set_verbose(1) refused")
            except Exception as e:  # noqa: BLE001
                self._unavailable("mkl", f"{type(e).__name__}: {e}")
        if "torch_profiler" in self.instruments and in_backward:
            self._unavailable("torch_profiler", "the window's first GEMM ran inside backward (the autograd engine): "
                                                "a profiler started there is lost when the node returns; "
                                                "widen --steps to start a step earlier")
        elif "torch_profiler" in self.instruments:
            try:
                if _profiler_running(torch):
                    raise RuntimeError("the program runs its own torch.profiler (one per process): "
                                       "ours is not started, theirs is left alone")
                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
                self.prof.__enter__()
            except Exception as e:  # noqa: BLE001  (e.g. the program runs its own profiler: one per process)
                self.prof = None
                self._unavailable("torch_profiler", f"{type(e).__name__}: {e}")
        self._write({"event": "window", "step": step, "t_ns": time.time_ns(),
                     "running": [i for i in self.instruments if i not in self.unavailable],
                     "started_at": trigger})

    def _start_onednn(self, torch: Any, verbose: Any) -> None:
        try:
            if not torch.backends.mkldnn.is_available():
                raise RuntimeError("this torch build has no oneDNN (mkldnn)")
            _fflush_all()
            fd = os.open(self.onednn_raw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            self._saved_stdout = os.dup(1)
            os.dup2(fd, 1)
            os.close(fd)
            if not verbose.mkldnn_set_verbose(1):
                raise RuntimeError("mkldnn_set_verbose(1) refused")
        except Exception as e:  # noqa: BLE001
            self._restore_stdout()
            self._unavailable("onednn", f"{type(e).__name__}: {e}")

    def _restore_stdout(self) -> None:
        if self._saved_stdout is None:
            return
        _fflush_all()
        os.dup2(self._saved_stdout, 1)
        os.close(self._saved_stdout)
        self._saved_stdout = None

    def _exit(self, step: int) -> None:
        self.stop()

    # ------------------------------------------------------------------ per site occurrence
    def begin(self, label: str) -> dict[str, Any]:
        """Open the ``record_function`` range of one occurrence; note the clock, thread and oneMKL file size."""
        if not self.started:
            self._start_once(in_backward=_in_backward())
        token: dict[str, Any] = {"tid": threading.get_native_id()}
        if "mkl" in self.instruments and "mkl" not in self.unavailable:
            token["mkl_span"] = [_size(self.mkl_path), None]
        if self.prof is not None:
            try:
                import torch  # noqa: PLC0415

                token["_rf"] = torch.ops.profiler._record_function_enter_new(label, None)
            except Exception:  # noqa: BLE001
                pass
        token["t0_ns"] = time.time_ns()
        return token

    def end(self, token: dict[str, Any]) -> dict[str, Any]:
        """Close the range; the token becomes the ``cpu`` field of the site record."""
        token["t1_ns"] = time.time_ns()
        rf = token.pop("_rf", None)
        if rf is not None:
            try:
                import torch  # noqa: PLC0415

                torch.ops.profiler._record_function_exit._RecordFunction(rf)
            except Exception:  # noqa: BLE001
                pass
        if "mkl_span" in token:
            token["mkl_span"][1] = _size(self.mkl_path)
            token["mkl_file"] = self.mkl_path.name
        with self.lock:
            self.occurrences += 1
        return token

    # ------------------------------------------------------------------ stop / close
    def stop(self) -> None:
        """Switch every instrument off, write the trace and the oneDNN log, then the summary. Idempotent."""
        global _active
        if self.closed:
            return
        self.closed = True
        self.collecting = False
        if _active is self:
            _active = None
        if self.file is None:
            return
        written: dict[str, Any] = {}
        try:
            import torch  # noqa: PLC0415

            verbose = torch._C._verbose
        except Exception:  # noqa: BLE001
            torch = verbose = None
        if self.prof is not None:
            try:
                self.prof.__exit__(None, None, None)
                self.prof.export_chrome_trace(str(self.trace_path))
                written["torch_profiler"] = self.trace_path.name
            except Exception as e:  # noqa: BLE001
                self._write({"event": "error", "instrument": "torch_profiler", "reason": f"{type(e).__name__}: {e}"})
            self.prof = None
        if "mkl" in self.instruments and "mkl" not in self.unavailable and verbose is not None:
            with contextlib.suppress(Exception):
                verbose.mkl_set_verbose(0)
            if self.mkl_path.exists():
                written["mkl"] = self.mkl_path.name
        if self._saved_stdout is not None:
            with contextlib.suppress(Exception):
                verbose.mkldnn_set_verbose(0)
            self._restore_stdout()
            written.update(self._split_onednn())
        self._write({"event": "summary", "occurrences": self.occurrences, "unavailable": self.unavailable,
                     "files": written, "t_ns": time.time_ns()})

    def _split_onednn(self) -> dict[str, Any]:
        """oneDNN lines to ``onednn.<pid>.log``, the program's own output back to stdout, raw file removed."""
        try:
            raw = self.onednn_raw.read_bytes()
        except OSError as e:
            self._write({"event": "error", "instrument": "onednn", "reason": f"cannot read {self.onednn_raw.name}: {e}"})
            return {}
        ours, theirs = split_onednn(raw)
        if theirs:
            with contextlib.suppress(OSError):
                os.write(1, theirs)
        out: dict[str, Any] = {"program_stdout_bytes": len(theirs)}
        if ours:
            with open(self.onednn_path, "xb") as f:
                f.write(ours)
            out["onednn"] = self.onednn_path.name
        self.onednn_raw.unlink()
        return out

    def close(self) -> None:
        self.stop()
        if self.file is not None and not self.file.closed:
            self.file.close()


def _profiler_running(torch: Any) -> bool:
    """True when a torch.profiler / autograd profiler session is already active in this process."""
    for probe in (lambda: torch.autograd.profiler._is_profiler_enabled,
                  lambda: torch._C._autograd._profiler_enabled()):
        try:
            v = probe()
            if isinstance(v, bool):
                return v
        except Exception:  # noqa: BLE001
            continue
    return False


def _in_backward() -> bool:
    """True inside the autograd engine (a backward node is running on this thread)."""
    try:
        import torch  # noqa: PLC0415

        return torch._C._current_graph_task_id() != -1
    except Exception:  # noqa: BLE001
        return False


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def install(cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int) -> CpuCollector:
    """Entry point used by :func:`probes.activate.activate` (runs before the program imports torch)."""
    return CpuCollector(cfg, window, out_dir, rank)


def _cpu_capability() -> str | None:
    """The CPU capability ATen dispatches its vectorised kernels to (``AVX512``, ``AVX2``, ``DEFAULT``): what
    ``ATEN_CPU_CAPABILITY`` caps; None when torch cannot say (the window opens after torch is imported)."""
    try:
        import torch  # noqa: PLC0415

        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - a probe never breaks the program it observes
        return None
