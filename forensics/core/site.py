"""Site identities: what the op-level tracer names and what ``forensics kernel`` starts from.

Grammar (one line each, case-sensitive)::

    gemm:<NN|NT|TN|TT>:acc<0|1>:grad<0|1>     Transformer Engine GEMM (cuBLAS layout letters)
    <kind>:<flag><int>[:<flag><int>...]        other below-dispatcher site, e.g. index_add:acc1:grad0
    <namespace>.<op>[.<overload>]              dispatcher op of a known namespace (OP_NAMESPACES),
                                               e.g. aten.mm.default
    <any of the above>#<N>                     the N-th occurrence (1-based, counted per rank)

:func:`site_for_record` is the one mapping from a trace record (name + optional GEMM meta) to a
site; ``forensics diff`` names sites with it, ``forensics kernel --site`` parses with
:func:`parse_site`, and ``forensics kernel --from`` re-checks a report's site with
:func:`parse_site`: all three accept exactly the same strings.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from forensics.core.errors import BadSite
from forensics.core.ops import GEMM, GEMM_2D, aten_packet, packet

GEMM_LAYOUTS = ("NN", "NT", "TN", "TT")
_EXAMPLES = "e.g. gemm:NT:acc0:grad1, index_add:acc1:grad0, aten.mm.default, gemm:NT:acc0:grad1#3"
_KIND = re.compile(r"^[a-z_][a-z0-9_]*$")
_FLAG = re.compile(r"^([a-z_]+?)(\d+)$")
_ATEN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
#: Namespaces of dispatcher ops (``torch.ops.<ns>``) that name a site. A dotted name in another
#: namespace is a module path or a Python repr (``decoder.layer0.output``, ``None.pow``), not an op.
OP_NAMESPACES = ("aten", "prims", "c10d", "_c10d_functional", "_c10d_functional_autograd", "quantized",
                 "_quantized", "torchvision", "torchaudio", "triton", "fbgemm", "mkldnn", "rngprims")


@dataclass(frozen=True)
class Site:
    """A parsed site identity. ``str(site)`` gives the canonical spelling."""

    kind: str  # "gemm", another below-dispatcher kind ("index_add"), or "aten"
    name: str  # the kind for below-dispatcher sites, the full op name for ATen sites
    layout: str | None = None  # GEMM only: cuBLAS column-major layout letters (transa, transb)
    flags: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    @property
    def acc(self) -> int | None:
        return dict(self.flags).get("acc")

    @property
    def grad(self) -> int | None:
        return dict(self.flags).get("grad")

    @property
    def is_gemm(self) -> bool:
        return self.kind == "gemm"

    @property
    def is_aten(self) -> bool:
        return self.kind == "aten"

    def __str__(self) -> str:
        if self.kind == "aten":
            return self.name
        parts = [self.name] + ([self.layout] if self.layout else [])
        parts += [f"{k}{v}" for k, v in self.flags]
        return ":".join(parts)

    def occurrence(self, n: int) -> "Occurrence":
        return Occurrence(self, n)


@dataclass(frozen=True)
class Occurrence:
    """``SITE#N``: the N-th occurrence of a site on one rank (1-based)."""

    site: Site
    n: int

    def __str__(self) -> str:
        return f"{self.site}#{self.n}"


def gemm_site(layout: str, acc: bool | int, grad: bool | int) -> Site:
    """Build ``gemm:<layout>:acc<a>:grad<g>`` from its parts."""
    if layout not in GEMM_LAYOUTS:
        raise BadSite(f"GEMM layout {layout!r} is not one of {', '.join(GEMM_LAYOUTS)}")
    return Site("gemm", "gemm", layout, (("acc", int(bool(acc))), ("grad", int(bool(grad)))))


def parse_site(text: str) -> Site:
    """Parse a site identity (without ``#N``); raise :class:`BadSite` with a one-line reason."""
    s = (text or "").strip()
    if not s:
        raise BadSite(f"empty site; a valid site looks like {_EXAMPLES}")
    if "#" in s:
        raise BadSite(f"{s!r} is an occurrence (SITE#N), not a site; use parse_occurrence")
    if ":" not in s:
        m = _ATEN.match(s)
        if m and m.group(1) in OP_NAMESPACES:
            return Site("aten", s)
        if m:
            raise BadSite(f"{s!r} is not an op of a known namespace ({', '.join(OP_NAMESPACES[:4])}, ...): "
                          f"a dotted name is a site only for a dispatcher op; {_EXAMPLES}")
        raise BadSite(f"{s!r} is not a site; a valid site looks like {_EXAMPLES}")
    head, *rest = s.split(":")
    if not _KIND.match(head):
        raise BadSite(f"{s!r}: site kind {head!r} must be lower-case letters, digits, '_'; {_EXAMPLES}")
    if head == "gemm":
        if len(rest) != 3:
            raise BadSite(f"{s!r}: a GEMM site is gemm:<NN|NT|TN|TT>:acc<0|1>:grad<0|1>, e.g. gemm:NT:acc0:grad1")
        layout, acc, grad = rest
        if layout not in GEMM_LAYOUTS:
            raise BadSite(f"{s!r}: layout {layout!r} must be one of NN, NT, TN, TT (cuBLAS column-major letters)")
        for part, key in ((acc, "acc"), (grad, "grad")):
            if part not in (f"{key}0", f"{key}1"):
                raise BadSite(f"{s!r}: expected {key}0 or {key}1, got {part!r}; e.g. gemm:NT:acc0:grad1")
        return Site("gemm", "gemm", layout, (("acc", int(acc[-1])), ("grad", int(grad[-1]))))
    flags = []
    seen = set()
    for part in rest:
        m = _FLAG.match(part)
        if not m:
            raise BadSite(f"{s!r}: flag {part!r} must be <name><integer>, e.g. acc1; {_EXAMPLES}")
        key, val = m.group(1), int(m.group(2))
        if key in seen:
            raise BadSite(f"{s!r}: flag {key!r} appears twice")
        seen.add(key)
        flags.append((key, val))
    return Site(head, head, None, tuple(flags))


def parse_occurrence(text: str) -> Occurrence:
    """Parse ``SITE#N`` (N >= 1)."""
    s = (text or "").strip()
    if s.count("#") != 1:
        raise BadSite(f"{s!r} is not an occurrence; write SITE#N, e.g. gemm:NT:acc0:grad1#3")
    site_text, n_text = s.split("#")
    if not n_text.isdigit() or int(n_text) < 1:
        raise BadSite(f"{s!r}: occurrence number {n_text!r} must be an integer >= 1")
    return Occurrence(parse_site(site_text), int(n_text))


def parse_site_or_occurrence(text: str) -> Site | Occurrence:
    """Accept either form (the CLI's ``--site`` takes both)."""
    return parse_occurrence(text) if "#" in (text or "") else parse_site(text)


def split_label(label: str) -> tuple[str, int | None]:
    """``'gemm:NT:acc0:grad1#3'`` -> ``('gemm:NT:acc0:grad1', 3)``; no ``#`` -> ``(label, None)``."""
    if "#" in label:
        site, n = label.rsplit("#", 1)
        if n.isdigit():
            return site, int(n)
    return label, None


def is_occurrence_label(name: object) -> bool:
    """True when ``name`` is a valid ``SITE#N`` (e.g. an NVTX range name our probes wrote)."""
    if not isinstance(name, str) or "#" not in name:
        return False
    try:
        parse_occurrence(name)
    except BadSite:
        return False
    return True


def is_gemm_label(label: object) -> bool:
    """Whether a site or occurrence label (``gemm:NT:acc0:grad1``, ``gemm:NT:acc0:grad1#3``) is of the
    below-dispatcher GEMM kind (its head before the first ``:``), without parsing the rest."""
    return isinstance(label, str) and label.split(":", 1)[0] == "gemm" and ":" in label


def names_gemm(label: str) -> bool:
    """Whether a site or occurrence label names a GEMM: the ``gemm`` kind, or an aten op of
    :data:`forensics.core.ops.GEMM` (``aten.addmm_.default#2``)."""
    return is_gemm_label(label) or aten_packet(split_label(label)[0]) in GEMM


def site_for_record(name: str, gemm: object = None) -> str | None:
    """The site a trace record names, or None: ``gemm:<layout>:acc<a>:grad<g>`` when it carries GEMM
    meta (``{"layout", "acc", "grad"}``), else its op name when that parses as a site (a dispatcher
    op of a known namespace). The one mapping used by ``diff`` and ``kernel --from``."""
    if isinstance(gemm, dict) and gemm.get("layout"):
        try:
            return str(gemm_site(gemm["layout"], gemm.get("acc", 0), gemm.get("grad", 0)))
        except (BadSite, TypeError, ValueError):
            return None
    if not isinstance(name, str) or "#" in name:
        return None
    try:
        return str(parse_site(name))
    except BadSite:
        return None


# --------------------------------------------------------------------------- GEMM layout from strides
def _letter(shape: Any, stride: Any) -> str | None:
    """cuBLAS letter of one 2-D operand: N when row-major, T when column-major, None otherwise."""
    if not (isinstance(shape, (list, tuple)) and isinstance(stride, (list, tuple)) and len(shape) == len(stride) == 2):
        return None
    (rows, cols), (s0, s1) = shape, stride
    if s1 == 1 and s0 >= max(cols, 1):
        return "N"
    if s0 == 1 and s1 >= max(rows, 1):
        return "T"
    return None


def gemm_layout_from_strides(mat1: tuple[Any, Any], mat2: tuple[Any, Any]) -> str | None:
    """Layout letters of ``mat1 @ mat2`` (each ``(shape, stride)``) as cuBLAS sees it.

    PyTorch computes the row-major ``C = mat1 @ mat2`` as the column-major ``C^T = mat2^T mat1^T``,
    so cuBLAS's A is ``mat2`` and its B is ``mat1``: layout = letter(mat2) + letter(mat1). E.g.
    ``x @ W.t()`` (a Linear forward) is TN, ``grad_out.t() @ x`` (wgrad) NT, ``grad_out @ W``
    (dgrad) NN, as in Transformer Engine. None when an operand is not 2-D contiguous either way
    (PyTorch copies it first).
    """
    a, b = _letter(*mat2), _letter(*mat1)
    return a + b if a and b else None


def gemm_meta_from_strides(name: str, operands: list, phase: str | None) -> dict[str, int | str] | None:
    """The GEMM meta (``{"layout", "acc", "grad"}``, :func:`site_for_record`) of a 2-D aten GEMM
    (:data:`forensics.core.ops.GEMM_2D`) whose operands' ``(shape, stride)`` a trace recorded, or None:
    ``addmm``'s matrices are its last two operands (the first is ``self``) and it accumulates; grad is
    1 in the backward phase."""
    base = packet(name) if name.startswith("aten.") else None
    if base not in GEMM_2D or len(operands) < 2:
        return None
    mats = operands[-2:] if base == "addmm" else operands[:2]
    layout = gemm_layout_from_strides(tuple(mats[0]), tuple(mats[1]))
    if not layout:
        return None
    return {"layout": layout, "acc": int(base == "addmm"), "grad": int(phase == "backward")}
