"""The one way ``forensics`` runs a user's command under the probes (trace, kernel's passes, knob's arms, sweep).

:func:`launch` starts ``argv`` with an environment and waits for it:

* signals sent to this process (SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2) are passed on
  to the command, and this process waits for it to stop (a second one kills it); the handlers are
  installed before the command starts, so one that arrives while it is being started is passed on
  as soon as it runs, and one that arrives before means it never starts;
* a Ctrl-C in a terminal reaches the whole foreground group, the command included: it is not sent
  a second time;
* on Linux the command dies with this process (``PR_SET_PDEATHSIG``: SIGTERM when the parent dies,
  even by SIGKILL), so an interrupted ``forensics`` never leaves an orphan training job;
* ``timeout_s``: the command is killed (SIGKILL) when it runs past it.

It returns an :class:`Ended`: the return code, the seconds it ran, the signal this process was sent
(passed on), whether it timed out. A command that cannot be started raises the ``OSError``
(``FileNotFoundError``: no such program) for the caller to word.
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import IO, Any

from forensics.core.errors import ForensicsError

FORWARDED_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2")
_PR_SET_PDEATHSIG = 1


def _prctl() -> Any:
    """libc's ``prctl``, looked up in this process (the child only calls it between fork and exec)."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def die_with_parent(prctl: Any = None) -> Any:
    """A ``preexec_fn`` for Linux: the child gets SIGTERM when its parent dies (never an orphan);
    None where there is no ``prctl``."""
    prctl = prctl or _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


class Interrupted(ForensicsError):
    """This process was sent signal N while a command ran (passed on, waited for): exit 128+N, one line."""

    def __init__(self, signum: int, message: str):
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        super().__init__(message)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_code(returncode: int) -> int:
    """A child's exit status as a shell reports it: 128+N when signal N ended it."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class Ended:
    """How a launched command ended."""

    returncode: int | None  # as subprocess reports it (-N: killed by signal N); None: never started
    seconds: float
    received: int | None = None  # a signal this process was sent and passed on (None: none)
    timed_out: bool = False

    @property
    def status(self) -> int:
        """The exit status as a shell reports it: 128+N when this process was sent signal N (it passed
        it on and waited), else the command's (128+N when signal N ended it)."""
        if self.received is not None:
            return 128 + int(self.received)
        return exit_code(self.returncode if self.returncode is not None else 0)


def _terminal_sent_it() -> bool:
    """The terminal's Ctrl-C went to the whole foreground group (this process and the command)."""
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except (OSError, ValueError, AttributeError):
        return False


def launch(argv: list[str], env: dict[str, str] | None = None, *, stdin: Any = None, stdout: IO[Any] | int | None = None,
           stderr: IO[Any] | int | None = None, timeout_s: float | None = None, who: str = "forensics",
           what: str = "the command") -> Ended:
    """Run ``argv`` with ``env`` (``None``: this process's), forwarding signals; see the module docstring.

    ``who`` and ``what`` word the one line written to stderr when a signal is passed on
    (``forensics trace: got SIGTERM: passed to the traced command (pid N); ...``).
    """
    received: list[int] = []
    started: list[subprocess.Popen] = []  # the command, once started (a handler may run before)

    def pass_on(signum: int, count: int) -> None:
        proc = started[0]
        if count == 1:
            sys.stderr.write(f"{who}: got {signal.Signals(signum).name}: passed to {what} (pid {proc.pid}); "
                             "waiting for it to stop (send it again to kill it)\n")
        try:
            proc.send_signal(signal.SIGKILL if count > 1 and signum != signal.SIGINT else signum)
        except (ProcessLookupError, OSError):
            pass

    def forward(signum: int, _frame: object) -> None:
        received.append(signum)
        if signum == signal.SIGINT and _terminal_sent_it():
            return  # Ctrl-C in a terminal reached the whole foreground group, the command included
        if started:
            pass_on(signum, len(received))
        # else: not started yet, passed on as soon as it is (below)

    previous = {}
    for name in FORWARDED_SIGNALS:
        sig = getattr(signal, name, None)
        if sig is None:
            continue
        try:
            previous[sig] = signal.signal(sig, forward)
        except (ValueError, OSError):  # not the main thread: no forwarding, PDEATHSIG still holds
            pass
    t0 = time.monotonic()
    try:
        if received:  # asked to stop before anything started
            sys.stderr.write(f"{who}: got {signal.Signals(received[0]).name} before {what} started: not started\n")
            return Ended(None, 0.0, received[0])
        preexec = die_with_parent() if sys.platform.startswith("linux") else None
        proc = subprocess.Popen(argv, env=env, stdin=stdin, stdout=stdout, stderr=stderr,  # noqa: S603
                                preexec_fn=preexec)  # noqa: PLW1509 - prctl only, between fork and exec
        started.append(proc)
        if received:  # arrived while it was being started: pass it on now
            pass_on(received[0], 1)
        timed_out = False
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.kill()
            returncode = proc.wait()
    finally:
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):
                pass
    return Ended(returncode, round(time.monotonic() - t0, 3), received[0] if received else None, timed_out)
