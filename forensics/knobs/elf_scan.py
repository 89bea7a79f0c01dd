"""Find an environment-variable name inside shared libraries (ELF), with pyelftools.

Per library: every place the name occurs as a whole NUL-terminated-or-embedded string, the
section it lies in (.rodata, .dynstr, ...), neighbouring strings of the same section, and whether
the library imports ``getenv``/``secure_getenv`` or the ``environ`` block (dynamic symbols).

The file is searched with ``mmap`` + ``find`` first; sections are parsed only when needed.

"Cannot tell statically" heuristic (a library that may build the name at run time):
the library does NOT contain the full name, imports ``getenv``/``secure_getenv``/``environ``, and
its read-only data holds a *prefix fragment* of the name as a string of its own (whole
``_``-separated components: ``NVTE`` or ``NVTE_`` for ``NVTE_FOO_BAR``) together with at least one
sign of name building: a *suffix fragment* (``BAR``, ``FOO_BAR``, ``_BAR``), a prefix fragment that
ends in ``_`` (``NVTE_``, used as ``prefix + name``), or a format string that joins strings
(``%s_%s``, ``%s%s``, ``%s_%d``...). Such a library is reported as "cannot tell statically", never
as "does not read". A library with none of this is "no literal": it may still read the variable
through a name held in data we cannot see (e.g. encrypted or computed from numbers) -- the
heuristic only finds the common cases, and says so.
"""
from __future__ import annotations

import mmap
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from forensics.knobs.python_scan import _is_word

ENV_SYMBOLS = ("getenv", "secure_getenv", "__secure_getenv", "environ", "__environ")
NAME_FORMATS = (b"%s_%s", b"%s%s", b"%s_%d", b"%s_%u", b"%s_%i", b"%s%d")
CONTAINS, CANNOT_TELL, NO_LITERAL = "contains the name", "cannot tell statically", "no literal"
_NEIGHBOURS = 3
_STRING_WIDTH = 100
_MAX_HITS = 20


@dataclass
class ElfHit:
    """One occurrence of the name in a library."""

    section: str
    offset: int  # file offset
    string: str  # the whole NUL-terminated string that holds the name
    before: list[str] = field(default_factory=list)  # neighbouring strings (nearest last)
    after: list[str] = field(default_factory=list)  # neighbouring strings (nearest first)


@dataclass
class ElfFileResult:
    """What one library says about the name."""

    file: str
    verdict: str  # contains the name | cannot tell statically | no literal | not ELF | unreadable
    hits: list[ElfHit] = field(default_factory=list)
    env_imports: list[str] = field(default_factory=list)  # getenv, secure_getenv, environ ...
    fragments: list[str] = field(default_factory=list)  # for "cannot tell": what was seen
    error: str | None = None

    @property
    def sections(self) -> list[str]:
        return sorted({h.section for h in self.hits})

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ElfFileResult":
        d = dict(d)
        d["hits"] = [ElfHit(**h) for h in d.get("hits", [])]
        return cls(**d)


def is_shared_library_name(filename: str) -> bool:
    """``libx.so``, ``libx.so.12``, ``ext.cpython-311-x86_64-linux-gnu.so``."""
    return filename.endswith(".so") or ".so." in filename


def find_word(buf: Any, needle: bytes, start: int = 0, end: int | None = None) -> list[int]:
    """Offsets of ``needle`` as a whole word (not part of a longer identifier)."""
    end = len(buf) if end is None else end
    out, i = [], buf.find(needle, start, end)
    while i >= 0 and len(out) < _MAX_HITS:
        j = i + len(needle)
        if (i == 0 or not _is_word(buf[i - 1])) and (j >= len(buf) or not _is_word(buf[j])):
            out.append(i)
        i = buf.find(needle, i + 1, end)
    return out


def scan_elf_file(path: str, name: str, digest: bool = True) -> tuple[ElfFileResult, str | None]:
    """Scan one library; returns the result and the content digest (sha1) when ``digest``."""
    import hashlib

    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < 64:
                return ElfFileResult(path, "not ELF"), None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                sha = hashlib.sha1(buf).hexdigest() if digest else None
                if buf[:4] != b"\x7fELF":
                    return ElfFileResult(path, "not ELF"), sha
                return _scan_mapped(path, fh, buf, name), sha
    except (OSError, ValueError) as e:
        return ElfFileResult(path, "unreadable", error=f"{type(e).__name__}: {e}"), None


def _scan_mapped(path: str, fh: Any, buf: mmap.mmap, name: str) -> ElfFileResult:
    needle = name.encode()
    offsets = find_word(buf, needle)
    if not offsets and not any(buf.find(s.encode() + b"\0") >= 0 for s in ("getenv", "environ")):
        return ElfFileResult(path, NO_LITERAL)  # no name and no environment symbol: no need to parse
    try:
        elf = ELFFile(fh)
        sections = [(s.name, s["sh_offset"], s["sh_size"]) for s in elf.iter_sections()
                    if s["sh_type"] != "SHT_NOBITS" and s["sh_size"] > 0]
        env_imports = _env_imports(elf, buf)
    except (ELFError, ValueError, KeyError, OSError) as e:
        return ElfFileResult(path, CONTAINS if offsets else NO_LITERAL, error=f"unreadable ELF headers: {e}",
                             hits=[ElfHit("?", o, name) for o in offsets])
    if offsets:
        hits = [_hit(buf, o, sections) for o in offsets]
        return ElfFileResult(path, CONTAINS, hits=hits, env_imports=env_imports)
    if env_imports:
        fragments = _name_building(buf, name, sections)
        if fragments:
            return ElfFileResult(path, CANNOT_TELL, env_imports=env_imports, fragments=fragments)
    return ElfFileResult(path, NO_LITERAL, env_imports=env_imports)


def _section_of(offset: int, sections: list[tuple[str, int, int]]) -> tuple[str, int, int]:
    for sec in sections:
        if sec[1] <= offset < sec[1] + sec[2]:
            return sec
    return ("(outside sections)", 0, 0)


def _hit(buf: mmap.mmap, offset: int, sections: list[tuple[str, int, int]]) -> ElfHit:
    sec_name, sec_start, sec_size = _section_of(offset, sections)
    lo, hi = (sec_start, sec_start + sec_size) if sec_size else (max(0, offset - 4096), min(len(buf), offset + 4096))
    start = buf.rfind(b"\0", lo, offset) + 1 or lo
    end = buf.find(b"\0", offset, hi)
    end = hi if end < 0 else end
    before, cursor = [], start - 1
    while len(before) < _NEIGHBOURS and cursor > lo:
        s = buf.rfind(b"\0", max(lo, cursor - 4096), cursor) + 1
        if s <= 0:
            break
        text = _printable(buf[s:cursor])
        if text:
            before.insert(0, text)
        cursor = s - 1
    after, cursor = [], end + 1
    while len(after) < _NEIGHBOURS and cursor < hi:
        e = buf.find(b"\0", cursor, min(hi, cursor + 4096))
        if e < 0:
            break
        text = _printable(buf[cursor:e])
        if text:
            after.append(text)
        cursor = e + 1
    return ElfHit(sec_name, offset, _printable(buf[start:end]) or "?", before, after)


def _printable(raw: bytes) -> str:
    text = raw.decode("ascii", "replace")
    if not text or sum(c.isprintable() for c in text) < len(text):
        return ""
    return text if len(text) <= _STRING_WIDTH else text[: _STRING_WIDTH - 3] + "..."


def _env_imports(elf: ELFFile, buf: mmap.mmap) -> list[str]:
    """Environment symbols the library imports: names in .dynstr that the library does not define."""
    dynstr = elf.get_section_by_name(".dynstr")
    if dynstr is None:
        return []
    lo, hi = dynstr["sh_offset"], dynstr["sh_offset"] + dynstr["sh_size"]
    present = [s for s in ENV_SYMBOLS if _exact_string(buf, s.encode(), lo, hi)]
    if not present:
        return []
    defined = set()
    gnu_hash = elf.get_section_by_name(".gnu.hash")
    if gnu_hash is not None and hasattr(gnu_hash, "get_symbol"):
        for s in present:
            try:
                sym = gnu_hash.get_symbol(s)
            except Exception:  # a malformed table only loses this refinement
                sym = None
            if sym is not None and sym["st_shndx"] != "SHN_UNDEF":
                defined.add(s)
    return [s for s in present if s not in defined]


def _exact_string(buf: Any, text: bytes, lo: int, hi: int) -> bool:
    """``text`` as a whole NUL-terminated string within ``[lo, hi)``."""
    i = buf.find(text + b"\0", lo, hi)
    while i >= 0:
        if i == lo or buf[i - 1] == 0:
            return True
        i = buf.find(text + b"\0", i + 1, hi)
    return False


def name_fragments(name: str) -> tuple[list[str], list[str]]:
    """(prefix fragments, suffix fragments) of an ``_``-separated name, whole components only."""
    parts = [p for p in name.split("_") if p]
    prefixes, suffixes = [], []
    for k in range(1, len(parts)):
        head, tail = "_".join(parts[:k]), "_".join(parts[k:])
        prefixes += [head, head + "_"]
        suffixes += [tail, "_" + tail]
    return prefixes, suffixes


def _name_building(buf: mmap.mmap, name: str, sections: list[tuple[str, int, int]]) -> list[str]:
    """The fragments and format strings seen in read-only data, if they meet the heuristic."""
    data = [(lo, lo + size) for sec, lo, size in sections if sec.startswith(".rodata") or sec in (".data.rel.ro", ".data")]
    if not data:
        return []

    def seen(text: bytes) -> bool:
        return any(_exact_string(buf, text, lo, hi) for lo, hi in data)

    prefixes, suffixes = name_fragments(name)
    found_prefixes = [p for p in prefixes if seen(p.encode())]
    if not found_prefixes:
        return []
    evidence = [p for p in found_prefixes if p.endswith("_")]
    evidence += [s for s in suffixes if seen(s.encode())]
    evidence += [f.decode() for f in NAME_FORMATS if any(buf.find(f, lo, hi) >= 0 for lo, hi in data)]
    if not evidence:
        return []
    return sorted(set(found_prefixes) | set(evidence))
