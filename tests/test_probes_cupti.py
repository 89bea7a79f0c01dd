"""CUPTI collector: the real "cupti missing / no CUDA" path, and its file format.

cupti-python is not installed on the development machine and there is no GPU, so the collecting
path is exercised with a SYNTHETIC stand-in for the ``cupti`` module (clearly named below): it
hands the collector activity objects shaped like cupti-python's (snake_case fields, as in
the type stubs cupti.pyi of the PyPI package cupti-python), so the real buffer, budget and summary code runs.
"""
from __future__ import annotations

import enum
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from probes import cupti as probe_cupti
from probes.config import ProbeConfig
from probes.window import StepWindow, parse_steps


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_missing_cupti_writes_header_unavailable_and_summary(tmp_path, capsys):
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["cupti"], steps="0-1", arm="a1")
    window = StepWindow(parse_steps("0-1"))
    col = probe_cupti.install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    window.advance()
    window.advance()  # leaves the window: summary written
    col.close()
    assert not (tmp_path / "rank0" / "cupti.jsonl").exists()  # never a file the capture counts as CUPTI's
    recs = lines(tmp_path / "rank0" / "no-cupti.jsonl")
    assert recs[0]["event"] == "header" and recs[0]["schema"] == "forensics.cupti" and recs[0]["version"] == 1
    assert recs[0]["rank"] == 0 and isinstance(recs[0]["pid"], int)
    assert recs[1]["event"] == "unavailable" and recs[1]["reason"]
    assert recs[-1]["event"] == "summary" and recs[-1]["dropped"] == 0 and recs[-1]["records"] == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("forensics: CUPTI collection unavailable on rank 0:")
    assert probe_cupti.active() is None
    from parsers import cupti_jsonl

    assert len(cupti_jsonl.read_kernels(tmp_path / "rank0" / "no-cupti.jsonl")) == 0  # readable, just empty
    assert cupti_jsonl.dropped(tmp_path / "rank0" / "no-cupti.jsonl") == 0
    from forensics.capture.directory import classify

    assert classify("no-cupti.jsonl") is None and classify("no-cupti.4242.jsonl") is None


def test_cupti_setup_failure_renames_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(probe_cupti, "cuda_reason", lambda: None)

    class Broken:
        class ActivityKind:
            pass

        def activity_register_callbacks(self, *a):  # noqa: ANN002
            raise RuntimeError("no driver (test)")

    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["cupti"], steps="0")
    window = StepWindow(parse_steps("0"))
    col = probe_cupti.CuptiCollector(cfg, window, tmp_path / "rank0", 0, cupti=Broken())
    window.start()
    col.close()
    assert not (tmp_path / "rank0" / "cupti.jsonl").exists()
    recs = lines(tmp_path / "rank0" / "no-cupti.jsonl")
    assert recs[1]["event"] == "unavailable" and "no driver (test)" in recs[1]["reason"] and recs[-1]["event"] == "summary"


def test_reason_names_what_is_missing():
    cupti, reason = probe_cupti.load_cupti()
    if cupti is not None:
        pytest.skip("cupti-python is installed here")
    assert "cupti-python not importable" in reason


# --------------------------------------------------------------------------- SYNTHETIC stand-in
class _Kind(enum.IntEnum):
    """CUpti_ActivityKind values (cupti_activity.h) for the kinds the collector enables."""

    MEMCPY = 1
    MEMSET = 2
    DRIVER = 4
    RUNTIME = 5
    CONCURRENT_KERNEL = 10
    NAME = 11
    MARKER = 12
    MARKER_DATA = 13
    EXTERNAL_CORRELATION = 39


class SyntheticCupti:
    """SYNTHETIC stand-in for ``cupti.cupti`` (not real CUPTI output): records calls, replays records."""

    ActivityKind = _Kind
    CallbackDomain = SimpleNamespace(DRIVER_API=1, RUNTIME_API=2)
    ExternalCorrelationKind = SimpleNamespace(CUSTOM0=3)  # CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0

    def __init__(self):
        self.enabled, self.calls, self.callbacks = [], [], None

    def activity_enable(self, kind):
        self.enabled.append(kind)

    def activity_disable(self, kind):
        self.calls.append(("disable", kind))

    def activity_register_callbacks(self, requested, completed):
        self.callbacks = (requested, completed)

    def activity_flush_all(self, flag):
        self.calls.append(("flush", flag))

    def activity_push_external_correlation_id(self, kind, ext):
        self.calls.append(("push", kind, ext))

    def activity_pop_external_correlation_id(self, kind):
        self.calls.append(("pop", kind))

    def get_callback_name(self, domain, cbid):
        return {211: "cudaLaunchKernel"}.get(cbid, f"cb{cbid}")


def synthetic_kernel(i: int):
    """SYNTHETIC kernel record with cupti-python's field names (values made up)."""
    return SimpleNamespace(kind=_Kind.CONCURRENT_KERNEL, start=1000 + i, end=2000 + i, correlation_id=i,
                           name="_Z13synthetic_gemmv", grid_x=4, grid_y=1, grid_z=1, block_x=128, block_y=1,
                           block_z=1, device_id=0, stream_id=7)


def test_collecting_path_record_format_budget_and_correlation(tmp_path, monkeypatch):
    monkeypatch.setattr(probe_cupti, "cuda_reason", lambda: None)  # the stand-in needs no GPU
    fake = SyntheticCupti()
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["cupti"], steps="1", max_records=3)
    window = StepWindow(parse_steps("1"))
    col = probe_cupti.CuptiCollector(cfg, window, tmp_path / "rank0", 0, cupti=fake)
    window.start()
    assert probe_cupti.active() is None  # step 0: not collecting yet
    window.advance()
    assert probe_cupti.active() is col and len(fake.enabled) == len(probe_cupti.KIND_NAMES)
    col.push_external_id(7)
    col.pop_external_id()
    requested, completed = fake.callbacks
    assert requested() == (probe_cupti.BUFFER_BYTES, 0)
    runtime = SimpleNamespace(kind=_Kind.RUNTIME, cbid=211, correlation_id=1, start=1, end=2, process_id=9,
                              thread_id=9)
    completed([runtime] + [synthetic_kernel(i) for i in range(4)])  # 5 records, budget 3
    window.advance()  # window exit: flush, disable, summary
    col.close()
    recs = lines(tmp_path / "rank0" / "cupti.jsonl")
    assert [r.get("kind_name") for r in recs[1:4]] == ["RUNTIME", "CONCURRENT_KERNEL", "CONCURRENT_KERNEL"]
    assert recs[1]["api_name"] == "cudaLaunchKernel" and recs[2]["grid_x"] == 4 and recs[2]["kind"] == 10
    assert recs[-1]["event"] == "summary" and recs[-1]["records"] == 3 and recs[-1]["dropped"] == 2
    assert ("push", 3, 7) in fake.calls and ("pop", 3) in fake.calls and ("flush", 1) in fake.calls
    assert probe_cupti.active() is None


def test_parser_reads_the_collector_file(tmp_path, monkeypatch):
    from parsers import cupti_jsonl

    monkeypatch.setattr(probe_cupti, "cuda_reason", lambda: None)
    fake = SyntheticCupti()
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["cupti"], steps="0")
    window = StepWindow(parse_steps("0"))
    col = probe_cupti.CuptiCollector(cfg, window, tmp_path / "rank0", 0, cupti=fake)
    window.start()
    fake.callbacks[1]([synthetic_kernel(i) for i in range(2)])
    col.close()
    df = cupti_jsonl.read_kernels(tmp_path / "rank0" / "cupti.jsonl")
    assert len(df) == 2
