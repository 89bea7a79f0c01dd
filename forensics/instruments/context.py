"""Context files of a capture: read by the stages, never counted (site records, op traces, the
captured environment, the CPU probe's status)."""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import CONTEXT, Instrument


def read_sites(path: Any) -> Any:
    from parsers.sites_jsonl import read_sites as read  # heavy: pandas, only when a file is read

    return read(path)


SITES = Instrument("sites", CONTEXT, ("sites*.jsonl",), reader=read_sites,
                   label="site probe records (NVTX/CUPTI external ids, digests)")
OPTRACE = Instrument("optrace", CONTEXT, ("trace*.jsonl", "rank_*.jsonl"), label="op trace")
ENVIRONMENT = Instrument("environment", CONTEXT, ("environment.json",), label="captured environment")
CPUPROBE = Instrument("cpuprobe", CONTEXT, ("cpuprobe*.jsonl",),
                      label="CPU probe status (instruments on, files, losses)")

INSTRUMENTS = (SITES, OPTRACE, ENVIRONMENT, CPUPROBE)
