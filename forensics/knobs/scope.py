"""Static scope against a site: does a knob's reader lie on the site's code path?

Each site kind maps to a code path: a few components (Python modules and shared libraries,
matched by glob). The verdict, with its evidence:

* ON PATH: a Python read, or a library containing the name, lies on a path component;
* NOT ON PATH: readers exist, none is on the path, and every required component of the path
  was present in the scanned trees (so its absence of the name was actually checked) and none of
  them is "cannot tell statically";
* UNKNOWN: otherwise (a required component was not installed under the scanned paths, a
  component builds env names at run time, or no reader exists anywhere).
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

from forensics.knobs import StaticScan
from forensics.knobs.catalog import KnobEntry
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS
from forensics.knobs.python_scan import READ, UNRESOLVED, WRITE
from forensics.site import Occurrence, Site

ON_PATH, NOT_ON_PATH, UNKNOWN = "ON PATH", "NOT ON PATH", "UNKNOWN"


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


@dataclass(frozen=True)
class CodePath:
    kind: str  # te_gemm | torch_gemm | attention | collective | torch_other
    description: str
    components: tuple[Component, ...]


_CUBLAS = Component("cuBLAS", libraries=("libcublas.so*",))
_CUBLASLT = Component("cuBLASLt", libraries=("libcublasLt.so*",))
_ATEN_CUDA = Component("ATen CUDA (libtorch_cuda)", libraries=("libtorch_cuda*.so*",))
_ATEN_CONTEXT = Component("ATen global context (libtorch_cpu)", libraries=("libtorch_cpu.so*",), required=False, shared=True)
_TE_CORE = Component("Transformer Engine core (libtransformer_engine)", libraries=("libtransformer_engine*.so*",))
_TE_TORCH_EXT = Component("Transformer Engine torch extension", libraries=("transformer_engine_torch*.so*", "transformer_engine_extensions*.so*"), required=False)

PATHS: dict[str, CodePath] = {
    "te_gemm": CodePath("te_gemm", "Transformer Engine GEMM: TE's GEMM entry point -> libtransformer_engine -> cuBLASLt", (
        Component("TE GEMM entry point (Python)", python=("*/transformer_engine/pytorch/cpp_extensions/gemm.py",)),
        Component("TE modules calling the GEMM (Python)", python=("*/transformer_engine/pytorch/module/*.py",), required=False),
        _TE_TORCH_EXT, _TE_CORE, _CUBLASLT)),
    "torch_gemm": CodePath("torch_gemm", "ATen GEMM: ATen's CUDA BLAS (CUDABlas in libtorch_cuda) -> cuBLAS / cuBLASLt", (
        _ATEN_CUDA, _ATEN_CONTEXT, _CUBLAS, _CUBLASLT)),
    "attention": CodePath("attention", "attention: Transformer Engine attention modules (and their fused backends), ATen SDPA", (
        # TE 2.x: pytorch/attention/dot_product_attention/...; older TE: a single pytorch/attention.py
        Component("TE attention (Python)", python=("*/transformer_engine/pytorch/attention/*", "*/transformer_engine/pytorch/attention.py",
                                                   "*/transformer_engine/pytorch/dot_product_attention/*")),
        _TE_CORE, Component("ATen SDPA (libtorch_cuda)", libraries=("libtorch_cuda*.so*",), required=False))),
    "collective": CodePath("collective", "collective: torch.distributed -> ProcessGroupNCCL (libtorch_cuda) -> NCCL", (
        Component("torch.distributed (Python)", python=("*/torch/distributed/*",), required=False),
        _ATEN_CUDA, Component("NCCL", libraries=("libnccl*.so*",)))),
    "torch_other": CodePath("torch_other", "ATen CUDA kernel (libtorch_cuda), e.g. index_add", (_ATEN_CUDA, _ATEN_CONTEXT)),
}

_GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "addbmm", "_scaled_mm", "_grouped_mm")
_ATTENTION_WORDS = ("attention", "attn", "sdpa", "dpa", "flash")
_COLLECTIVE_WORDS = ("all_reduce", "allreduce", "reduce_scatter", "all_gather", "allgather", "broadcast", "nccl", "c10d", "all_to_all")


def code_path_for(site: Site | Occurrence, te_installed: bool) -> tuple[CodePath, str | None]:
    """The code path of a site kind, and a note when the mapping had to choose."""
    site = site.site if isinstance(site, Occurrence) else site
    if site.is_gemm:
        if te_installed:
            return PATHS["te_gemm"], None
        return PATHS["torch_gemm"], "no transformer_engine under the scanned paths: gemm site mapped to ATen's CUDA BLAS"
    text = site.name.lower()
    if site.is_aten:
        op = text.split(".")[1] if "." in text else text
        if op in _GEMM_OPS:
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


@dataclass
class Evidence:
    """One line of evidence: where, what, and which component it belongs to (None: off path)."""

    where: str
    what: str
    component: str | None


@dataclass
class ScopeVerdict:
    verdict: str
    site: str
    path: CodePath
    reason: str
    on_path: list[Evidence] = field(default_factory=list)
    off_path: list[Evidence] = field(default_factory=list)
    cannot_tell: list[Evidence] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # required components not installed here
    present: list[str] = field(default_factory=list)
    writers: list[Evidence] = field(default_factory=list)
    shared_only: list[Evidence] = field(default_factory=list)  # literals in a shared component, not counted
    notes: list[str] = field(default_factory=list)


def _component_of(path: str, is_library: bool, code_path: CodePath) -> str | None:
    base = os.path.basename(path)
    for comp in code_path.components:
        globs = comp.libraries if is_library else comp.python
        if any(fnmatch.fnmatch(base if is_library else path, g) for g in globs):
            return comp.label
    return None


def _installed(comp: Component, result: StaticScan) -> bool:
    if comp.libraries and any(fnmatch.fnmatch(os.path.basename(p), g) for p in result.all_libraries for g in comp.libraries):
        return True
    return bool(comp.python) and any(fnmatch.fnmatch(p, g) for p in result.all_python for g in comp.python)


def te_installed(result: StaticScan) -> bool:
    return any("/transformer_engine/" in p for p in result.all_python) or any(
        fnmatch.fnmatch(os.path.basename(p), "libtransformer_engine*.so*") for p in result.all_libraries)


def assess(result: StaticScan, site: Site | Occurrence, entry: KnobEntry | None = None) -> ScopeVerdict:
    """Conclude ON PATH / NOT ON PATH / UNKNOWN for ``site`` from a static scan."""
    code_path, mapping_note = code_path_for(site, te_installed(result))
    v = ScopeVerdict(UNKNOWN, str(site), code_path, "")
    if mapping_note:
        v.notes.append(mapping_note)
    for comp in code_path.components:
        if _installed(comp, result):
            v.present.append(comp.label)
        elif comp.required:
            v.missing.append(comp.label)
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
            what = f"string in {', '.join(lib.sections)}; imports {', '.join(lib.env_imports) or 'no getenv'}"
            hit = lib.hits[0] if lib.hits else None
            if hit:
                what += f"; neighbours: {' | '.join(hit.before[-2:] + ['<' + hit.string + '>'] + hit.after[:2])}"
            (v.on_path if comp else v.off_path).append(Evidence(lib.file, what, comp))
        elif lib.verdict == CANNOT_TELL:
            ev = Evidence(lib.file, f"cannot tell statically: imports {', '.join(lib.env_imports)}; name pieces {lib.fragments}", comp)
            v.cannot_tell.append(ev)
    on_path_unknown = [e for e in v.cannot_tell if e.component]
    shared = {c.label for c in code_path.components if c.shared}
    documented = entry is not None and code_path.kind in entry.scope
    weak = [e for e in v.on_path if e.component in shared]
    if weak and not documented:
        v.on_path = [e for e in v.on_path if e.component not in shared]
        v.shared_only = weak
    if v.on_path:
        v.verdict, v.reason = ON_PATH, f"{len(v.on_path)} reader(s) on the {code_path.kind} path"
        if any(e.component in shared for e in v.on_path):
            v.reason += " (in a shared component; counted because the catalog documents this path)"
    elif v.shared_only:
        v.reason = ("found only in a shared component (" + ", ".join(sorted({e.component for e in v.shared_only})) +
                    ") that many paths use; the catalog does not document this path, so static analysis cannot tell whether it is consulted here")
    elif v.missing:
        v.reason = "not installed under the scanned paths: " + ", ".join(v.missing) + " (cannot check them)"
    elif on_path_unknown:
        v.reason = "a component on the path may build the name at run time: " + ", ".join(os.path.basename(e.where) for e in on_path_unknown)
    elif v.off_path:
        v.verdict, v.reason = NOT_ON_PATH, f"{len(v.off_path)} reader(s) found, none on the {code_path.kind} path (all its components scanned)"
    else:
        v.reason = "no reader found anywhere under the scanned paths (the name may be built at run time or read outside them)"
    if entry is not None:
        v.notes += _catalog_notes(entry, code_path.kind, v.verdict)
    return v


def _catalog_notes(entry: KnobEntry, kind: str, verdict: str) -> list[str]:
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
    if verdict == ON_PATH and kind in entry.not_scope:
        notes.append("static evidence and catalog disagree: a literal on the path is not proof of a read that changes this site -- check the neighbours, run the dynamic check")
    if verdict == NOT_ON_PATH and kind in entry.scope:
        notes.append("static evidence and catalog disagree: the documented reader may build the name or live outside the scanned paths -- run the dynamic check")
    return notes
