"""One JSON document read as a stream: the items of one top-level array, one at a time, and every
other top-level value (issue 44: a Chrome/Kineto trace's ``traceEvents`` are not held as text).

Values are decoded by the standard library's own scanner (``json.JSONDecoder().scan_once``, C),
one array item at a time, over a window of the decoded text that a bounded stream
(:func:`forensics.runtime.inputs.open_stream`) refills: every value is what ``json.loads`` of the
whole text gives (floats, ``NaN``, duplicate keys: the last wins, invalid UTF-8 replaced), and a
syntax error is ``json.loads``'s own message, line and column, worded by the same rule as
:func:`forensics.runtime.inputs.json_error` (truncated / trailing data / malformed). Memory: the
window (a chunk, or one item when an item is longer) and the item being decoded.
"""
from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator
from typing import Any

from forensics.core.errors import BadInput

#: Bytes read from the stream per refill (tests set it small to cut items at every offset).
CHUNK = 4 << 20
#: An error this many characters before the window's end cannot come from the cut (the longest
#: token the scanner misreads when cut is ``-Infinity`` or a ``\\uXXXX`` escape); nearer, read on.
_MARGIN = 64
_WS = re.compile(r"[ \t\n\r]*").match
_DECODER = json.JSONDecoder()
_SCAN = _DECODER.scan_once
_STRING = json.decoder.scanstring


def _probe(text: str, comma: int) -> tuple[str | None, bool]:
    """How this Python's ``json`` words a trailing comma (3.13 added its own message, at the comma)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        return (e.msg, True) if e.pos == comma else (None, False)
    return None, False


_TRAILING_OBJECT = _probe('{"a": 1,}', 7)
_TRAILING_ARRAY = _probe("[1,]", 2)


class JsonStream:
    """``items()`` yields ``(index, value)`` for each item of the top-level array (the document
    itself when it is an array, else its ``key`` member), ``(None, None)`` when a second such
    array starts (``json.loads`` keeps the last of duplicate keys: the reader starts over);
    afterwards ``meta`` holds the other top-level members in ``json.loads``'s order, ``form`` is
    ``"list"``, ``"object"`` (with a ``key`` array) or ``None`` (no such array)."""

    def __init__(self, raw, path, key: str = "traceEvents", chunk: int | None = None) -> None:  # noqa: ANN001
        self.raw, self.path, self.key = raw, path, key
        self.chunk = chunk or CHUNK
        self._dec = codecs.getincrementaldecoder("utf-8")("replace")
        self.buf, self.pos, self.eof = "", 0, False
        self._dropped = 0  # characters before buf[0]
        self._lines = 0  # newlines before buf[0]
        self._last_nl = -1  # position of the last newline before buf[0]
        self.meta: dict[str, Any] = {}
        self.form: str | None = None
        self.blank = False  # the document is whitespace only

    # ------------------------------------------------------------------ the window
    def _fill(self, n: int | None = None) -> bool:
        """Drop what was read and append more text (at least ``n`` bytes' worth); False at the
        end, the window then untouched."""
        text = ""
        while not text and not self.eof:
            data = self.raw.read(max(n or 0, self.chunk))
            text = self._dec.decode(data, final=not data)
            self.eof = not data
        if not text:
            return False
        if self.pos:
            buf, pos = self.buf, self.pos
            nl = buf.count("\n", 0, pos)
            if nl:
                self._lines += nl
                self._last_nl = self._dropped + buf.rfind("\n", 0, pos)
            self._dropped += pos
            self.buf, self.pos = buf[pos:], 0
        self.buf += text
        return True

    def _peek(self) -> str:
        while self.pos >= len(self.buf):
            if not self._fill():
                return ""
        return self.buf[self.pos]

    def _ws(self) -> None:
        while True:
            self.pos = _WS(self.buf, self.pos).end()
            if self.pos < len(self.buf) or not self._fill():
                return

    def _rest_blank(self, at: int) -> bool:
        """Whether the text from ``at`` to the end is whitespace (``str.isspace``), reading on."""
        if self.buf[at:].strip():
            return False
        self.pos = len(self.buf)
        while self._fill():
            if self.buf.strip():
                return False
            self.pos = len(self.buf)
        return True

    def fail(self, msg: str, at: int) -> None:
        """BadInput for ``json.loads``'s error ``msg`` at window position ``at``: its line and column."""
        buf = self.buf
        line = self._lines + buf.count("\n", 0, at) + 1
        nl = buf.rfind("\n", 0, at)
        col = at - nl if nl >= 0 else self._dropped + at - self._last_nl
        if msg == "Extra data":
            text = f"trailing data after the JSON value (column {col})"
        elif msg.startswith("Unterminated string") or self._rest_blank(at):
            text = f"truncated JSON: {msg} (column {col})"
        else:
            text = f"malformed JSON: {msg} (column {col})"
        raise BadInput(self.path, text, line)

    # ------------------------------------------------------------------ values
    def _value(self) -> Any:
        while True:
            buf, pos = self.buf, self.pos
            try:
                obj, end = _SCAN(buf, pos)
            except StopIteration as e:
                msg, at = "Expecting value", e.value
            except json.JSONDecodeError as e:
                msg, at = e.msg, e.pos
            else:
                if self.eof or end + _MARGIN <= len(buf) or not isinstance(obj, (int, float)):
                    self.pos = end
                    return obj
                self._fill(len(buf) - pos)  # a number may go on in the next chunk ("1." + "5")
                continue
            if self.eof or (at + _MARGIN < len(buf) and not msg.startswith("Unterminated string")):
                self.fail(msg, at)
            self._fill(len(buf) - pos)  # cut by the window's end: read on (doubling), decode again

    def _key(self) -> str:
        while True:
            buf, pos = self.buf, self.pos
            try:
                key, end = _STRING(buf, pos + 1)
            except json.JSONDecodeError as e:
                if self.eof or (e.pos + _MARGIN < len(buf) and not e.msg.startswith("Unterminated string")):
                    self.fail(e.msg, e.pos)
                self._fill(len(buf) - pos)
                continue
            self.pos = end
            return key

    def _after_comma(self, close: str, trailing: tuple[str | None, bool]) -> str:
        """Past the ``,`` at ``pos`` and the whitespace after it (the comma kept in the window
        while reading on: this Python may name it); the next character."""
        while True:
            j = _WS(self.buf, self.pos + 1).end()
            if j < len(self.buf) or not self._fill():
                break
        c = self.buf[j] if j < len(self.buf) else ""
        if c == close and trailing[1]:
            self.fail(trailing[0], self.pos)
        self.pos = j
        return c

    # ------------------------------------------------------------------ the document
    def items(self) -> Iterator[tuple[int | None, Any]]:
        while not self.buf and self._fill():
            pass
        if self.buf.startswith("\ufeff"):
            self.fail("Unexpected UTF-8 BOM (decode using utf-8-sig)", 0)
        self._ws()
        c = self._peek()
        self.blank = not c
        if c == "[":
            self.pos += 1
            self.form = "list"
            yield from self._array()
        elif c == "{":
            yield from self._object()
        else:
            self._value()
        self._ws()
        if self.pos < len(self.buf):
            self.fail("Extra data", self.pos)

    def _object(self) -> Iterator[tuple[int | None, Any]]:
        self.pos += 1
        self._ws()
        c = self._peek()
        if c == "}":
            self.pos += 1
            return
        while True:
            if c != '"':
                self.fail("Expecting property name enclosed in double quotes", self.pos)
            key = self._key()
            self._ws()
            if self._peek() != ":":
                self.fail("Expecting ':' delimiter", self.pos)
            self.pos += 1
            self._ws()
            if key == self.key and self._peek() == "[":
                self.pos += 1
                if self.form == "object":
                    yield None, None
                self.form = "object"
                yield from self._array()
            else:
                value = self._value()
                if key == self.key:
                    self.form = None
                else:
                    self.meta[key] = value
            self._ws()
            c = self._peek()
            if c == "}":
                self.pos += 1
                return
            if c != ",":
                self.fail("Expecting ',' delimiter", self.pos)
            c = self._after_comma("}", _TRAILING_OBJECT)

    def _array(self) -> Iterator[tuple[int | None, Any]]:
        """The items of the array whose ``[`` was just read."""
        self._ws()
        if self._peek() == "]":
            self.pos += 1
            return
        i = 0
        scan, ws = _SCAN, _WS
        while True:
            buf, pos = self.buf, self.pos
            try:  # the fast path: an item and what follows it inside the window
                obj, end = scan(buf, pos)
            except (StopIteration, json.JSONDecodeError):
                obj = self._value()
            else:
                if end + _MARGIN <= len(buf) or not isinstance(obj, (int, float)):
                    self.pos = end
                else:
                    obj = self._value()
            yield i, obj
            i += 1
            buf = self.buf
            self.pos = pos = ws(buf, self.pos).end()
            if pos >= len(buf):
                self._ws()
                buf, pos = self.buf, self.pos
            c = buf[pos] if pos < len(buf) else ""
            if c == ",":
                self.pos = ws(buf, pos + 1).end()
                if self.pos >= len(buf) or (_TRAILING_ARRAY[1] and buf[self.pos] == "]"):
                    self.pos = pos
                    self._after_comma("]", _TRAILING_ARRAY)
                continue
            if c == "]":
                self.pos = pos + 1
                return
            self.fail("Expecting ',' delimiter", pos)
