"""Rows kept as columns (issue 44): what the streamed readers (rocprofv3 CSV and JSON) hold instead of a
list of per-row dicts.

:class:`Columns` takes one row (a dict) at a time and keeps each field in its column: integers in an
``array('q')`` (8 bytes a row) until a value that is not an int64 turns that column into a list;
text shared, one ``str`` object per distinct value (8 bytes a row in an object column). The row dict
is dropped by the caller. :meth:`Columns.frame` builds the frame once, each column cast straight
to the contract dtype (what ``forensics.core.model.conform`` gives from a frame of those rows,
without its whole copy), the other columns as pandas infers them from the values.
"""
from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pandas as pd


class Columns:
    """Columns of the rows added so far (``len`` = rows). Rows wait in a small batch (:data:`BATCH`
    dicts) that is turned into columns at C speed (``zip``, ``array.extend``)."""

    __slots__ = ("cols", "n", "_text", "_batch")

    #: Rows held as dicts at most before they become columns.
    BATCH = 4096

    def __init__(self) -> None:
        self.cols: dict[str, array | list] = {}
        self.n = 0
        self._text: dict[str, str] = {}
        self._batch: list[dict[str, Any]] = []

    def __len__(self) -> int:
        return self.n + len(self._batch)

    def add(self, row: dict[str, Any]) -> None:
        self._batch.append(row)
        if len(self._batch) >= self.BATCH:
            self._flush()

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        keys = tuple(batch[0])
        if any(tuple(r) != keys for r in batch):  # rows of other shapes: one at a time
            for r in batch:
                self._columns(tuple(r), [(v,) for v in r.values()])
            return
        self._columns(keys, list(zip(*(r.values() for r in batch))))

    def _columns(self, keys: tuple[str, ...], values: list[tuple]) -> None:
        cols, n, text = self.cols, self.n, self._text
        for k in cols:
            if k not in keys:  # a column these rows lack: None
                keys, values = (*keys, k), [*values, (None,) * len(values[0])]
        for k, t in zip(keys, values):
            col = cols.get(k)
            if col is None:
                if n == 0:
                    try:
                        cols[k] = array("q", t) if all(type(v) is int for v in t) else None
                    except OverflowError:
                        cols[k] = None
                    if cols[k] is not None:
                        continue
                col = cols[k] = [None] * n
            elif type(col) is array:
                if all(type(v) is int for v in t):
                    before = len(col)
                    try:
                        col.extend(t)
                        continue
                    except OverflowError:
                        del col[before:]
                col = cols[k] = col.tolist()
            col.extend([text.setdefault(v, v) if type(v) is str else v for v in t])
        self.n = n + len(values[0])

    def frame(self, schema: dict[str, str]) -> pd.DataFrame:
        """The frame: ``schema``'s columns first, in its order and dtypes (a missing one all NA),
        then the others in the order first seen. The columns are released as they are built."""
        self._flush()
        n, cols = self.n, self.cols
        out: dict[str, Any] = {}
        for name in [*schema, *(c for c in cols if c not in schema)]:
            col = cols.pop(name, None)
            dtype = schema.get(name)
            if col is None:
                out[name] = pd.array([pd.NA] * n, dtype=dtype)
                continue
            values = np.frombuffer(col, dtype=np.int64) if type(col) is array else col
            if dtype is None:
                out[name] = pd.Series(values).array if type(col) is array else pd.Series(col).array
            elif type(col) is array and dtype == "Int64":
                out[name] = pd.arrays.IntegerArray(values.copy(), np.zeros(n, dtype=bool))
            else:  # straight to the contract dtype: no inferred array (pyarrow text) in between
                out[name] = pd.array(values, dtype=dtype)
            del col, values
        self.n, self._text = 0, {}
        return pd.DataFrame(out, copy=False)


def conform_columns(df: pd.DataFrame, schema: dict[str, str]) -> pd.DataFrame:
    """What ``forensics.core.model.conform`` gives (the contract's columns first, in its dtypes, a
    missing one all NA, then the others), without its copy of the whole frame first: a column is
    cast only when its dtype differs."""
    out: dict[str, Any] = {}
    for col, dtype in schema.items():
        if col not in df.columns:
            out[col] = pd.array([pd.NA] * len(df), dtype=dtype)
        else:
            values = df[col]
            out[col] = values.array if str(values.dtype) == dtype else values.astype(dtype).array
    for col in df.columns:
        if col not in schema:
            out[col] = df[col].array
    frame = pd.DataFrame(out, index=df.index, copy=False)
    frame.attrs = dict(df.attrs)
    return frame
