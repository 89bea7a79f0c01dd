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
    """Columns of the rows added so far (``len`` = rows)."""

    __slots__ = ("cols", "n", "_text")

    def __init__(self) -> None:
        self.cols: dict[str, array | list] = {}
        self.n = 0
        self._text: dict[str, str] = {}

    def __len__(self) -> int:
        return self.n

    def add(self, row: dict[str, Any]) -> None:
        cols, n, text = self.cols, self.n, self._text
        if n == 0 or row.keys() != cols.keys():
            for k in row:
                if k not in cols:  # a column first seen now: the rows before had none
                    cols[k] = [None] * n
            for k, col in cols.items():
                if k not in row:
                    row[k] = None
        for k, v in row.items():
            col = cols[k]
            if type(v) is int and type(col) is array:
                try:
                    col.append(v)
                    continue
                except OverflowError:
                    col = cols[k] = col.tolist()
            elif type(col) is array:
                col = cols[k] = col.tolist()
            elif type(v) is int and n == 0:
                col = cols[k] = array("q")
                try:
                    col.append(v)
                    continue
                except OverflowError:
                    col = cols[k] = []
            if type(v) is str:
                v = text.setdefault(v, v)
            col.append(v)
        self.n = n + 1

    def frame(self, schema: dict[str, str]) -> pd.DataFrame:
        """The frame: ``schema``'s columns first, in its order and dtypes (a missing one all NA),
        then the others in the order first seen. The columns are released as they are built."""
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
