"""The columnar path's block scan: record lines located as byte ranges with numpy, run A's records
checked once per *template*.

A block of a rank file is one ``bytes`` object; nothing here makes a Python object per line.

* :func:`heads` reads each line's head as our tracer writes it, ``{"seq":N,"id":"ID",`` (the
  format's :data:`~forensics.core.formats.optrace.RECORD_HEAD`), from the bytes and the positions
  of the block's quotes: the seq (digits, no leading zero, at most 18), where the identity starts
  and ends, where the text after the seq starts. A line whose head is not in that form is not
  "ours": it is compared by the walk.
* :func:`binary` turns byte ranges of the block into an Arrow binary column (through Arrow's
  binary *view* layout, built in numpy: one copy of the bytes, in C).
* :class:`Templates`: a record's validity under the native reader's checks depends on its seq and
  identity only through the checks on the head, and on its digests (``h``, ``o``) and its
  backward op's forward identity (``meta.fwd``) only through their being strings. So each line
  after its identity, with the contents of those strings overwritten (same length, only where the
  content has no backslash and no control character, so that the JSON is read the same way), is
  its *template*; the lines of a training step share a few hundred. Each template is parsed once,
  by the walk's own JSON reader and checks (:mod:`forensics.tracediff.traces.native`), and what
  the comparison needs from it (valid, step, unproven outputs, a GEMM, an uninitialised op) is
  given to every line that has it.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided, sliding_window_view
import pyarrow as pa
import pyarrow.compute as pc

from forensics.core.errors import BadInput
from forensics.core.formats import optrace as optrace_format
from forensics.tracediff.traces import native
from parsers._text import view_array

_SEQ, _ID = optrace_format.RECORD_HEAD
_OPEN = np.frombuffer(f'{{"{_SEQ}":'.encode(), np.uint8)  # {"seq":
_ID_KEY = np.frombuffer(f',"{_ID}":"'.encode(), np.uint8)  # ,"id":"
_DIGITS = 18  # a seq of at most 18 digits is within int64
_SEVEN = np.frombuffer(b"\xff" * 7 + b"\0", np.uint64)[0]  # an 8-byte word's first 7 bytes (either byte order)
_OPEN_WORD = np.frombuffer(_OPEN.tobytes() + b"\0", np.uint64)[0]
_ID_KEY_WORD = np.frombuffer(_ID_KEY.tobytes() + b"\0", np.uint64)[0]
_MIN_LINE = len(_OPEN) + 1 + len(_ID_KEY) + 1 + 2  # {"seq":0,"id":"x",
_QUOTE, _COMMA, _COLON = ord('"'), ord(","), ord(":")
#: string values whose content the checks read only as "a string": overwritten in a template
BLANKED_KEYS = (b"h", b"o", b"fwd")
_STEP_KEY = b'"step":'
_STEP_RUN = re.compile(rb'"step":(1+)[,}]')
_FILL = ord("x")
#: bytes a plain string content has none of: a quote, a backslash, control bytes
_NOT_PLAIN = np.zeros(256, dtype=bool)
_NOT_PLAIN[:0x20] = _NOT_PLAIN[ord('"')] = _NOT_PLAIN[ord("\\")] = True
#: the heads a template is read with: two, so that a later duplicate seq or id key is caught
_TEMPLATE_HEADS = (f'{{"{_SEQ}":0,"{_ID}":"x",'.encode(), f'{{"{_SEQ}":1,"{_ID}":"y",'.encode())
_PLACEHOLDERS = ((0, "x"), (1, "y"))
_NOWHERE = Path("template")
#: (valid, step, unproven, gemm, uninitialised, step blanked) of a line the walk must read
INVALID = (False, None, False, False, False, False)


class Heads:
    """Per line: ``ok`` (the head is in our form), ``seq``, ``id_start``/``id_end`` (the identity's
    bytes, quotes excluded) and ``rest_start`` (the byte after the seq's comma)."""

    __slots__ = ("ok", "seq", "id_start", "id_end", "rest_start")


#: zero bytes after each block's data: every window read from a line start stays in the buffer
PAD = 160
_ID_WINDOWS = (32, 96)  # an identity's closing quote is looked for in this many bytes, then more, then by bytes.find


def _rows(buf: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``buf[start:start + width]`` for every start, as rows (``buf`` ends with :data:`PAD` bytes
    past the last start; a window may read past its line's newline, which no check passes)."""
    return sliding_window_view(buf, width)[starts]


def heads(data: bytearray, begins: np.ndarray, ends: np.ndarray) -> Heads:
    """Each line's head (``begins``/``ends``: its first byte and its newline, in ``data``, which
    ends with :data:`PAD` zero bytes past the block). The same lines as the regular expression
    ``^\\{"seq":(0|[1-9][0-9]{0,17}),"id":"([^"]+)",`` (the caller checks the identity's bytes
    where it must)."""
    h = Heads()
    buf = np.frombuffer(data, np.uint8)
    n = len(begins)
    words = _words(buf)
    ok = (ends - begins) >= _MIN_LINE
    ok &= (words[begins] & _SEVEN) == _OPEN_WORD
    # (wraps below '0': one comparison tells a digit)
    digits = _rows(buf, begins + len(_OPEN), _DIGITS + 1) - np.uint8(ord("0"))
    is_digit = digits <= 9
    dlen = np.argmin(is_digit, axis=1)  # the first byte that is not a digit (0: none in the window, or no digit)
    ok &= (dlen >= 1) & ~((digits[:, 0] == 0) & (dlen > 1))
    seq = np.zeros(n, np.int64)
    for j in range(int(dlen.max(initial=0))):
        more = j < dlen
        seq[more] = seq[more] * 10 + digits[more, j]
    comma = begins + len(_OPEN) + dlen
    ok &= (words[comma] & _SEVEN) == _ID_KEY_WORD
    id_start = comma + len(_ID_KEY)
    id_end = np.full(n, -1, np.int64)
    todo = np.flatnonzero(ok)
    for width in _ID_WINDOWS:
        near = _rows(buf, id_start[todo], width) == _QUOTE
        found = near.any(axis=1)
        id_end[todo[found]] = id_start[todo[found]] + np.argmax(near[found], axis=1)
        todo = todo[~found]
    for i in todo:  # a long identity
        id_end[i] = data.find(b'"', int(id_start[i]), int(ends[i]))
    ok &= (id_end > id_start) & (id_end + 1 < ends)
    ok &= buf[np.maximum(id_end, 0) + 1] == _COMMA
    h.ok, h.seq, h.id_start, h.id_end, h.rest_start = ok, seq, id_start, id_end, comma + 1
    return h


def plain(specials: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per range: no byte of ``specials`` (sorted positions: backslashes and control bytes) in
    ``[start, end)``."""
    nxt = np.searchsorted(specials, starts)
    if not len(specials):
        return np.ones(len(starts), dtype=bool)
    return (nxt == len(specials)) | (specials[np.minimum(nxt, len(specials) - 1)] >= ends)


def specials_of(data: bytearray, cut: int, newlines: np.ndarray) -> np.ndarray:
    """Positions in ``data[:cut]`` of the bytes a plain JSON string content has none of: ``\\``
    and control bytes (``newlines`` alone when the block has no other, the usual case)."""
    buf = np.frombuffer(data, np.uint8, cut)
    if data.find(b"\\", 0, cut) < 0 and np.count_nonzero(buf < 0x20) == len(newlines):
        return newlines
    return np.flatnonzero((buf == ord("\\")) | (buf < 0x20))


def binary(data: Any, buf: np.ndarray, starts: np.ndarray, lens: np.ndarray,
           valid: np.ndarray | None = None) -> pa.Array:
    """The byte ranges ``data[start:start + len]`` as a binary column (``valid`` false: null).
    ``buf`` is ``data`` as a uint8 array, :data:`PAD` bytes past the last range's start."""
    return view_array(pa.binary_view(), data, buf, starts, lens, valid).cast(pa.binary())


def _quads(buf: np.ndarray) -> np.ndarray:
    """``buf`` as 4-byte words starting at every byte (unaligned)."""
    return as_strided(buf[:0].view(np.uint32), shape=(len(buf) - 3,), strides=(1,))


def _words(buf: np.ndarray) -> np.ndarray:
    """``buf`` as 8-byte words starting at every byte (unaligned): ``words[i]`` is ``buf[i:i + 8]``."""
    return as_strided(buf[:0].view(np.uint64), shape=(len(buf) - 7,), strides=(1,), writeable=buf.flags.writeable)


_ONES, _HIGH = np.uint64(0x0101010101010101), np.uint64(0x8080808080808080)
_BELOW_PLAIN = np.uint64(0x23 * 0x0101010101010101)  # bytes below '#': control bytes, space, '!', '"'
_BACKSLASHES = np.uint64(ord("\\") * 0x0101010101010101)


def _plain_words(w: np.ndarray) -> np.ndarray:
    """Per 8-byte word: every byte is '#' or above and none is a backslash (bit tricks: a byte below
    ``b`` sets its high bit in ``(w - b) & ~w``)."""
    with np.errstate(over="ignore"):
        below = (w - _BELOW_PLAIN) & ~w & _HIGH
        x = w ^ _BACKSLASHES
        slash = (x - _ONES) & ~x & _HIGH
    return (below | slash) == 0


def blank(template: np.ndarray, data: bytearray, cut: int, begins: np.ndarray,
          keys: tuple[bytes, ...] = BLANKED_KEYS) -> tuple[np.ndarray, np.ndarray]:
    """Overwrite in ``template`` (a copy of ``data``) the content of every ``"KEY":"..."`` string of
    ``keys`` in ``data[:cut]`` whose content holds no quote, no backslash and no control byte (so it
    reads the same as any other plain string). A match whose first quote is escaped is the value of
    a key whose name ends in ``"KEY``, which no check reads either. One-letter keys are blanked where
    their value has 16 characters (the tracer's digests); a longer key's value where it ends within
    :data:`PAD` bytes. Another length stays as it is (a template of its own).

    The step too (``"step":N``, N digits without a leading zero, then ``,`` or ``}``): its digits
    become ones (the same length: a template per digit count, not per step). Returns, per line,
    whether exactly one step was blanked in it and its value; the template tells whether that one
    was the record's step (:func:`template_info`)."""
    buf = np.frombuffer(data, np.uint8)
    c = buf[:cut]
    n = len(begins)
    located, steps = np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    if cut < 24:
        return located, steps
    # `":` (a key's closing quote and the colon) as a 2-byte word at even and at odd offsets
    pair = np.uint16(_QUOTE | _COLON << 8)
    pairs = np.concatenate([np.flatnonzero(np.frombuffer(data, "<u2", (cut - o) // 2, o) == pair) * 2 + o
                            for o in (0, 1)])
    pairs = pairs[pairs > len(_STEP_KEY)]
    around = _quads(buf)[pairs - 1].view(np.uint8).reshape(-1, 4)  # the key's last letter, '"', ':', what follows
    located, steps = _blank_steps(template, buf, c, pairs[around[:, 0] == _STEP_KEY[-3]], begins)
    string = around[:, 3] == _QUOTE  # `":"`: a string value follows
    r, last = pairs[string], around[string, 0]
    for size in sorted({len(k) for k in keys}):
        named = [k for k in keys if len(k) == size]
        sel = last == named[0][-1]
        for key in named[1:]:
            sel |= last == key[-1]
        k = r[sel]
        k = k[c[np.maximum(k - size - 1, 0)] == _QUOTE]  # the key's opening quote (k > size: r starts at 1)
        if size > 1:
            good = np.zeros(len(k), dtype=bool)
            for key in named:
                this = np.ones(len(k), dtype=bool)
                for j, ch in enumerate(key[:-1]):
                    this &= c[k - size + j] == ch
                good |= this
            k = k[good]
        start = k + 3
        if size == 1:  # 16 characters: two words, each '#' and above but the backslash (a space or '!' is left as is)
            start = start[buf[start + 16] == _QUOTE]
            words = _words(buf)
            start = start[_plain_words(words[start]) & _plain_words(words[start + 8])]
            fill = _words(template)
            fill[start] = fill[start + 8] = _FILL * _ONES
            continue
        window = _NOT_PLAIN[_rows(buf, start, PAD - 1)]
        lens = np.argmax(window, axis=1)  # the first byte that is not plain: it must be the closing quote
        good = window.any(axis=1)
        good &= buf[start + lens] == _QUOTE
        start, lens = start[good], lens[good]
        _fill_ranges(template, start, lens, _FILL)
    return located, steps


def _fill_ranges(template: np.ndarray, starts: np.ndarray, lens: np.ndarray, value: int) -> None:
    total = int(lens.sum())
    if total:
        template[np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(total)] = value


def _blank_steps(template: np.ndarray, buf: np.ndarray, c: np.ndarray, k: np.ndarray,
                 begins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The ``"step":N`` of each line (``k``: the positions of ``p":``), blanked as ones."""
    n = len(begins)
    for j, ch in enumerate(_STEP_KEY[:-3]):
        k = k[c[k - len(_STEP_KEY) + 2 + j] == ch]
    start = k + 2
    digits = _rows(buf, start, _DIGITS + 1) - np.uint8(ord("0"))
    dlen = np.argmin(digits <= 9, axis=1)
    after = buf[start + dlen]
    good = (dlen >= 1) & ~((digits[:, 0] == 0) & (dlen > 1)) & ((after == _COMMA) | (after == ord("}")))
    start, dlen, digits = start[good], dlen[good], digits[good]
    _fill_ranges(template, start, dlen, ord("1"))
    value = np.zeros(len(start), np.int64)
    for j in range(int(dlen.max(initial=0))):
        more = j < dlen
        value[more] = value[more] * 10 + digits[more, j]
    line = np.searchsorted(begins, start, side="right") - 1
    count = np.bincount(line, minlength=n)
    steps = np.zeros(n, np.int64)
    steps[line] = value
    return count == 1, np.where(count > 1, -1, steps)  # -1: two steps blanked, the line is the walk's


def template_info(template: bytes | None, use_ordered: bool,
                  uninitialised: Callable[[str], Any] | None) -> tuple[bool, Any, bool, bool, bool, bool]:
    """``(valid, step, unproven, gemm, uninitialised, step blanked)`` of every line with this
    template (the line after its identity, strings and step blanked): valid is what the walk's
    reader accepts (the same JSON reader, :func:`native._check_record`, and every tensor entry by
    :func:`native._entry_ok`); unproven: non-empty outputs of which one rests on weak evidence (what
    the walk counts); step blanked: the record's step is the template's only ``"step"``, a run of
    ones (so a line whose one step :func:`blank` overwrote takes the value it read there)."""
    if template is None:
        return INVALID
    obj = None
    for head, (seq, ident) in zip(_TEMPLATE_HEADS, _PLACEHOLDERS):
        try:
            obj = optrace_format.loads(head + template)
        except optrace_format.JSON_ERRORS:
            return INVALID
        if obj.__class__ is not dict or obj.get(_SEQ).__class__ is not int or obj.get(_SEQ) != seq \
                or obj.get(_ID) != ident:
            return INVALID  # a later seq or id key: the walk reads that one
        if f'"{_SEQ}":'.encode() not in template and f'"{_ID}":'.encode() not in template:
            break
    typ = obj.get("type")
    if (typ is not None and typ != "op") or "op" not in obj:
        return INVALID
    try:
        native._check_record(obj, _NOWHERE, 0)
    except BadInput:
        return INVALID
    ins, outs = obj.get("in", []), obj.get("out", [])
    if ins.__class__ is not list or outs.__class__ is not list:
        return INVALID
    entry_ok = native._entry_ok
    for e in (*ins, *outs):
        if e is not None and not entry_ok(e):
            return INVALID
    step = obj.get("step")
    if step is not None and step >= 1 << 63:
        return INVALID
    strong = all(e is None or (e.get("ev") in (None, "full")
                               and (e.get("h") is not None or (use_ordered and e.get("o") is not None)))
                 for e in outs)
    meta = obj.get("meta")
    gemm = meta.__class__ is dict and meta.get("gemm") is not None
    run = _STEP_RUN.search(template)
    blanked = template.count(b'"step"') == 1 and run is not None and step == int(run.group(1))
    return True, step, bool(outs) and not strong, gemm, bool(uninitialised and uninitialised(obj["op"])), blanked


class Templates:
    """The templates seen so far and what each gives (bounded: cleared when full)."""

    LIMIT = 1 << 14

    def __init__(self, use_ordered: bool, uninitialised: str | None) -> None:
        self.use_ordered = use_ordered
        self.search = re.compile(uninitialised).search if uninitialised else None
        self.seen: dict[bytes | None, tuple] = {}
        self.parsed = 0  # templates parsed, all told

    def columns(self, data: bytearray, cut: int, begins: np.ndarray, ok: np.ndarray, id_end: np.ndarray,
                ends: np.ndarray, max_new: int) -> dict[str, Any] | None:
        """``valid``, ``step``, ``unproven``, ``gemm``, ``uninit`` per line of the block ``data[:cut]``,
        or None when it holds more than ``max_new`` templates not seen before (the caller parses it
        whole)."""
        tpl = np.frombuffer(data, np.uint8).copy()
        located, line_steps = blank(tpl, data, cut, begins)
        starts = id_end + 2  # after the identity's closing quote and its comma
        col = binary(tpl, tpl, starts, ends - starts, ok)
        enc = pc.dictionary_encode(col, null_encoding="encode")
        words = enc.dictionary.to_pylist()
        seen = self.seen
        new = [w for w in words if w not in seen]
        if len(new) > max_new:
            return None
        if len(seen) + len(new) > self.LIMIT:
            seen.clear()
        for w in new:
            seen[w] = template_info(w, self.use_ordered, self.search)
        self.parsed += len(new)
        infos = [seen[w] for w in words]
        idx = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        flags = np.array([(i[0], i[2], i[3], i[4], i[5]) for i in infos], dtype=bool).reshape(-1, 5)[idx]
        tsteps = pa.array([i[1] for i in infos], pa.int64()).take(pa.array(idx))
        no_step = np.asarray(tsteps.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values = np.asarray(tsteps.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        steps = pa.array(np.where(located, line_steps, values), mask=~located & no_step)
        # a line whose one "step" was blanked: valid only if that was the record's step
        valid = flags[:, 0] & (~located | flags[:, 4]) & (line_steps >= 0)
        return {"valid": valid, "step": steps, "unproven": flags[:, 1], "gemm": flags[:, 2], "uninit": flags[:, 3]}
