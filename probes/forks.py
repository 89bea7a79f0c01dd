"""Whether this process is a fork of the process that set a probe up.

A forked child inherits the probes: their dispatch modes, pending records, open files and the
atexit hook that closes them. Its copy must record and write nothing: the pending records are the
parent's to write, and a child that closed its copy would write them (and a footer) a second time
into the parent's trace. ``os.register_at_fork`` runs in every child CPython forks (``os.fork``,
multiprocessing), so until one is forked no check needs a ``getpid`` system call.
"""
from __future__ import annotations

import os

#: True in a process forked from the one that imported this module (or where fork hooks are missing)
forked = not hasattr(os, "register_at_fork")


def _mark_forked() -> None:
    global forked  # noqa: PLW0603
    forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


def foreign(pid: int) -> bool:
    """True in a process other than ``pid`` (a fork of it): a probe set up by ``pid`` stays quiet here."""
    return forked and os.getpid() != pid
