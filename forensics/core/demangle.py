"""Kernel symbol demangling (Itanium C++ ABI via ``cxxfilt``) and short names.

``demangle`` turns a mangled symbol (``_Z10init_arrayPdm``) into the demangled form nsys calls
``demangledName`` and ncu calls ``NameBase_DEMANGLED`` (``init_array(double*, unsigned long)``);
anything that does not demangle (``ampere_sgemm_128x64_nn``, Triton names, already demangled
names) comes back unchanged. ``short_name`` reduces a demangled name to the bare function name
(nsys ``shortName``, ncu ``FUNCTION`` base): no return type, namespace, template arguments or
parameter list.
"""
from __future__ import annotations

from functools import lru_cache

import cxxfilt

_OPEN = {"(": ")", "<": ">", "[": "]", "{": "}"}
_CLOSE = {v: k for k, v in _OPEN.items()}


@lru_cache(maxsize=65536)
def demangle(symbol: str) -> str:
    """Demangle an Itanium C++ symbol; return ``symbol`` unchanged when it does not demangle."""
    if not isinstance(symbol, str) or not symbol.startswith("_Z"):
        return symbol
    try:
        out = cxxfilt.demangle(symbol, external_only=False)
    except Exception:  # cxxfilt.InvalidName and ctypes failures alike: keep the raw name
        return symbol
    return out or symbol


def _strip_trailing_group(text: str, opener: str) -> str:
    """Drop a balanced ``opener ... closer`` group that ends ``text`` (e.g. the parameter list)."""
    closer = _OPEN[opener]
    if not text.endswith(closer):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        c = text[i]
        if c == closer:
            depth += 1
        elif c == opener:
            depth -= 1
            if depth == 0:
                return text[:i].rstrip()
    return text  # unbalanced: leave it alone


def _split_top_level(text: str, sep: str) -> list[str]:
    """Split on ``sep`` outside any bracket pair."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if c in _OPEN:
            depth += 1
        elif c in _CLOSE:
            depth = max(depth - 1, 0)
        elif depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            i += len(sep)
            start = i
            continue
        i += 1
    parts.append(text[start:])
    return parts


@lru_cache(maxsize=65536)
def short_name(demangled: str) -> str:
    """Bare function name of a (demangled) kernel name, as nsys ``shortName`` / ncu FUNCTION.

    ``void at::native::vectorized_elementwise_kernel<4, Fn>(int, Fn)`` ->
    ``vectorized_elementwise_kernel``; ``init_array(double*, unsigned long)`` -> ``init_array``;
    a plain name is returned as is. A mangled name is demangled first.
    """
    if not isinstance(demangled, str) or not demangled:
        return demangled
    text = demangle(demangled).strip()
    for suffix in (" const", " volatile", " &&", " &"):
        if text.endswith(suffix):
            text = text[: -len(suffix)].rstrip()
    text = _strip_trailing_group(text, "(")  # parameter list
    text = _strip_trailing_group(text, "<")  # template arguments of the function itself
    words = _split_top_level(text, " ")  # drop the return type ("void ", "enable_if<..>::type ")
    text = words[-1] if words[-1] else text
    name = _split_top_level(text, "::")[-1]  # drop namespaces / enclosing classes
    name = _strip_trailing_group(name, "<")
    return name or demangled


def demangle_all(symbols) -> list[str]:
    """Demangle a sequence of symbols (cached per distinct symbol)."""
    return [demangle(s) if isinstance(s, str) else s for s in symbols]


def canonical_kernel(mangled: str | None, demangled: str | None) -> str | None:
    """The launch frame's ``kernel`` key: ``demangle(mangled)`` when the mangled symbol demangles,
    else the instrument's own demangled name, else the raw name.

    Instruments' demanglers differ in spacing (nsys 2022 prints ``test0(double *, ...)``, cxxfilt
    and ncu ``test0(double*, ...)``); demangling the mangled symbol with one demangler gives every
    instrument the same spelling.
    """
    if isinstance(mangled, str) and mangled:
        d = demangle(mangled)
        if d != mangled:
            return d
    if isinstance(demangled, str) and demangled:
        return demangled
    return mangled if isinstance(mangled, str) and mangled else None
