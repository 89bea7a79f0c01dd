"""The instrument registry: what each instrument is, in one place, read by every stage.

An :class:`Instrument` declares its device, its *family* (the independence group: instruments of
one family share one source and never confirm each other), its *role*, the parser that reads its
files, the file-name patterns the capture loader recognises, and what it can name. A
:class:`Family` gives the group's label and what its absence costs.

Roles:

* :data:`LAUNCHES` a launch counter: its reader returns a launch frame (``forensics.core.model.
  LAUNCH_COLUMNS``), one row per kernel launch (on the CPU backend: one row per implementation
  op below the dispatcher, which plays the kernel's part).
* :data:`CALLS` a library call log: its reader returns one row per library call. The log names
  no kernel; it confirms launches of the kernels its ``launch_role`` accepts (PRIMARY starts one
  call's launches, AUXILIARY belongs to the call before it), matched one call to one launch group.
* :data:`CONTEXT` a capture file that is read but never counted (sites, op traces, environment).
* :data:`UNREAD` an instrument output that must be converted first (``.nsys-rep``).

Adding an instrument is one :class:`Instrument` entry (and a :class:`Family` when it is a new
independent source) plus its parser: analysis counts it, judges it and reports it without other
edits. The order of :data:`INSTRUMENTS` is the preference order within a family (the first
instrument present is the one counted) and the file-classification order (first match wins).
"""
from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from forensics.core.cpu_ops import mkl_launch_role, onednn_launch_role
from forensics.core.kernel_names import cublas_launch_role

LAUNCHES, CALLS, CONTEXT, UNREAD = "launches", "calls", "context", "unread"
CUDA, CPU = "cuda", "cpu"


@dataclass(frozen=True)
class Family:
    """An independence group: its members share one source."""

    name: str
    label: str  # what a user reads ("CUPTI family (cupti/kineto/nsys)")
    column: str  # its column heading in tables ("CUPTI family")
    device: str
    missing: str  # what the absence of every member costs, said once in "missing:" lines


@dataclass(frozen=True)
class Instrument:
    """One instrument (or capture file kind) and everything the stages need to know about it."""

    name: str  # the key in capture manifests and frames ("nsys", "ncu_csv", ...)
    role: str  # LAUNCHES | CALLS | CONTEXT | UNREAD
    patterns: tuple[str, ...]  # file-name globs
    device: str | None = None  # CUDA | CPU; None for context files of any device
    family: str | None = None  # a Family name; None for CONTEXT/UNREAD
    reader: str | None = None  # "module:function" path -> frame (launch frame or call frame)
    label: str = ""
    names: tuple[str, ...] = ()  # what it can name: kernel symbol, grid/block, algo, problem, NVTX range...
    unit: str = "kernel launches"  # what one row counts, said in verdicts
    #: CALLS only: a kernel name -> PRIMARY / AUXILIARY / None (not launched by this library's calls).
    launch_role: Callable[[str | None], str | None] | None = None
    confirms: str = ""  # CALLS only: which launches it can confirm, in words ("GEMM kernels only")
    notes: tuple[str, ...] = field(default=())
    #: CALLS only, "module:function" (calls, sites) -> calls with ``site_label``/``attributed_by``;
    #: None: the generic host-order + problem-descriptor attribution of forensics.judge.analysis.
    attributor: str | None = None
    #: CALLS only, "module:function" (instrument, scope launches, scope calls) -> {matched, calls, groups,
    #: detail}; None: one call to one launch group (cuBLAS). The CPU logs issue many calls per op.
    matcher: str | None = None
    #: CALLS only: the columns that make the library's "algo descriptor" (compared across arms).
    algo_columns: tuple[str, ...] = ()

    def read(self, path: Any) -> Any:
        """Call this instrument's reader on ``path``."""
        if not self.reader:
            raise ValueError(f"instrument {self.name} has no reader")
        return _resolve(self.reader)(path)

    def attribute(self, calls: Any, sites: Any) -> Any:
        """This log's own attribution of its calls to site occurrences (``attributor``)."""
        return _resolve(self.attributor)(calls, sites)

    def match(self, launches: Any, calls: Any) -> dict[str, Any]:
        """This log's own matching of one scope's calls to its launches (``matcher``)."""
        return _resolve(self.matcher)(self, launches, calls)


def _resolve(path: str | None) -> Callable[..., Any]:
    if not path:
        raise ValueError("no function given")
    module, _, func = path.partition(":")
    return getattr(importlib.import_module(module), func)


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("cupti", "CUPTI family (cupti/kineto/nsys)", "CUPTI family", CUDA,
           "no CUPTI-family instrument (cupti.jsonl, kineto trace or nsys .sqlite)"),
    Family("ncu", "Nsight Compute", "ncu", CUDA,
           "no Nsight Compute report (.ncu-rep or its CSV export): the independent replay count is missing"),
    Family("cublaslt", "cuBLASLt log", "cuBLASLt", CUDA,
           "no cuBLASLt log (CUBLASLT_LOG_LEVEL): no algo descriptor, no library-side call count"),
    # CPU backend (docs/cpu-backend.md): the profiler in CUPTI's part, the two library logs in the cuBLASLt log's
    Family("torch_profiler", "torch.profiler (CPU ops)", "profiler", CPU,
           "no torch.profiler CPU trace (torchprof.<pid>.json.gz): no implementation op per site occurrence"),
    Family("onednn", "oneDNN verbose log", "oneDNN", CPU,
           "no oneDNN verbose log (onednn.<pid>.log): no oneDNN primitive ran inside the window, or its log was off"),
    Family("mkl", "oneMKL verbose log", "oneMKL", CPU,
           "no oneMKL verbose log (mkl.<pid>.log): no oneMKL call ran inside the window, or its log was off"),
)}

INSTRUMENTS: tuple[Instrument, ...] = (
    # --- context files (read, never counted)
    Instrument("sites", CONTEXT, ("sites*.jsonl",), reader="parsers.sites_jsonl:read_sites",
               label="site probe records (NVTX/CUPTI external ids, digests)"),
    Instrument("optrace", CONTEXT, ("trace*.jsonl", "rank_*.jsonl"), label="op trace"),
    Instrument("environment", CONTEXT, ("environment.json",), label="captured environment"),
    Instrument("cpuprobe", CONTEXT, ("cpuprobe*.jsonl",), label="CPU probe status (instruments on, files, losses)"),
    # --- CUDA launch counters, CUPTI family in order of preference
    Instrument("cupti", LAUNCHES, ("cupti*.jsonl",), CUDA, "cupti", "parsers.cupti_jsonl:read_kernels",
               "CUPTI activity records (cupti-python)",
               names=("kernel symbol (mangled)", "grid/block", "stream", "device", "external id (site occurrence)")),
    Instrument("nsys", LAUNCHES, ("*.sqlite",), CUDA, "cupti", "parsers.nsys:read_attributed",
               "Nsight Systems SQLite export",
               names=("kernel symbol (mangled where the export has it, demangled, short)", "grid/block", "stream",
                      "device", "NVTX range (site occurrence)")),
    Instrument("kineto", LAUNCHES, ("*kineto*.json*", "*.pt.trace.json*", "*trace*.json.gz"), CUDA, "cupti",
               "parsers.kineto:read_kernels", "PyTorch profiler (Kineto) trace",
               names=("kernel symbol (demangled)", "grid/block", "stream", "launching op (external id)")),
    # --- Nsight Compute (replay), .ncu-rep preferred over its CSV export of the same pass
    Instrument("ncu", LAUNCHES, ("*.ncu-rep",), CUDA, "ncu", "parsers.ncu:read_report", "Nsight Compute report",
               names=("kernel symbol (mangled, demangled)", "grid/block", "NVTX range (site occurrence)",
                      "metrics")),
    Instrument("ncu_csv", LAUNCHES, ("*raw*.csv", "*details*.csv"), CUDA, "ncu", "parsers.ncu:read_csv",
               "Nsight Compute CSV export (--page raw|details)",
               names=("kernel symbol (ncu's demangled text)", "grid/block (raw page)", "NVTX range")),
    # --- library call logs
    Instrument("cublaslt", CALLS, ("cublaslt*.log",), CUDA, "cublaslt", "parsers.cublaslt:read_calls",
               "cuBLASLt log (CUBLASLT_LOG_LEVEL)", unit="cuBLASLt matmul calls",
               names=("algo descriptor", "problem descriptor (m, n, k, types, layouts)", "library version"),
               launch_role=cublas_launch_role, confirms="GEMM kernels only",
               algo_columns=("algo_id", "tile", "stages", "custom_option", "num_splits_k", "reduction_scheme",
                             "cta_swizzling", "cluster_shape")),
    Instrument("cublas", CALLS, ("cublas_legacy*.log", "cublas.*.log"), CUDA, "cublaslt",
               "parsers.cublas_legacy:read_matmul_calls", "legacy cuBLAS log (CUBLAS_LOGINFO_DBG)",
               unit="cuBLAS GEMM calls", names=("problem descriptor (m, n, k, types, layouts)", "library version"),
               launch_role=cublas_launch_role, confirms="GEMM kernels only"),
    # --- CPU backend: the profiler's implementation ops, the libraries' own logs (after the CUDA entries: their globs do not overlap)
    Instrument("torch_profiler", LAUNCHES, ("torchprof*.json*",), CPU, "torch_profiler",
               "parsers.torch_profiler_cpu:read_ops", "torch.profiler CPU trace (record_function per site occurrence)",
               names=("implementation op below the dispatcher", "input shapes", "thread", "site occurrence (range)"),
               unit="implementation-op execution(s)"),
    Instrument("onednn", CALLS, ("onednn.*.log", "onednn_*.log"), CPU, "onednn", "parsers.onednn_verbose:read_calls",
               "oneDNN verbose log (ONEDNN_VERBOSE, ONEDNN_VERBOSE_TIMESTAMP)", unit="oneDNN primitive executions",
               names=("primitive implementation and ISA (jit_1x1:avx2)", "prop kind", "memory descriptors",
                      "problem descriptor", "start time"),
               launch_role=onednn_launch_role, confirms="ops that call oneDNN (mkldnn_*, and GEMMs it may serve)",
               attributor="forensics.judge.cpu:attribute_onednn", matcher="forensics.judge.cpu:match",
               algo_columns=("primitive", "implementation", "prop_kind", "dtypes", "attributes")),
    Instrument("mkl", CALLS, ("mkl.*.log", "mkl_*.log"), CPU, "mkl", "parsers.mkl_verbose:read_calls",
               "oneMKL verbose log (MKL_VERBOSE, MKL_VERBOSE_OUTPUT_FILE)", unit="oneMKL calls",
               names=("BLAS routine (SGEMM, DGEMM, SGEMV...)", "problem descriptor (m, n, k, transposes, ld)",
                      "CNR mode", "threads", "library version"),
               launch_role=mkl_launch_role, confirms="ops that call oneMKL (thnn convolution, BLAS GEMM/GEMV)",
               attributor="forensics.judge.cpu:attribute_mkl", matcher="forensics.judge.cpu:match",
               algo_columns=("routine", "cnr", "nthr")),
    # --- needs conversion first
    Instrument("nsys_rep", UNREAD, ("*.nsys-rep", "*.qdrep"), CUDA,
               label="Nsight Systems report (run `nsys export --type sqlite`)"),
)

_BY_NAME = {i.name: i for i in INSTRUMENTS}


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
    """The device of an instrument (cuda | cpu), None for context files and unknown names."""
    inst = _BY_NAME.get(name) if isinstance(name, str) else None
    return inst.device if inst else None


def devices_of(names: Iterable[str]) -> set[str]:
    """The devices of a capture's instruments (``{"cpu"}`` for the CPU backend's alone)."""
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
