"""Turn the probes named in the config on, in this process, for this rank (or do nothing)."""
from __future__ import annotations

import atexit
import importlib
import os
import signal
import sys
from typing import Any

from probes import forks, signals
from probes.config import ENV_CONFIG, ProbeConfig, rank_dir
from probes.window import StepWindow, current_rank, install_optimizer_hook, parse_ranks, parse_steps

#: probe name -> module exposing ``install(cfg, window, out_dir, rank) -> object with .close()``
PROBE_MODULES = {"sites": "probes.sites", "cupti": "probes.cupti", "cpu": "probes.cpu", "optrace": "probes.optrace"}

_state: dict[str, Any] = {}


def activate(config: ProbeConfig | None = None) -> StepWindow | None:
    """Activate once per process. Returns the window, or None when this rank is filtered out."""
    if "window" in _state:
        return _state["window"]
    cfg = config or ProbeConfig.read(os.environ[ENV_CONFIG])
    rank = current_rank()
    allowed = parse_ranks(cfg.ranks)
    if allowed is not None and rank not in allowed:
        _state["window"] = None
        return None
    window = StepWindow(parse_steps(cfg.steps))
    out = rank_dir(cfg.out_dir, rank)
    installed = []
    for name in cfg.probes:
        mod = importlib.import_module(PROBE_MODULES[name])
        installed.append(mod.install(cfg, window, out, rank))
    if cfg.step_hook == "optimizer":
        install_optimizer_hook(window)
    _state.update(window=window, probes=installed, cfg=cfg, rank=rank)
    window.start()
    atexit.register(shutdown)
    _chain_sigterm()
    return window


def explicit_step() -> None:
    """``probes.step()``: advance the window by hand."""
    window = _state.get("window")
    if window is not None:
        window.advance()


def shutdown() -> None:
    """Close the window and every probe (flush); safe to call twice. In a fork of the process
    that activated the probes (its atexit hook runs there too) it does nothing: what the probes
    hold is the parent's to write (:mod:`probes.forks`)."""
    window = _state.get("window")
    if window is not None and forks.foreign(window.pid):
        return
    if window is not None:
        window.close()
    for p in _state.pop("probes", []):
        try:
            p.close()
        except Exception as e:  # noqa: BLE001
            sys.stderr.write(f"forensics: probe close failed: {e!r}\n")


def _chain_sigterm() -> None:
    """Flush on SIGTERM (torchrun/srun stop ranks that way), then behave as before."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except (ValueError, OSError):
        return

    def handler(signum, frame):  # noqa: ANN001
        if signals.hold(signum):  # a probe is writing a batch: raised again when it ends
            return
        _state["interrupted"] = signum  # probes say in their footers that the run was stopped
        shutdown()
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGTERM)

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass
