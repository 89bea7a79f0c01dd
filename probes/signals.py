"""A SIGTERM that arrives while a probe writes a batch waits for the write to end.

The handler that writes a probe's footer (:func:`probes.activate._chain_sigterm`) must not run in
the middle of a write to the same buffered file: Python refuses the nested write ("reentrant call
inside <_io.BufferedWriter>") and the trace loses its footer. Blocking the signal in the writing
thread is not enough: a signal sent to the process is then delivered to another thread (torch's
workers), and Python still runs the handler in the main thread at the next check, mid-write. So the
writer marks its write (:class:`held`), the handler asks :func:`hold` first, and a held signal is
raised again as soon as the outermost write ends. Pure standard library.
"""
from __future__ import annotations

import signal
import threading

_lock = threading.Lock()
_state: dict[str, int | None] = {"depth": 0, "signal": None}


class held:
    """``with held():`` around a write; a signal :func:`hold` took meanwhile is raised at the end."""

    def __enter__(self) -> None:
        with _lock:
            _state["depth"] = int(_state["depth"] or 0) + 1

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _state["depth"] = int(_state["depth"] or 0) - 1
            sig = _state["signal"] if _state["depth"] == 0 else None
            if sig is not None:
                _state["signal"] = None
        if sig is not None:
            signal.raise_signal(sig)  # the handler runs now, after the write


def hold(signum: int) -> bool:
    """For a signal handler: True when a write is in progress and ``signum`` was kept for its end."""
    with _lock:
        if _state["depth"]:
            _state["signal"] = signum
            return True
    return False
