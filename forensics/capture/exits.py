"""How a pass's process ended, in words: a signal by its name, an exit status as a number.

``subprocess`` reports a child killed by signal N as ``-N``; a shell or a launcher (torchrun's
agent, ``srun``) that outlived its child reports it as ``128 + N``. Both are a crash of the
program, not a finding about the site: ``compare``, ``analyze``, ``knob`` and ``bundle`` say so.
"""
from __future__ import annotations

import signal
from typing import Any


def signal_of(rc: Any) -> str | None:
    """``SIGILL`` for -4 (killed by the signal) or 132 (128+4, as a shell reports it); None otherwise."""
    if not isinstance(rc, int) or isinstance(rc, bool):
        return None
    n = -rc if rc < 0 else (rc - 128 if 128 < rc < 128 + 65 else None)
    if n is None:
        return None
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


def describe_exit(rc: Any) -> str:
    """``killed by SIGILL (signal 4, exit status -4)`` / ``exit status 1``."""
    sig = signal_of(rc)
    if sig is None:
        return f"exit status {rc}"
    n = -rc if rc < 0 else rc - 128
    how = "killed by" if rc < 0 else "exit status {rc} = 128+{n}: its child killed by".format(rc=rc, n=n)
    return f"{how} {sig} (signal {n}, exit status {rc})" if rc < 0 else f"{how} {sig}"


def arm_crash(entry: Any) -> str | None:
    """Why an arm of a capture manifest did not run to its end (``killed by SIGILL ...``, ``exit status 1``,
    ``stopped after 60 s``), or None when it ran (status ok, or no status recorded)."""
    if not isinstance(entry, dict):
        return None
    status = entry.get("status")
    if status in (None, "ok", "skipped"):
        return None
    if status == "timeout":
        return str(entry.get("reason") or "stopped at its timeout")
    rc = entry.get("rc")
    if isinstance(rc, int) and not isinstance(rc, bool):
        text = describe_exit(rc)
        reason = str(entry.get("reason") or "")
        tail = reason.split(": ", 1)[1] if reason.startswith(("exit status", "killed by")) and ": " in reason else ""
        return f"{text}: {tail}" if tail else text
    return str(entry.get("reason") or f"status {status}")


def crash_word(text: str | None) -> str | None:
    """CRASHED (killed by a signal), TIMED OUT or FAILED (an exit status) for :func:`arm_crash`'s text."""
    if text is None:
        return None
    if "killed by SIG" in text or "killed by signal" in text:
        return "CRASHED"
    return "TIMED OUT" if text.startswith("stopped") else "FAILED"
