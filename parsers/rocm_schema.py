"""How AMD's structured outputs are told apart by content, stated once (no pandas: the instrument registry
imports it to recognise files; the readers import it to check what they open).

* rocprofv3's JSON output: an object whose first key is ``rocprofiler-sdk-tool`` (generateJSON.cpp).
* rocprofv3's rocpd SQLite database: ``rocpd_kernel_dispatch`` and ``rocpd_info_kernel_symbol``, as views
  or as tables named with the session's uuid (``rocpd_tables.sql``, ``rocpd_views.sql``).
* rocmProfileData's ``.rpd``: ``rocpd_op``, ``rocpd_api``, ``rocpd_api_ops``, ``rocpd_kernelapi`` and
  ``rocpd_string`` (no uuid; the two schemas share only the ``rocpd_`` prefix and ``rocpd_string``).
"""
from __future__ import annotations

import re
from collections.abc import Iterable

JSON_TOP = "rocprofiler-sdk-tool"
ROCPD_DISPATCH = "rocpd_kernel_dispatch"
ROCPD_SYMBOL = "rocpd_info_kernel_symbol"
ROCPD_INFO = ("rocpd_info_process", "rocpd_info_thread", "rocpd_info_agent", "rocpd_event")
RPD_TABLES = ("rocpd_op", "rocpd_api", "rocpd_api_ops", "rocpd_kernelapi", "rocpd_string")
_UUID_SUFFIX = re.compile(r"_[0-9A-Fa-f_]+")


def rocpd_base(name: str) -> str:
    """A rocpd table's name without its uuid suffix (``rocpd_kernel_dispatch_00ab_...`` -> ``rocpd_kernel_dispatch``)."""
    for base in (ROCPD_DISPATCH, ROCPD_SYMBOL, *ROCPD_INFO):
        if name == base or (name.startswith(base + "_") and _UUID_SUFFIX.fullmatch(name[len(base):])):
            return base
    return name


def is_rocpd(names: Iterable[str]) -> bool:
    bases = {rocpd_base(t) for t in names}
    return ROCPD_DISPATCH in bases and ROCPD_SYMBOL in bases


def is_rpd(names: Iterable[str]) -> bool:
    have = set(names)
    return all(t in have for t in RPD_TABLES)
