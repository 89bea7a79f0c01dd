"""The interface every instrument module fills in: :class:`Instrument`, its :class:`Family` and, for
the instruments ``forensics kernel`` switches on, its :class:`Switch`.

Roles:

* :data:`LAUNCHES` a launch counter: its reader returns a launch frame (``forensics.core.model.
  LAUNCH_COLUMNS``), one row per kernel launch (on the CPU backend: one row per implementation
  op below the dispatcher, which plays the kernel's part).
* :data:`CALLS` a library call log: its reader returns one row per library call. The log names
  no kernel; it confirms launches of the kernels its ``launch_role`` accepts (PRIMARY starts one
  call's launches, AUXILIARY belongs to the call before it), matched one call to one launch group
  (or, ``per_execution``, all of a scope's calls to the one implementation-op execution they
  were issued under: the CPU libraries, :func:`forensics.judge.cpu.match`).
* :data:`CONTEXT` a capture file that is read but never counted (sites, op traces, environment).
* :data:`UNREAD` an instrument output that must be converted first (``.nsys-rep``).

This module imports nothing heavy: readers are functions of the instrument modules, which import
their parser (pandas) only when a file is read.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LAUNCHES, CALLS, CONTEXT, UNREAD = "launches", "calls", "context", "unread"
CUDA, CPU, ROCM = "cuda", "cpu", "rocm"


@dataclass(frozen=True)
class Family:
    """An independence group: its members share one source and never confirm each other."""

    name: str
    label: str  # what a user reads ("CUPTI family (cupti/kineto/nsys)")
    column: str  # its column heading in tables ("CUPTI family")
    device: str
    missing: str  # what the absence of every member costs, said once in "missing:" lines


def _no_post(tool: str, report: Path) -> list[list[str]]:
    return []


def _always(mode: str) -> bool:
    return True


@dataclass(frozen=True)
class OwnPass:
    """An instrument that wraps the user's command in a tool of its own (ncu, nsys, rocprofv3): one pass
    of the first arm, skipped with one line when the tool or its device (CUDA, or ``device_status``) is absent."""

    tool: str  # the executable's name on PATH
    globs: tuple[str, ...]  # install folders searched after PATH (newest match wins)
    missing: str  # the pass's skip reason when the tool is not found
    #: (tool path, report path without suffix, command, site=, mode=) -> the pass's argv
    argv: Callable[..., list[str]]
    #: (tool path, report path) -> commands run after the pass (nsys's SQLite export)
    post: Callable[[str, Path], list[list[str]]] = _no_post
    #: (ncu mode) -> whether the probe brackets the step window with cudaProfilerStart/Stop
    profiler_window: Callable[[str], bool] = _always
    #: () -> (device present, one-line reason when not): the device the tool observes; None: CUDA's
    #: (``forensics.capture.passes.cuda_status``, resolved once into ``Tools.cuda``)
    device_status: Callable[[], tuple[bool, str]] | None = None
    #: True: the tool wraps every arm's command instead of a pass of its own (rocprofv3: its launches and
    #: the arm's library logs then come from one process, as CUPTI's and the cuBLASLt log's do)
    wraps_arms: bool = False


@dataclass(frozen=True)
class Switch:
    """How a capture pass of ``forensics kernel`` switches an instrument on."""

    #: Its place in a backend's instrument list and in the pass order (arm instruments, then own passes).
    order: int
    #: Environment each arm pass gets, from the arm's folder (cuBLASLt's log level and per-pid file).
    env: Callable[[Path], dict[str, str]] | None = None
    #: The in-process probe that collects it in each arm ("cupti"; "cpu" for the CPU probe, which is
    #: told the instruments it runs by name).
    probe: str | None = None
    #: A pass of its own around the first arm's command (ncu, nsys).
    own_pass: OwnPass | None = None


@dataclass(frozen=True)
class Head:
    """What recognition reads of a file (forensics.instruments.recognise): its name, its first bytes
    (decompressed from gzip), and for an SQLite file its table and view names (None otherwise)."""

    name: str
    data: bytes
    gz: bool = False
    tables: frozenset[str] | None = None
    #: The file itself, for a form that must look past the first bytes (a Kineto trace whose vendor
    #: signals stand after its events: parsers.kineto_vendor.scan); None where only bytes are given.
    path: Path | None = None


@dataclass(frozen=True)
class Instrument:
    """One instrument (or capture file kind) and everything the stages need to know about it."""

    name: str  # the key in capture manifests and frames ("nsys", "ncu_csv", ...)
    role: str  # LAUNCHES | CALLS | CONTEXT | UNREAD
    patterns: tuple[str, ...]  # file-name globs (a hint: files are recognised by content first)
    device: str | None = None  # CUDA | CPU | ROCM; None for context files of any device
    family: str | None = None  # a Family name; None for CONTEXT/UNREAD
    reader: Callable[[Any], Any] | None = None  # path -> frame (launch frame or call frame)
    label: str = ""
    names: tuple[str, ...] = ()  # what it can name: kernel symbol, grid/block, algo, problem, NVTX range...
    unit: str = "kernel launches"  # what one row counts, said in verdicts
    #: CALLS only: a kernel name -> PRIMARY / AUXILIARY / None (not launched by this library's calls).
    launch_role: Callable[[str | None], str | None] | None = None
    confirms: str = ""  # CALLS only: which launches it can confirm, in words ("GEMM kernels only")
    notes: tuple[str, ...] = field(default=())
    #: CALLS only, (calls, sites) -> calls with ``site_label``/``attributed_by``: how its records attach
    #: to site occurrences; None: host order + problem descriptor (forensics.judge.analysis.attribute_calls).
    attributor: Callable[[Any, Any], Any] | None = None
    #: CALLS only: one implementation-op execution issues many calls (the CPU libraries), matched by
    #: forensics.judge.cpu.match; False: one call to one launch group (cuBLAS).
    per_execution: bool = False
    #: CALLS only, (kernel name, grid, call row, library) -> [FieldCheck]: how one call is checked against the
    #: launch matched to it; None: forensics.core.kernel_names.check_call (cuBLAS names) for a GPU log.
    identity: Callable[..., list[Any]] | None = None
    #: CALLS only: the library's name in identity checks ("hipBLASLt"); "" for the instrument's name.
    library: str = ""
    #: CALLS only: the columns that make the library's "algo descriptor" (compared across arms).
    algo_columns: tuple[str, ...] = ()
    #: Text logs: a line of this form in a file's first bytes recognises the file (``why`` says it).
    line_form: re.Pattern[bytes] | None = None
    line_why: str = ""
    #: Binary forms (magic bytes, an SQLite file's tables): Head -> what was seen when the file is this
    #: instrument's, else None. Asked before the JSON and text forms.
    content: Callable[[Head], str | None] | None = None
    #: How ``forensics kernel`` switches it on (None: read only, never captured by us).
    switch: Switch | None = None

    def read(self, path: Any) -> Any:
        """Call this instrument's reader on ``path``."""
        if self.reader is None:
            raise ValueError(f"instrument {self.name} has no reader")
        return self.reader(path)

    def attribute(self, calls: Any, sites: Any) -> Any:
        """This log's own attribution of its calls to site occurrences (``attributor``)."""
        if self.attributor is None:
            raise ValueError(f"instrument {self.name} has no attribution of its own")
        return self.attributor(calls, sites)
