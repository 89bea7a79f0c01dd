"""CUPTI activity collection (cupti-python) into ``<out_dir>/rank<R>/cupti.jsonl``.

File format: a header line ``{"event":"header","schema":"forensics.cupti","version":1,"rank":R,
"pid":P,...}``, then one line per CUPTI activity record exactly as the project's device campaign
script (``campaign.py``, kept outside the repository) writes them (every public scalar field by
name, ``kind_name``, ``api_name`` for runtime/driver records), then ``{"event":"summary","dropped":N,"records":M}``. Without CUDA or cupti-python the
file holds the header, ``{"event":"unavailable","reason":...}`` and the summary, and one line goes
to stderr; the user's program is never stopped by this probe.

Activity kinds are enabled at window entry and flushed/disabled at window exit (also at exit and
on SIGTERM, through :mod:`probes.activate`). Records past ``max_records`` are counted as dropped,
and so are the records CUPTI itself reports dropped.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

from probes.config import ProbeConfig
from probes.window import StepWindow

SCHEMA = "forensics.cupti"
VERSION = 1
BUFFER_BYTES = 8 * 1024 * 1024
KIND_NAMES = ("CONCURRENT_KERNEL", "RUNTIME", "DRIVER", "EXTERNAL_CORRELATION", "MARKER", "MARKER_DATA",
              "MEMCPY", "MEMSET", "NAME")

#: File stem when CUPTI cannot collect (no CUDA, no cupti-python): the header, the reason and the summary
#: go there, under a name the capture loader does not count as a CUPTI record.
UNAVAILABLE_STEM = "no-cupti"

_active: "CuptiCollector | None" = None


def active() -> "CuptiCollector | None":
    """The collector of this process while it is collecting (for external-correlation push/pop)."""
    return _active if _active is not None and _active.collecting else None


def _record_to_dict(a: Any, cupti: Any) -> dict[str, Any]:
    """Every public scalar attribute of a CUPTI activity record, by name (campaign.py's format)."""
    d: dict[str, Any] = {}
    for name in dir(a):
        if name.startswith("_") or name in ("ptr", "from_buffer", "from_data", "from_ptr"):
            continue
        try:
            v = getattr(a, name)
        except Exception:  # noqa: BLE001
            continue
        if callable(v):
            continue
        if isinstance(v, (int, float, str, bool)) or v is None:
            d[name] = int(v) if hasattr(v, "__index__") and not isinstance(v, bool) else v
    try:
        d["kind_name"] = cupti.ActivityKind(a.kind).name
    except Exception:  # noqa: BLE001
        pass
    if d.get("kind_name") in ("RUNTIME", "DRIVER") and "cbid" in d:
        try:
            dom = cupti.CallbackDomain.DRIVER_API if d["kind_name"] == "DRIVER" else cupti.CallbackDomain.RUNTIME_API
            d["api_name"] = cupti.get_callback_name(dom, d["cbid"])
        except Exception:  # noqa: BLE001
            pass
    return d


def load_cupti() -> tuple[Any, str | None]:
    """(the ``cupti`` module, None) or (None, one-line reason)."""
    try:
        from cupti import cupti  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        return None, f"cupti-python not importable ({type(e).__name__}: {e})"
    return cupti, None


def cuda_reason() -> str | None:
    """None when a CUDA device is usable from torch in this process, else why not."""
    try:
        import torch  # noqa: PLC0415
    except Exception as e:  # noqa: BLE001
        return f"torch not importable ({type(e).__name__})"
    try:
        if not torch.cuda.is_available():
            return "no CUDA device (torch.cuda.is_available() is False)"
    except Exception as e:  # noqa: BLE001
        return f"CUDA check failed ({type(e).__name__}: {e})"
    return None


class CuptiCollector:
    """One CUPTI subscriber per process: enable at window entry, flush at window exit."""

    def __init__(self, cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int, cupti: Any = None,
                 unavailable: str | None = None):
        self.cfg = cfg
        self.window = window
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.pid = os.getpid()
        self.cupti = cupti
        self.unavailable = unavailable
        self.records = 0
        self.dropped = 0
        self.collecting = False
        self.enabled_kinds: list[Any] = []
        self.failed_kinds: list[str] = []
        self.file = None
        self.lock = threading.Lock()
        self.closed = False
        window.on_enter.append(self._enter)
        window.on_exit.append(self._exit)

    # ------------------------------------------------------------------ output
    def _open(self, stem: str = "cupti") -> None:
        if self.file is not None:
            return
        from probes.sites import open_exclusive  # noqa: PLC0415

        self.file = open_exclusive(self.out_dir, stem, ".jsonl")
        header = {"event": "header", "schema": SCHEMA, "version": VERSION, "rank": self.rank, "pid": self.pid,
                  "arm": self.cfg.arm, "steps": self.cfg.steps, "max_records": self.cfg.max_records,
                  "kinds": list(KIND_NAMES), "host": os.uname().nodename}
        self._write(header)

    def _write(self, obj: dict[str, Any]) -> None:
        self.file.write(json.dumps(obj) + "\n")

    # ------------------------------------------------------------------ window
    def _enter(self, step: int) -> None:
        global _active
        if self.unavailable is None:
            self.unavailable = cuda_reason()
        # a CUPTI that cannot collect leaves no-cupti.jsonl: never a file the capture counts as a CUPTI record
        self._open(UNAVAILABLE_STEM if self.unavailable is not None else "cupti")
        if self.unavailable is not None:
            self._write({"event": "unavailable", "reason": self.unavailable})
            self.file.flush()
            sys.stderr.write(f"forensics: CUPTI collection unavailable on rank {self.rank}: {self.unavailable}\n")
            return
        cupti = self.cupti
        try:
            for name in KIND_NAMES:
                kind = getattr(cupti.ActivityKind, name, None)
                if kind is None:
                    self.failed_kinds.append(name)
                    continue
                try:
                    cupti.activity_enable(kind)
                    self.enabled_kinds.append(kind)
                except Exception:  # noqa: BLE001  (listed in the summary line; other kinds go on)
                    self.failed_kinds.append(name)
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        except Exception as e:  # noqa: BLE001
            self.unavailable = f"CUPTI setup failed ({type(e).__name__}: {e})"
            self._write({"event": "unavailable", "reason": self.unavailable})
            sys.stderr.write(f"forensics: CUPTI collection unavailable on rank {self.rank}: {self.unavailable}\n")
            self._rename_unavailable()
            return
        self.collecting = True
        _active = self

    def _exit(self, step: int) -> None:
        self.stop()

    def _rename_unavailable(self) -> None:
        """cupti[.pid].jsonl -> no-cupti[.pid].jsonl once CUPTI turned out unable to collect (never over a file)."""
        path = Path(self.file.name)
        target = path.with_name(UNAVAILABLE_STEM + path.name[len("cupti"):])
        self.file.flush()
        try:
            os.link(path, target)
            os.unlink(path)
        except OSError:
            pass

    # ------------------------------------------------------------------ CUPTI callbacks
    def _buffer_requested(self):  # noqa: ANN202
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities) -> None:  # noqa: ANN001
        with self.lock:
            if self.file is None or self.file.closed:
                self.dropped += len(activities)
                return
            for a in activities:
                if self.records >= self.cfg.max_records:
                    self.dropped += 1
                    continue
                try:
                    self._write(_record_to_dict(a, self.cupti))
                    self.records += 1
                except Exception:  # noqa: BLE001
                    self.dropped += 1

    # ------------------------------------------------------------------ external correlation
    def push_external_id(self, ext_id: int) -> None:
        try:
            self.cupti.activity_push_external_correlation_id(self.cupti.ExternalCorrelationKind.CUSTOM0, ext_id)
        except Exception:  # noqa: BLE001
            pass

    def pop_external_id(self) -> None:
        try:
            self.cupti.activity_pop_external_correlation_id(self.cupti.ExternalCorrelationKind.CUSTOM0)
        except Exception:  # noqa: BLE001
            pass

    # ------------------------------------------------------------------ stop / close
    def _cupti_dropped(self) -> int:
        fn = getattr(self.cupti, "activity_get_num_dropped_records", None)
        if fn is None:
            return 0
        try:
            return int(fn(0, 0))
        except Exception:  # noqa: BLE001
            return 0

    def stop(self) -> None:
        """Flush every CUPTI buffer, disable the kinds, write the summary line. Idempotent."""
        global _active
        if self.closed:
            return
        self.closed = True
        if self.collecting:
            self.collecting = False
            try:
                import torch  # noqa: PLC0415

                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            with contextlib.suppress(Exception):
                self.cupti.activity_flush_all(1)
            for kind in self.enabled_kinds:
                with contextlib.suppress(Exception):
                    self.cupti.activity_disable(kind)
            with contextlib.suppress(Exception):
                self.cupti.activity_flush_all(1)
            self.dropped += self._cupti_dropped()
        if _active is self:
            _active = None
        if self.file is not None:
            with self.lock:
                self._write({"event": "summary", "dropped": self.dropped, "records": self.records,
                             "failed_kinds": self.failed_kinds})
                self.file.flush()

    def close(self) -> None:
        self.stop()
        if self.file is not None and not self.file.closed:
            self.file.close()


def install(cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int) -> CuptiCollector:
    """Entry point used by :func:`probes.activate.activate`; never raises for a missing CUPTI."""
    cupti, reason = load_cupti()
    return CuptiCollector(cfg, window, out_dir, rank, cupti=cupti, unavailable=reason)
