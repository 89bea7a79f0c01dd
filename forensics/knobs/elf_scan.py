"""Find an environment-variable name inside shared libraries (ELF), with pyelftools.

Per library: every place the name occurs (whole word), the section it lies in (.rodata, .dynstr,
...), the string that holds it with its neighbouring strings, and whether the library imports
``getenv``/``secure_getenv`` or the ``environ`` block (dynamic symbols).

The file is searched with ``mmap`` + ``find`` first; sections are parsed only when needed.

Verdicts, from strongest to weakest evidence of a read:

* ``contains the name`` -- a C string that *ends* with the name exists (``"NAME\\0"``, on its own or
  as the tail of a longer string the linker merged it into): a possible ``getenv`` argument.
  A library that holds the name only *inside* longer text (``"Run with NAME=all"``) does not
  qualify: that is a message, a documentation mention.
* ``cannot tell statically`` -- no such string, but the library imports ``getenv``,
  ``secure_getenv`` or ``environ``: it reads the environment, and the name may be built at run
  time, assembled from characters in code, or hidden in data this scan cannot decode. A static
  scan cannot prove that it does not read the name. The evidence kept: the imports, *name
  pieces* (whole ``_``-separated components of the name held as strings of their own plus a sign
  of name building -- a suffix piece, a prefix piece ending in ``_``, or a joining format such as
  ``%s_%s``), *same-prefix names* the library does hold (``CUBLAS_LOGINFO_DBG`` for
  ``CUBLAS_WORKSPACE_CONFIG``), and mentions of the name inside messages.
* ``no literal, no environment access`` -- neither the name nor any environment import: this
  library cannot read the variable by itself (another library it calls still might).
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
CONTAINS, CANNOT_TELL = "contains the name", "cannot tell statically"
NO_LITERAL = "no literal, no environment access"
NOT_ELF, UNREADABLE = "not ELF", "unreadable"
_NEIGHBOURS = 3
_STRING_WIDTH = 100
_MAX_HITS = 20
_MAX_FAMILY = 200  # same-prefix names kept per library
_MAX_FAMILY_PROBES = 20000  # prefix occurrences examined per library (bounds the cost on huge .rodata)


@dataclass
class ElfHit:
    """One occurrence of the name in a library."""

    section: str
    offset: int  # file offset
    string: str  # the whole NUL-terminated string that holds the name
    before: list[str] = field(default_factory=list)  # neighbouring strings (nearest last)
    after: list[str] = field(default_factory=list)  # neighbouring strings (nearest first)
    #: the name ends its C string ("NAME\0", alone or as the tail of a merged string): a possible
    #: getenv argument. False: the name sits inside longer text (a message) and cannot be one.
    terminal: bool = True


@dataclass
class ElfFileResult:
    """What one library says about the name."""

    file: str
    verdict: str  # contains the name | cannot tell statically | no literal, no environment access | not ELF | unreadable
    hits: list[ElfHit] = field(default_factory=list)
    env_imports: list[str] = field(default_factory=list)  # getenv, secure_getenv, environ ...
    fragments: list[str] = field(default_factory=list)  # name pieces and joining formats (name building)
    family: list[str] = field(default_factory=list)  # same-prefix names the library holds as strings
    error: str | None = None

    @property
    def sections(self) -> list[str]:
        return sorted({h.section for h in self.hits})

    @property
    def names(self) -> list[ElfHit]:
        """Hits where the name ends a C string (possible getenv arguments)."""
        return [h for h in self.hits if h.terminal]

    @property
    def messages(self) -> list[ElfHit]:
        """Hits where the name sits inside longer text (documentation mentions)."""
        return [h for h in self.hits if not h.terminal]

    def evidence(self, known: set[str] | frozenset[str] = frozenset()) -> str:
        """One line: why this library is in its verdict (``known`` names, e.g. catalogued knobs, listed first)."""
        if self.verdict == CONTAINS:
            return f"string in {', '.join(sorted({h.section for h in self.names}))}; imports {', '.join(self.env_imports) or 'no getenv'}"
        if self.verdict != CANNOT_TELL:
            return self.verdict + (f" ({self.error})" if self.error else "")
        parts = [f"imports {', '.join(self.env_imports)} but holds no string of the name"]
        if self.fragments:
            parts.append(f"name pieces {', '.join(self.fragments)} (may build it at run time)")
        else:
            parts.append("no name pieces")
        if self.family:
            family = sorted(self.family, key=lambda n: (n not in known, n))
            shown = [n + ("*" if n in known else "") for n in family[:6]]
            more = f" (+{len(family) - len(shown)} more)" if len(family) > len(shown) else ""
            star = " (* catalogued knob)" if any(n in known for n in family[:6]) else ""
            parts.append(f"same-prefix names it does hold: {', '.join(shown)}{more}{star}")
        if self.messages:
            parts.append(f"the name appears only inside text: {self.messages[0].string!r}")
        return "; ".join(parts)

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
                return ElfFileResult(path, NOT_ELF), None
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                sha = hashlib.sha1(buf).hexdigest() if digest else None
                if buf[:4] != b"\x7fELF":
                    return ElfFileResult(path, NOT_ELF), sha
                return _scan_mapped(path, fh, buf, name), sha
    except (OSError, ValueError) as e:
        return ElfFileResult(path, UNREADABLE, error=f"{type(e).__name__}: {e}"), None


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
        # headers unusable: report what the bytes show, and never "does not read"
        hits = [ElfHit("?", o, name, terminal=_terminal(buf, o, len(needle))) for o in offsets]
        verdict = CONTAINS if any(h.terminal for h in hits) else CANNOT_TELL
        return ElfFileResult(path, verdict, hits=hits, error=f"unreadable ELF headers: {e}")
    hits = [_hit(buf, o, len(needle), sections) for o in offsets]
    if any(h.terminal for h in hits):
        return ElfFileResult(path, CONTAINS, hits=hits, env_imports=env_imports)
    if env_imports:
        return ElfFileResult(path, CANNOT_TELL, hits=hits, env_imports=env_imports,
                             fragments=_name_building(buf, name, sections), family=_family(buf, name, sections))
    if hits:  # the name only inside text, and no way to read the environment
        return ElfFileResult(path, NO_LITERAL, hits=hits)
    return ElfFileResult(path, NO_LITERAL)


def _terminal(buf: Any, offset: int, length: int) -> bool:
    end = offset + length
    return end >= len(buf) or buf[end] == 0


def _section_of(offset: int, sections: list[tuple[str, int, int]]) -> tuple[str, int, int]:
    for sec in sections:
        if sec[1] <= offset < sec[1] + sec[2]:
            return sec
    return ("(outside sections)", 0, 0)


def _hit(buf: mmap.mmap, offset: int, length: int, sections: list[tuple[str, int, int]]) -> ElfHit:
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
    text = _printable(buf[start:end], width=1 << 16)
    if len(text) > _STRING_WIDTH:  # keep the name visible: a window around it
        at = offset - start
        lo_c, hi_c = max(0, at - 40), min(len(text), at + length + 40)
        text = ("..." if lo_c else "") + text[lo_c:hi_c] + ("..." if hi_c < len(text) else "")
    return ElfHit(sec_name, offset, text or "?", before, after, terminal=_terminal(buf, offset, length))


def _printable(raw: bytes, width: int = _STRING_WIDTH) -> str:
    text = raw.decode("ascii", "replace")
    if not text or sum(c.isprintable() for c in text) < len(text):
        return ""
    return text if len(text) <= width else text[: width - 3] + "..."


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


def _data_ranges(sections: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    """Read-only data (and .data) where string literals live."""
    return [(lo, lo + size) for sec, lo, size in sections if sec.startswith(".rodata") or sec in (".data.rel.ro", ".data")]


def _name_building(buf: mmap.mmap, name: str, sections: list[tuple[str, int, int]]) -> list[str]:
    """The fragments and format strings seen in read-only data, if they meet the heuristic."""
    data = _data_ranges(sections)
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


def _family(buf: mmap.mmap, name: str, sections: list[tuple[str, int, int]]) -> list[str]:
    """Strings of their own in read-only data that look like names of the same prefix.

    For ``CUBLAS_WORKSPACE_CONFIG``: ``CUBLAS_LOGINFO_DBG``, ``CUBLAS_NVTX_LEVEL``, ... (upper-case
    letters, digits and ``_`` only). Shows that the library spells other names of the family out.
    Not all of them are environment variables (enum names share prefixes).
    """
    first = name.split("_", 1)[0]
    if not first or first == name:
        return []
    prefix = (first + "_").encode()
    found: set[str] = set()
    probes = 0
    for lo, hi in _data_ranges(sections):
        i = buf.find(prefix, lo, hi)
        while i >= 0 and probes < _MAX_FAMILY_PROBES and len(found) < _MAX_FAMILY:
            probes += 1
            if i == lo or buf[i - 1] == 0:
                end = buf.find(b"\0", i, min(hi, i + 128))
                if end > i + len(prefix):
                    word = bytes(buf[i:end])
                    if all(c == 95 or 48 <= c <= 57 or 65 <= c <= 90 for c in word) and word != name.encode():
                        found.add(word.decode())
            i = buf.find(prefix, i + 1, hi)
    return sorted(found)
