"""Run a function under the op tracer, in this process (tests): the rank file it wrote."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


def trace_in_process(out: Path, fn: Callable[[], object], steps: str = "all", max_records: int = 100_000,
                     chunks: bool = True, optimizer_hook: bool = False, ordered: str = "auto",
                     evidence: str = "full", at: str = "ops", optimizer: str | None = None) -> Path:
    """Install the tracer with its window, run ``fn``, close both; ``out/rank0/trace.jsonl``."""
    from probes import optrace
    from probes.config import ProbeConfig
    from probes.window import StepWindow, install_optimizer_hook, parse_steps

    cfg = ProbeConfig(out_dir=str(out), probes=["optrace"], steps=steps, max_records=max_records,
                      chunk_digests=chunks, extra={"ordered_digests": ordered, "evidence": evidence, "at": at,
                                                   **({"optimizer": optimizer} if optimizer else {})})
    window = StepWindow(parse_steps(steps))
    inst = optrace.install(cfg, window, out / "rank0", 0)
    unhook = install_optimizer_hook(window) if optimizer_hook else None
    window.start()
    try:
        fn()
    finally:
        window.close()
        inst.close()
        if unhook:
            unhook()
    return out / "rank0" / "trace.jsonl"
