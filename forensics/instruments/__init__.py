"""The instrument registry: what each instrument is, in one place, read by every stage.

Each instrument is one module of this package behind one interface (:mod:`.base`): an
:class:`Instrument` declares its device, its *family* (the independence group: instruments of one
family share one source and never confirm each other, :class:`Family`), its *role*, the reader
of its files (a function of its module, which imports its parser only when a file is read), the
file-name patterns and line form that recognise its files, its algo-descriptor columns, how its
records attach to site occurrences, and how a capture pass switches it on (:class:`Switch`: the
env an arm gets, the in-process probe, or a pass of its own around a tool such as ncu).

Adding an instrument is its module (an :class:`Instrument`, a :class:`Family` when it is a new
independent source), its parser, and one line in the registration below: ``forensics kernel``
switches it on, ``forensics analyze`` recognises, reads, counts, judges and reports it, and the
bundle shows its counts, without other edits (docs/instruments.md). The order of
:data:`INSTRUMENTS` is the preference order within a family (the first instrument present is the
one counted) and the file-classification order (first match wins).
"""
from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from forensics.instruments import (context, cublaslt, cupti, hipblaslt, kineto, mkl, ncu, nsys, onednn, rocblas,
                                   rocprofv3, torch_profiler)
from forensics.instruments import rocprofv3_db, rocprofv3_json, rpd
from forensics.instruments.base import (  # noqa: F401  (the interface, re-exported)
    CALLS,
    CONTEXT,
    CPU,
    CUDA,
    LAUNCHES,
    ROCM,
    UNREAD,
    Family,
    Head,
    Instrument,
    OwnPass,
    Switch,
)

FAMILIES: dict[str, Family] = {}
INSTRUMENTS: tuple[Instrument, ...] = ()
_BY_NAME: dict[str, Instrument] = {}


def register(*instruments: Instrument, family: Family | None = None) -> None:
    """Add instruments (and the family they head) to the registry, after those already there."""
    global INSTRUMENTS, FAMILIES, _BY_NAME
    if family is not None:
        FAMILIES = {**FAMILIES, family.name: family}
    for inst in instruments:
        if inst.name in _BY_NAME:
            raise ValueError(f"instrument {inst.name} is registered already")
        if inst.family is not None and inst.family not in FAMILIES:
            raise ValueError(f"instrument {inst.name}: family {inst.family} is not registered")
    INSTRUMENTS = INSTRUMENTS + tuple(instruments)
    _BY_NAME = {**_BY_NAME, **{i.name: i for i in instruments}}


def unregister(name: str) -> None:
    """Remove an instrument (and its family when no member is left): for tests of a toy instrument."""
    global INSTRUMENTS, FAMILIES, _BY_NAME
    gone = _BY_NAME.get(name)
    INSTRUMENTS = tuple(i for i in INSTRUMENTS if i.name != name)
    _BY_NAME = {i.name: i for i in INSTRUMENTS}
    if gone is not None and gone.family and not any(i.family == gone.family for i in INSTRUMENTS):
        FAMILIES = {k: v for k, v in FAMILIES.items() if k != gone.family}


# --- the registration: one line per instrument module, in preference and classification order
register(*context.INSTRUMENTS)
register(*cupti.INSTRUMENTS, family=cupti.FAMILY)
register(*nsys.INSTRUMENTS)
register(*kineto.INSTRUMENTS)
register(*ncu.INSTRUMENTS, family=ncu.FAMILY)
register(*cublaslt.INSTRUMENTS, family=cublaslt.FAMILY)
# CPU backend: the profiler in CUPTI's part, the two library logs in the cuBLASLt log's (docs/cpu-backend.md)
register(*torch_profiler.INSTRUMENTS, family=torch_profiler.FAMILY)
register(*onednn.INSTRUMENTS, family=onednn.FAMILY)
register(*mkl.INSTRUMENTS, family=mkl.FAMILY)
# AMD (ROCm): rocprofv3 in CUPTI's part, the hipBLASLt and rocBLAS logs in the cuBLASLt log's (docs/amd.md)
register(*rocprofv3.INSTRUMENTS, family=rocprofv3.FAMILY)
register(*rocprofv3_json.INSTRUMENTS)  # rocprofv3's JSON output: the CSV's records, family rocprofiler
register(*rocprofv3_db.INSTRUMENTS)  # rocprofv3's rocpd database (ROCm 7's default): family rocprofiler
register(*rpd.INSTRUMENTS)  # rocmProfileData .rpd (roctracer / ROCprofiler-SDK): family rocprofiler
register(*hipblaslt.INSTRUMENTS, family=hipblaslt.FAMILY)
register(*rocblas.INSTRUMENTS)


def get(name: str) -> Instrument | None:
    """The instrument called ``name`` (None when the registry has none)."""
    return _BY_NAME.get(name)


def family_of(name: str | None) -> str | None:
    """The family of an instrument, None for context files and unknown names."""
    inst = _BY_NAME.get(name) if isinstance(name, str) else None
    return inst.family if inst else None


def role_of(name: str | None) -> str | None:
    inst = _BY_NAME.get(name) if isinstance(name, str) else None
    return inst.role if inst else None


def of_role(role: str, device: str | None = None) -> list[Instrument]:
    """Instruments of one role (and device), in registry (preference) order."""
    return [i for i in INSTRUMENTS if i.role == role and (device is None or i.device == device)]


def names_of_role(role: str) -> tuple[str, ...]:
    return tuple(i.name for i in of_role(role))


def preference(family: str) -> tuple[str, ...]:
    """Members of a family in order of preference (the first present is the one counted)."""
    return tuple(i.name for i in INSTRUMENTS if i.family == family)


def family_label(family: str) -> str:
    f = FAMILIES.get(family)
    return f.label if f else family


def counting_families(device: str | None = None) -> list[str]:
    """Families with counting members, in registry order."""
    out: list[str] = []
    for i in INSTRUMENTS:
        if i.family and i.role in (LAUNCHES, CALLS) and (device is None or i.device == device) \
                and i.family not in out:
            out.append(i.family)
    return out


def can_confirm(family: str, kernel: str | None) -> bool:
    """Whether some member of ``family`` can count ``kernel``: every launch counter can; a call
    log only the kernels its library's calls launch."""
    for i in INSTRUMENTS:
        if i.family != family:
            continue
        if i.role == LAUNCHES or (i.role == CALLS and i.launch_role is not None and i.launch_role(kernel) is not None):
            return True
    return False


def algo_columns() -> list[str]:
    """Every call log's algo-descriptor columns, in registry order (compared across arms)."""
    out: list[str] = []
    for i in INSTRUMENTS:
        out += [c for c in i.algo_columns if c not in out]
    return out


def device_of(name: str | None) -> str | None:
    """The device of an instrument (cuda | cpu | rocm), None for context files and unknown names."""
    inst = _BY_NAME.get(name) if isinstance(name, str) else None
    return inst.device if inst else None


def devices_of(names: Iterable[str]) -> set[str]:
    """The devices of a capture's instruments (``{"cpu"}`` for the CPU backend's alone, ``{"rocm"}`` for AMD's)."""
    return {device_of(n) for n in names} - {None}


def file_patterns() -> list[tuple[str, str]]:
    """(glob, instrument) for every file kind, in classification order (first match wins)."""
    return [(p, i.name) for i in INSTRUMENTS for p in i.patterns]


def classify_file(name: str) -> str | None:
    """Instrument of a file from its name, or None when it is not an instrument file."""
    for pattern, instrument in file_patterns():
        if fnmatch.fnmatch(name, pattern):
            return instrument
    return None


def missing_families(present: set[str], device: str | None = None) -> list[str]:
    """One line per counting family with no member among ``present`` (instrument names), for the
    devices the present instruments belong to (a CPU capture is not told that ncu is missing), or
    for ``device`` when the capture's manifest names it (a CPU capture whose profiler and library
    logs all stayed empty is still a CPU capture)."""
    devices = {i.device for n in present if (i := _BY_NAME.get(n)) and i.role in (LAUNCHES, CALLS)}
    if device is not None:
        devices = {device}
    fams = [f for d in sorted(devices or {CUDA}) for f in counting_families(d)]
    have = {family_of(n) for n in present}
    return [FAMILIES[f].missing for f in fams if f not in have and f in FAMILIES]


# --------------------------------------------------------------------------- capture side
def captured(device: str) -> tuple[Instrument, ...]:
    """The instruments ``forensics kernel`` switches on for a device backend, in pass order."""
    return tuple(sorted((i for i in INSTRUMENTS if i.switch is not None and i.device == device),
                        key=lambda i: i.switch.order))


def capture_devices() -> dict[str, tuple[str, ...]]:
    """Device backend -> the names of the instruments a capture on it runs (its default), CUDA first."""
    out: dict[str, tuple[str, ...]] = {}
    for d in (CUDA, CPU, *sorted({i.device for i in INSTRUMENTS if i.switch is not None} - {CUDA, CPU})):
        names = tuple(i.name for i in captured(d))
        if names:
            out[d] = names
    return out


# --------------------------------------------------------------------------- reading side
def count_columns(device: str) -> list[str]:
    """The counting instruments of a device, family by family in registry order, each family's
    members in preference order: the per-instrument count columns a report shows."""
    return [n for f in counting_families(device) for n in preference(f) if role_of(n) in (LAUNCHES, CALLS)]


def content_forms() -> list[Instrument]:
    """Instruments recognised by a binary form (magic bytes, SQLite tables), in registry order."""
    return [i for i in INSTRUMENTS if i.content is not None]


def line_forms() -> list[tuple[Instrument, object]]:
    """(instrument, compiled line regex) of every text log that says what it is in its lines."""
    return [(i, i.line_form) for i in INSTRUMENTS if i.line_form is not None]
