"""What differs between two traced runs, as arms of the kernel rerun (``diff``'s ``next:``, ``kernel --from``).

Both sides of a difference become arms: run A's command is the baseline (``a1``, ``a2``); each
environment knob whose recorded value differs becomes a ``--toggle NAME=<B's value>`` arm, run A's
recorded value set in every arm (``--env NAME=<A's value>``) so the baseline does not depend on
the shell that reruns it; a difference in the command line (the script's own arguments, e.g.
``--threads 2``) becomes a ``--arm-command '<B's command>'`` arm (``c1``).

:func:`differences_of` is the one place that reads the differences out of a diff report: the
structured ``config_differences`` list a report carries (``[{"kind": "knob"|"switch", "name", "a",
"b", ...}]``, :func:`forensics.tracediff.comparability.config_differences`), else (a report written
before it) the comparability entries ``env.NAME`` and ``switches.NAME``; the command lines come from
the ``argv`` entry. All of them come from what the trace headers recorded (docs/trace-format.md).
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from forensics.core.redact import REDACTED

#: Variables the capture sets itself for its instruments (or that are the tracer's own): never an arm.
OWN_VARS = ("FORENSICS_", "CUBLASLT_LOG_", "CUBLAS_LOGINFO_DBG", "CUBLAS_LOGDEST_DBG", "ONEDNN_VERBOSE",
            "DNNL_VERBOSE", "MKL_VERBOSE", "NVTX_INJECTION", "CUPTI_", "PYTHONPATH", "PYTHONUNBUFFERED")


@dataclass
class KnobDifference:
    """One environment knob whose recorded value differs (None: not set in that run)."""

    name: str
    a: str | None
    b: str | None


@dataclass
class RunDifferences:
    """What differs between the two runs that a rerun can reproduce, and what it cannot."""

    argv_a: list[str] | None = None
    argv_b: list[str] | None = None  # only when it differs from A's
    knobs: list[KnobDifference] = field(default_factory=list)
    switches: list[dict[str, Any]] = field(default_factory=list)  # in-process settings: no env arm reaches them

    @property
    def toggles(self) -> list[str]:
        """``NAME=VALUE`` (B's value) per knob B sets (a redacted value is no value to set)."""
        return [f"{k.name}={k.b}" for k in self.knobs if k.b is not None and not _hidden(k)]

    @property
    def base_env(self) -> list[str]:
        """``NAME=VALUE`` (A's value) of each toggled knob A set: every arm starts from run A's setting."""
        return [f"{k.name}={k.a}" for k in self.knobs if k.a is not None and k.b is not None and not _hidden(k)]

    @property
    def arm_commands(self) -> list[str]:
        """Run B's command line as one arm, unless it was recorded redacted (a secret is never printed)."""
        return [shlex.join(self.argv_b)] if self.argv_b and not self.argv_b_hidden else []

    @property
    def argv_b_hidden(self) -> bool:
        return bool(self.argv_b) and any(REDACTED in x for x in self.argv_b or [])

    def notes(self) -> list[str]:
        """What the arms do not reproduce, one line each."""
        out = []
        for k in self.knobs:
            if _hidden(k):
                out.append(f"{k.name} differs, but a run recorded it redacted (a secret's value is never kept): "
                           "no arm sets it; set it in the shell that reruns")
            elif k.b is None:
                out.append(f"{k.name} is set in run A ({k.a!r}) and not in run B: an arm can set a variable, not "
                           "unset it, so no arm runs B's setting of it (rerun with it unset in the shell)")
        if self.argv_b_hidden:
            out.append("run B's command line differs and holds a secret (shown redacted): no --arm-command arm runs "
                       "it; add one by hand (--arm-command 'CMD ...') to rerun run B's command")
        for s in self.switches:
            out.append(f"in-process setting {s.get('field')} differs (A={s.get('a')!r} B={s.get('b')!r}): set by the "
                       "program itself, so no environment arm reaches it; only run B's own command can")
        n = len(self.toggles) + len(self.arm_commands)
        if n > 1:
            out.append(f"{n} differences become {n} arms, each changing one of them against run A: no arm runs "
                       "all of run B's setting at once")
        return out

    def kernel_options(self) -> list[str]:
        """The ``forensics kernel`` options that make both sides arms."""
        argv: list[str] = []
        for e in self.base_env:
            argv += ["--env", e]
        for t in self.toggles:
            argv += ["--toggle", t]
        for c in self.arm_commands:
            argv += ["--arm-command", c]
        return argv


def _hidden(k: KnobDifference) -> bool:
    return any(v is not None and REDACTED in v for v in (k.a, k.b))


def _own(name: str) -> bool:
    return name.startswith(OWN_VARS)


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


def differences_of(report: dict[str, Any] | None, argv_a: Any = None, argv_b: Any = None) -> RunDifferences:
    """The reproducible differences a diff report (its JSON form) records between run A and run B."""
    report = report or {}
    out = RunDifferences(argv_a=list(argv_a) if isinstance(argv_a, list) else None)
    entries = [d for d in report.get("comparability") or [] if isinstance(d, dict)]
    structured = report.get("config_differences")
    if isinstance(structured, list):  # the diff's structured list of differing knobs and switches
        for k in structured:
            if isinstance(k, dict) and isinstance(k.get("name"), str) and not _own(k["name"]):
                if k.get("kind", "knob") == "knob":
                    out.knobs.append(KnobDifference(k["name"], _text(k.get("a")), _text(k.get("b"))))
                else:
                    out.switches.append({"field": k["name"], "a": k.get("a"), "b": k.get("b")})
    else:
        for d in entries:
            f = str(d.get("field") or "")
            if f.startswith("env.") and not _own(f[4:]):
                out.knobs.append(KnobDifference(f[4:], _text(d.get("a")), _text(d.get("b"))))
            elif f.startswith(("switches.", "backends.")):
                out.switches.append(d)
    for d in entries:
        if d.get("field") == "argv":
            a, b = d.get("a"), d.get("b")
            if out.argv_a is None and isinstance(a, list):
                out.argv_a = [str(x) for x in a]
            if isinstance(b, list) and all(isinstance(x, (str, int, float)) for x in b):
                out.argv_b = [str(x) for x in b]
    if argv_b is not None and isinstance(argv_b, list) and argv_b != out.argv_a:
        out.argv_b = [str(x) for x in argv_b]
    return out
