"""Static scope against a site: does a knob's reader lie on the site's code path?

Each site kind maps to a code path (per device: CUDA or CPU): a few components (Python modules
and shared libraries, matched by glob). The verdict over the components that were scanned:

* ON PATH: a Python read, or a library holding the name as a string, lies on a path component;
* CANNOT TELL STATICALLY: no reader on the path, but a component on it reads the environment
  without holding the name (it may build it at run time or hide it): only the dynamic check
  can answer;
* NOT ON PATH: readers exist, none is on the path, and no component on the path reads the
  environment in a way the scan cannot see;
* UNKNOWN: the name sits only in a component many paths share, or no reader exists anywhere.

Components that are not installed (or not readable) under the scanned paths are listed with
how to close the gap. The overall verdict is the scanned one, except that NOT ON PATH needs every
required component scanned (UNKNOWN otherwise): a reader can hide in what was not scanned.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from forensics.knobs import StaticScan
from forensics.knobs.catalog import KnobEntry, load_catalog
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS, ElfFileResult
from forensics.knobs.python_scan import READ, UNRESOLVED, WRITE
from forensics.core.ops import GEMM_PATH
from forensics.core.site import Occurrence, Site
from forensics.core.words import CANNOT_TELL_STATICALLY, NOT_ON_PATH, ON_PATH, UNKNOWN

DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class Component:
    """One part of a code path: Python files (path globs) or libraries (file-name globs)."""

    label: str
    python: tuple[str, ...] = ()
    libraries: tuple[str, ...] = ()
    required: bool = True  # NOT ON PATH needs every required component present
    #: a library many paths share (ATen's global context in libtorch_cpu): a literal there counts as
    #: on-path evidence only when the catalog documents the knob for this path kind
    shared: bool = False
    #: where a user finds this component, to close the gap with --path
    hint: str = ""


@dataclass(frozen=True)
class CodePath:
    kind: str  # te_gemm | torch_gemm | attention | collective | torch_other | cpu_gemm | cpu_conv | cpu_other
    description: str
    components: tuple[Component, ...]
    device: str = "cuda"


_CUBLAS_HINT = "the nvidia-cublas wheel (site-packages/nvidia/cu13/lib or nvidia/cublas/lib) or the CUDA toolkit (e.g. /usr/local/cuda/lib64)"
_CUBLAS = Component("cuBLAS", libraries=("libcublas.so*",), hint=_CUBLAS_HINT)
_CUBLASLT = Component("cuBLASLt", libraries=("libcublasLt.so*",), hint=_CUBLAS_HINT)
_ATEN_CUDA = Component("ATen CUDA (libtorch_cuda)", libraries=("libtorch_cuda*.so*",),
                       hint="torch/lib of a CUDA build of torch (the PyPI CPU wheel has none)")
_ATEN_CONTEXT = Component("ATen global context (libtorch_cpu)", libraries=("libtorch_cpu.so*",), required=False, shared=True,
                          hint="torch/lib of the torch install")
_TE_CORE = Component("Transformer Engine core (libtransformer_engine)", libraries=("libtransformer_engine*.so*",),
                     hint="the transformer_engine package's site-packages")
_TE_TORCH_EXT = Component("Transformer Engine torch extension", libraries=("transformer_engine_torch*.so*", "transformer_engine_extensions*.so*"),
                          required=False, hint="the transformer_engine package's site-packages")
_ATEN_CPU = Component("ATen CPU with oneMKL and oneDNN (libtorch_cpu)", libraries=("libtorch_cpu.so*",), shared=True,
                      hint="torch/lib of the torch install (oneMKL and oneDNN are linked into libtorch_cpu in the PyPI wheels)")
_OPENMP = Component("OpenMP runtime (libgomp / libiomp5 / libomp)", libraries=("libgomp*.so*", "libiomp5*.so*", "libomp.so*"),
                    hint="torch/lib (the PyPI torch wheel ships libgomp.so.1) or the system's OpenMP runtime (e.g. /usr/lib/x86_64-linux-gnu)")
_MKL_SHARED = Component("oneMKL shared libraries (builds that do not link it in)", libraries=("libmkl_*.so*",), required=False,
                        hint="the mkl wheel's lib folder or the oneAPI install")
_DNNL_SHARED = Component("oneDNN shared library (builds that do not link it in)", libraries=("libdnnl*.so*",), required=False,
                         hint="the oneDNN install's lib folder")

PATHS: dict[str, CodePath] = {
    "te_gemm": CodePath("te_gemm", "Transformer Engine GEMM: TE's GEMM entry point -> libtransformer_engine -> cuBLASLt", (
        Component("TE GEMM entry point (Python)", python=("*/transformer_engine/pytorch/cpp_extensions/gemm.py",),
                  hint="the transformer_engine package's site-packages"),
        Component("TE modules calling the GEMM (Python)", python=("*/transformer_engine/pytorch/module/*.py",), required=False),
        _TE_TORCH_EXT, _TE_CORE, _CUBLASLT)),
    "torch_gemm": CodePath("torch_gemm", "ATen GEMM: ATen's CUDA BLAS (CUDABlas in libtorch_cuda) -> cuBLAS / cuBLASLt", (
        _ATEN_CUDA, _ATEN_CONTEXT, _CUBLAS, _CUBLASLT)),
    "attention": CodePath("attention", "attention: Transformer Engine attention modules (and their fused backends), ATen SDPA", (
        # TE 2.x: pytorch/attention/dot_product_attention/...; older TE: a single pytorch/attention.py
        Component("TE attention (Python)", python=("*/transformer_engine/pytorch/attention/*", "*/transformer_engine/pytorch/attention.py",
                                                   "*/transformer_engine/pytorch/dot_product_attention/*"),
                  hint="the transformer_engine package's site-packages"),
        _TE_CORE, Component("ATen SDPA (libtorch_cuda)", libraries=("libtorch_cuda*.so*",), required=False))),
    "collective": CodePath("collective", "collective: torch.distributed -> ProcessGroupNCCL (libtorch_cuda) -> NCCL", (
        Component("torch.distributed (Python)", python=("*/torch/distributed/*",), required=False),
        _ATEN_CUDA, Component("NCCL", libraries=("libnccl*.so*",), hint="the nvidia-nccl wheel (site-packages/nvidia/nccl/lib) or the system NCCL"))),
    "torch_other": CodePath("torch_other", "ATen CUDA kernel (libtorch_cuda), e.g. index_add", (_ATEN_CUDA, _ATEN_CONTEXT)),
    "cpu_gemm": CodePath("cpu_gemm", "ATen CPU GEMM: ATen's CPU BLAS in libtorch_cpu -> oneMKL sgemm or oneDNN matmul "
                         "(both linked into libtorch_cpu in the PyPI wheels), threads from the OpenMP runtime", (
        _ATEN_CPU, _OPENMP, _MKL_SHARED, _DNNL_SHARED), device="cpu"),
    "cpu_conv": CodePath("cpu_conv", "ATen CPU convolution: oneDNN (mkldnn) convolution or the thnn path (im2col + oneMKL sgemm) "
                         "in libtorch_cpu, chosen by shape and thread count, threads from the OpenMP runtime", (
        _ATEN_CPU, _OPENMP, _MKL_SHARED, _DNNL_SHARED), device="cpu"),
    "cpu_other": CodePath("cpu_other", "ATen CPU kernel (libtorch_cpu), threads from the OpenMP runtime", (
        _ATEN_CPU, _OPENMP), device="cpu"),
}

_CONV_WORDS = ("conv",)  # convolution, _convolution, conv1d/2d/3d, conv_transpose*, mkldnn_convolution, _slow_conv2d_forward
_ATTENTION_WORDS = ("attention", "attn", "sdpa", "dpa", "flash")
_COLLECTIVE_WORDS = ("all_reduce", "allreduce", "reduce_scatter", "all_gather", "allgather", "broadcast", "nccl", "c10d", "all_to_all")


def code_path_for(site: Site | Occurrence, te_installed: bool, device: str = "cuda") -> tuple[CodePath, str | None]:
    """The code path of a site kind on ``device``, and a note when the mapping had to choose."""
    site = site.site if isinstance(site, Occurrence) else site
    text = site.name.lower()
    op = text.split(".")[1] if site.is_aten and "." in text else text
    if device == "cpu":
        if site.is_gemm or op in GEMM_PATH:
            return PATHS["cpu_gemm"], None
        if any(w in op for w in _CONV_WORDS):
            return PATHS["cpu_conv"], None
        return PATHS["cpu_other"], None
    if site.is_gemm:
        if te_installed:
            return PATHS["te_gemm"], None
        return PATHS["torch_gemm"], ("no transformer_engine under the scanned paths: gemm site mapped to ATen's CUDA BLAS "
                                     "(if it is a Transformer Engine GEMM, add --path to the transformer_engine install)")
    if site.is_aten:
        if op in GEMM_PATH:
            return PATHS["torch_gemm"], None
        if any(w in op for w in _ATTENTION_WORDS):
            return PATHS["attention"], None
        if any(w in text for w in _COLLECTIVE_WORDS):
            return PATHS["collective"], None
        return PATHS["torch_other"], None
    if any(w in text for w in _ATTENTION_WORDS):
        return PATHS["attention"], None
    if any(w in text for w in _COLLECTIVE_WORDS):
        return PATHS["collective"], None
    return PATHS["torch_other"], None


#: Libraries that only a CUDA code path loads: under ``--path DIR`` with no torch, they say the DIR is a CUDA install.
_CUDA_LIBRARIES = ("libcublas*.so*", "libcublasLt*.so*", "libcudnn*.so*", "libcudart*.so*", "libnccl*.so*",
                   "libcufft*.so*", "libcusparse*.so*", "libtransformer_engine*.so*")


def choose_device(site: Site | Occurrence, result: StaticScan, requested: str | None) -> tuple[str, str]:
    """The device whose code path is checked, and why (``requested``: cuda | cpu | None for auto).

    Auto: cuda when Transformer Engine is under the scanned paths (its GEMMs and attention run on
    CUDA); cpu when the torch under them is a CPU build (libtorch_cpu without libtorch_cuda: an
    ATen op -- or a ``gemm:`` site named from an ATen GEMM -- can only run on the CPU there);
    with no torch under them at all (``--path DIR``): cuda when CUDA libraries are there (cuBLAS,
    cuDNN, NCCL, ...), else cpu when this machine has no CUDA device; otherwise cuda.
    """
    if requested in DEVICES:
        return requested, f"--device {requested}"
    if te_installed(result):
        return "cuda", "Transformer Engine is under the scanned paths; --device cpu checks the CPU path instead"
    libs = {os.path.basename(p) for p in result.all_libraries}
    has_cpu = any(fnmatch.fnmatch(b, "libtorch_cpu.so*") for b in libs)
    has_cuda = any(fnmatch.fnmatch(b, "libtorch_cuda*.so*") for b in libs)
    if has_cpu and not has_cuda:
        return "cpu", "the torch under the scanned paths is a CPU build (libtorch_cpu, no libtorch_cuda); --device cuda checks the CUDA path"
    cuda_libs = sorted(b for b in libs if any(fnmatch.fnmatch(b, g) for g in _CUDA_LIBRARIES))
    if not has_cpu and not has_cuda and cuda_libs:  # --path DIR holding CUDA libraries: their path is asked about
        return "cuda", (f"CUDA libraries are under the scanned paths ({', '.join(cuda_libs[:3])}); "
                        "--device cpu checks the CPU path")
    if not has_cpu and not has_cuda:  # no torch and no CUDA library under the paths: the machine decides
        from forensics.capture.passes import cuda_status  # noqa: PLC0415

        ok, reason = cuda_status()
        if not ok:
            return "cpu", (f"no torch under the scanned paths and this machine has no CUDA device ({reason}); "
                           "--device cuda checks the CUDA path")
    return "cuda", "default; --device cpu checks the CPU path"


@dataclass
class Evidence:
    """One line of evidence: where, what, and which component it belongs to (None: off path)."""

    where: str
    what: str
    component: str | None


@dataclass
class Unscanned:
    """A required component the scan could not check, and how to close the gap."""

    component: str
    why: str  # "not installed under the scanned paths" | "present but unreadable: PATH (reason)"
    how: str


@dataclass
class ScopeVerdict:
    verdict: str  # overall: ON PATH | CANNOT TELL STATICALLY | NOT ON PATH | UNKNOWN
    site: str
    path: CodePath
    reason: str
    scanned_verdict: str = UNKNOWN  # over the components that were scanned
    device: str = "cuda"
    device_note: str | None = None
    on_path: list[Evidence] = field(default_factory=list)
    off_path: list[Evidence] = field(default_factory=list)
    cannot_tell: list[Evidence] = field(default_factory=list)  # components on the path that may read it unseen
    missing: list[str] = field(default_factory=list)  # required components not installed here
    unscanned: list[Unscanned] = field(default_factory=list)  # missing or unreadable required components
    present: list[str] = field(default_factory=list)
    writers: list[Evidence] = field(default_factory=list)
    shared_only: list[Evidence] = field(default_factory=list)  # literals in a shared component, not counted
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every required component of the path was scanned."""
        return not self.unscanned


def _component_of(path: str, is_library: bool, code_path: CodePath) -> str | None:
    base = os.path.basename(path)
    for comp in code_path.components:
        globs = comp.libraries if is_library else comp.python
        if any(fnmatch.fnmatch(base if is_library else path, g) for g in globs):
            return comp.label
    return None


def _matches(comp: Component, path: str) -> bool:
    return (any(fnmatch.fnmatch(os.path.basename(path), g) for g in comp.libraries)
            or any(fnmatch.fnmatch(path, g) for g in comp.python))


def _installed(comp: Component, result: StaticScan) -> bool:
    if comp.libraries and any(fnmatch.fnmatch(os.path.basename(p), g) for p in result.all_libraries for g in comp.libraries):
        return True
    return bool(comp.python) and any(fnmatch.fnmatch(p, g) for p in result.all_python for g in comp.python)


def _how(comp: Component) -> str:
    globs = ", ".join(comp.libraries or comp.python)
    where = f" ({comp.hint})" if comp.hint else ""
    return (f"add --path DIR for a tree that holds {globs}{where}; --path replaces the default trees, "
            "so repeat --path for every tree to scan")


def te_installed(result: StaticScan) -> bool:
    return any("/transformer_engine/" in p for p in result.all_python) or any(
        fnmatch.fnmatch(os.path.basename(p), "libtransformer_engine*.so*") for p in result.all_libraries)


def _library_what(lib: ElfFileResult) -> str:
    what = lib.evidence(frozenset(load_catalog()))
    hit = lib.names[0] if lib.names else None
    if hit:
        what += f"; neighbours: {' | '.join(hit.before[-2:] + ['<' + hit.string + '>'] + hit.after[:2])}"
    return what


def assess(result: StaticScan, site: Site | Occurrence, entry: KnobEntry | None = None, device: str | None = None) -> ScopeVerdict:
    """Conclude ON PATH / CANNOT TELL STATICALLY / NOT ON PATH / UNKNOWN for ``site`` from a static scan.

    ``device`` None checks the CUDA path (the CLI resolves it with :func:`choose_device`).
    """
    device = device or "cuda"
    code_path, mapping_note = code_path_for(site, te_installed(result), device)
    v = ScopeVerdict(UNKNOWN, str(site), code_path, "", device=device)
    if mapping_note:
        v.notes.append(mapping_note)
    unreadable = dict(result.unreadable)
    for comp in code_path.components:
        if _installed(comp, result):
            v.present.append(comp.label)
            continue
        bad = [p for p in unreadable if _matches(comp, p)]
        if bad:
            v.unscanned.append(Unscanned(comp.label, f"present but unreadable: {bad[0]} ({unreadable[bad[0]]})",
                                         "make it readable, or run the scan as a user who can read it"))
        elif comp.required:
            v.missing.append(comp.label)
            v.unscanned.append(Unscanned(comp.label, "not installed under the scanned paths", _how(comp)))
        else:
            v.notes.append(f"optional component not installed here: {comp.label}")
    for f in result.findings():
        if f.kind not in (READ, WRITE, UNRESOLVED):
            continue
        comp = _component_of(f.file, False, code_path)
        what = f"{f.kind} {f.form} in {f.scope}" + (f" default={f.default}" if f.default and f.kind == READ else "") + (f": {f.feeds}" if f.feeds else "")
        ev = Evidence(f.where(), what, comp)
        if f.kind == WRITE:
            v.writers.append(ev)
            if f.scope == "<module>":
                v.notes.append(f"{f.where()} sets the knob at import time: importing that module overrides the user's value")
        elif f.kind == READ:
            (v.on_path if comp else v.off_path).append(ev)
    for lib in result.libraries:
        comp = _component_of(lib.file, True, code_path)
        if lib.verdict == CONTAINS:
            (v.on_path if comp else v.off_path).append(Evidence(lib.file, _library_what(lib), comp))
        elif lib.verdict == CANNOT_TELL and comp:
            v.cannot_tell.append(Evidence(lib.file, lib.evidence(frozenset(load_catalog())), comp))
    shared = {c.label for c in code_path.components if c.shared}
    documented = entry is not None and code_path.kind in entry.scope
    weak = [e for e in v.on_path if e.component in shared]
    if weak and not documented:
        v.on_path = [e for e in v.on_path if e.component not in shared]
        v.shared_only = weak
    v.scanned_verdict, v.reason = _scanned(v, code_path)
    if v.unscanned:
        v.reason += "; not scanned: " + ", ".join(u.component for u in v.unscanned) + " (see below how to close)"
    if v.scanned_verdict in (ON_PATH, CANNOT_TELL_STATICALLY) or (v.scanned_verdict == NOT_ON_PATH and v.complete):
        v.verdict = v.scanned_verdict
    else:
        v.verdict = UNKNOWN
    if entry is not None:
        v.notes += _catalog_notes(entry, code_path.kind, v)
    return v


def _scanned(v: ScopeVerdict, code_path: CodePath) -> tuple[str, str]:
    """The verdict over the scanned components, and its reason."""
    kind = code_path.kind
    if v.on_path:
        reason = f"{len(v.on_path)} reader(s) on the {kind} path"
        if any(e.component in {c.label for c in code_path.components if c.shared} for e in v.on_path):
            reason += " (in a shared component; counted because the catalog documents this path)"
        return ON_PATH, reason
    if v.shared_only:
        return UNKNOWN, ("found only in a shared component (" + ", ".join(sorted({e.component or "?" for e in v.shared_only})) +
                         ") that many paths use; the catalog does not document this path, so static analysis cannot tell whether it is consulted here")
    if v.cannot_tell:
        names = ", ".join(f"{os.path.basename(e.where)} ({e.component})" for e in v.cannot_tell)
        signs = [e for e in v.cannot_tell if "no name pieces" not in e.what or "same-prefix names" in e.what or "inside text" in e.what]
        weight = ("" if signs else " (none of them shows a sign of the name: no pieces, no same-prefix names, no mention)")
        return CANNOT_TELL_STATICALLY, (f"no reader of the name on the {kind} path, but {len(v.cannot_tell)} librar"
                                        f"{'y' if len(v.cannot_tell) == 1 else 'ies'} on it read the environment without holding "
                                        f"the name: {names}{weight}; a static scan cannot exclude a read there -- the dynamic check decides")
    if v.off_path:
        return NOT_ON_PATH, (f"{len(v.off_path)} reader(s) found, none on the {kind} path"
                             + (" (all its components scanned)" if v.complete else ""))
    return UNKNOWN, "no reader found anywhere under the scanned paths (the name may be built at run time or read outside them)"


def _catalog_notes(entry: KnobEntry, kind: str, v: ScopeVerdict) -> list[str]:
    notes = []
    if kind in entry.scope:
        documented = "documented to reach"
    elif kind in entry.not_scope:
        documented = "documented NOT to reach"
    elif kind in entry.uncertain_scope:
        documented = "of uncertain documented scope for"
    else:
        documented = "not documented for"
    notes.append(f"catalog ({entry.certainty}): {entry.name} is {documented} the {kind} path; source: {entry.source}")
    if v.verdict == ON_PATH and kind in entry.not_scope:
        notes.append("static evidence and catalog disagree: a literal on the path is not proof of a read that changes this site -- check the neighbours, run the dynamic check")
    if v.verdict == NOT_ON_PATH and kind in entry.scope:
        notes.append("static evidence and catalog disagree: the documented reader may build the name or live outside the scanned paths -- run the dynamic check")
    for e in v.cannot_tell:
        base = os.path.basename(e.where)
        stem = base.split(".so")[0]
        readers = [r for r in entry.read_by if r == stem]
        if readers:
            notes.append(f"the catalog says {readers[0]} reads {entry.name} ({entry.certainty}), yet {base} holds no string of the name: "
                         "the library builds or hides it where a static scan cannot see -- only the dynamic check can show whether it reaches this site")
    return notes
