"""Column contracts shared by parsers, analysis and verdicts.

Parsers (``parsers/``) return pandas frames. Each instrument's parser exposes at least one
function that returns a *launch frame*: one row per kernel launch an instrument saw, with the
columns below (extra, instrument-specific columns are kept after them). Missing values are
``pd.NA``/``None``; integer columns use the nullable ``Int64`` dtype.
"""
from __future__ import annotations

import pandas as pd

#: Text columns (``"string"``) keep one Python object per row, shared by every row with the same
#: text (the readers keep one ``str`` per distinct name): 8 bytes a row. pandas' default storage
#: where pyarrow is installed copies each row's text, and a launch frame of a million launches
#: held each ~450-character kernel name twice over (``name``, ``kernel``): 1.5 GB, against 0.25 GB
#: (issue 44, docs/scale.md). Set when frames are first made (this module, ``parsers``); the
#: probes, which run in the user's process, never import pandas.
pd.options.mode.string_storage = "python"


#: Instrument -> family (independence group); derived from the registry, forensics.instruments.

#: Launch frame: one row per kernel launch seen by one instrument.
LAUNCH_COLUMNS: dict[str, str] = {
    "instrument": "string",  # a launch counter of forensics.instruments (cupti | kineto | nsys | ncu | ...)
    "file": "string",  # the file the row came from
    "rank": "Int64",  # filled by the capture loader (None when unknown)
    "arm": "string",  # filled by the capture loader
    "pid": "Int64",
    "kernel": "string",  # canonical key: demangled name (raw name when it does not demangle)
    "mangled": "string",  # mangled symbol when the instrument has it
    "short_name": "string",  # bare function name (nsys shortName, ncu FUNCTION base)
    "start_ns": "Int64",  # GPU start (CUPTI family); None for ncu
    "end_ns": "Int64",
    "launch_ns": "Int64",  # host time of the launching API call, for NVTX attribution
    "correlation_id": "Int64",
    "external_id": "Int64",  # CUPTI external correlation id (our site occurrence id)
    "grid": "string",  # "(x, y, z)"
    "block": "string",  # "(x, y, z)"
    "stream_id": "Int64",
    "device_id": "Int64",
    "site_label": "string",  # attributed site occurrence "SITE#N", or None
}

#: Range frame: NVTX ranges (nsys NVTX_EVENTS, CUPTI MARKER records).
RANGE_COLUMNS: dict[str, str] = {
    "instrument": "string",
    "file": "string",
    "name": "string",  # range message
    "domain": "string",  # NVTX domain name, None for the default domain
    "kind": "string",  # "pushpop" | "startend"
    "start_ns": "Int64",
    "end_ns": "Int64",
    "pid": "Int64",
    "tid": "Int64",
}

#: Matmul-call frame: one row per cuBLASLt/cuBLAS matmul call (see parsers.cublaslt).
#: ``order`` is part of the key: ORDER_ROW and ORDER_COL operands are different problems (defaults filled:
#: an order the log does not print is ORDER_COL).
CALL_KEY_COLUMNS = ["m", "n", "k", "transa", "transb", "a_type", "b_type", "c_type", "d_type",
                    "a_order", "b_order", "c_order", "d_order"]


def empty_frame(columns: dict[str, str]) -> pd.DataFrame:
    """An empty frame with the contract's columns and dtypes."""
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})


def conform(df: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Add missing contract columns, cast to the contract dtypes, put contract columns first.

    Extra columns are kept (unknown fields are never dropped).
    """
    df = df.copy()
    for col, dtype in columns.items():
        if col not in df.columns:
            df[col] = pd.Series([pd.NA] * len(df), dtype=dtype, index=df.index)
        else:
            df[col] = df[col].astype(dtype)
    extra = [c for c in df.columns if c not in columns]
    return df[list(columns) + extra]


def dim3(x, y, z) -> str:
    """Format a CUDA dim3 as ``"(x, y, z)"`` (ncu's spelling), the join key across instruments."""
    return f"({int(x)}, {int(y)}, {int(z)})"
