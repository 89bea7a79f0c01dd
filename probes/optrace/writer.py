"""The rank-local trace file: opened at the first flush with records, never overwritten; the
header, the records in bounded batches, the footer. The lines themselves are made by the format's
owner, :mod:`forensics.core.formats.optrace`.

A write that fails (disk full) stops the recording with one message; the program is never broken.
A process stopped by a signal or an uncaught exception gets a footer that says so (``stopped``).
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from forensics.core.environment import relevant_env
from forensics.core.formats import optrace as optrace_format
from forensics.core.formats.optrace import record_line
from probes import forks as _forks
from probes import signals as _signals
from probes.optrace.digest import (
    CHUNK_NAME,
    CPU_SIDES,
    GENERATORS_NAME,
    HASH_NAME_CPU,
    ORDERED_CPU,
    ORDERED_DEVICE,
    _Digest,
    _resolve,
    _xxh3,
)
from probes.optrace.ops import CHUNKED_OPS
from probes.window import world_size

#: events recorded beside the dispatcher's ops (header ``storage_events``; older traces have none)
STORAGE_EVENTS = ["storage.resize_"]
#: the trace file's write buffer: a batch's lines are copied into it and go to the OS in one write
#: at the end of the batch (a buffer allocated once, not a joined copy of every batch)
WRITE_BUFFER = 1 << 20

#: Signals whose Python handlers (SIGTERM: footer; SIGINT: KeyboardInterrupt) must not run in the
#: middle of a batch write: a handler writing to the same buffered file then fails ("reentrant
#: call"), and the trace loses its footer. They are held for the few microseconds of the write.
_DEFERRED_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class _signals_deferred:
    """Block SIGTERM/SIGINT in this thread while a batch is written; delivered right after."""

    def __enter__(self) -> None:
        self.old = None
        try:
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
        except (AttributeError, OSError, ValueError):  # no pthread_sigmask on this platform
            pass

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


class TraceWriting:
    """The tracer's file: header, batches, footer (a part of :class:`probes.optrace.tracer.OpTracer`,
    which holds the state these methods read: the pending records, the lock, the counts)."""

    # ------------------------------------------------------------------ file
    def _ensure_open(self) -> None:
        if self.file is None:
            self.path = self._open(self.out_dir)
            self._write_header()

    def _open(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / optrace_format.FILE_NAME
        try:
            self.file = open(path, "xb", buffering=WRITE_BUFFER)  # never overwrite a capture; UTF-8 JSON lines
        except FileExistsError:  # a second process on this rank (spawned worker): its own file
            path = out_dir / f"trace.{self.pid}.jsonl"
            self.file = open(path, "xb", buffering=WRITE_BUFFER)
        return path

    def _write_header(self) -> None:
        self.file.write(optrace_format.header_line({**self._header_fields(), **self._program_info()}))

    def _header_fields(self) -> dict[str, Any]:
        """The header's fields but ``program``, ``packages`` and ``switches``: the run, the window,
        and the name of each digest's algorithm."""
        command = self.cfg.extra.get("command") if isinstance(self.cfg.extra, dict) else None
        return {
            "rank": self.rank, "world_size": world_size(), "argv": command or list(getattr(sys, "orig_argv", sys.argv)),
            "script_argv": list(sys.argv), "pid": self.pid,
            "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
            "env": relevant_env(), "steps": self.cfg.steps, "ranks": self.cfg.ranks,
            "max_records": self.max_records, "hash": HASH_NAME_CPU,
            "chunks": CHUNK_NAME if self.chunk_digests else None,
            "chunked_ops": sorted(CHUNKED_OPS) if self.chunk_digests else [],
            "ordered": self._ordered_info(),
            "compiled": self.compiled_mode,
            "generators": GENERATORS_NAME,
            "storage_events": STORAGE_EVENTS,
            "evidence": self.evidence,
            "evidence_digests": {"sampled": optrace_format.SAMPLED, "summary": optrace_format.SUMMARY},
            "at": self.granularity,
            "optimizer": self.optimizer_records,
            "views": "recorded" if self.views_recorded else "skipped",
        }

    def _ordered_info(self) -> dict[str, Any]:
        mode = self.ordered_mode
        cpu = ORDERED_CPU if mode != "off" and _xxh3 is not None else None
        return {"mode": mode, "cpu": cpu, "device": ORDERED_DEVICE if mode in ("inputs", "all") else None,
                "outputs": mode == "all", **({"cpu_sides": CPU_SIDES} if cpu else {}),
                **({"note": "xxhash is not installed: CPU tensors carry the order-independent digest only"}
                   if mode != "off" and _xxh3 is None else {})}

    def _program_info(self) -> dict[str, Any]:
        """``program`` (script hash, interpreter, the local files and packages imported so far, git
        commit, local sources), ``packages`` (versions of the packages whose code issued traced ops
        so far; the footer has the complete sets) and ``switches`` (the in-process switches now)."""
        out: dict[str, Any] = {}
        try:
            from probes.optrace_program import program, script_path  # noqa: PLC0415

            iss = self.issuers
            sources = iss.source_hashes(exclude=script_path()) if iss is not None else {}
            out["program"] = program(sources, iss, exclude=(str(self._own_root()),))
            out["packages"] = iss.package_versions() if iss is not None else {}
        except Exception as e:  # noqa: BLE001 - best effort: never break the program
            out["program"] = {"note": f"not recorded: {type(e).__name__}"}
        out["switches"] = self._switches()
        return out

    def _own_root(self) -> Path:
        """The folder this trace is written under (``forensics trace --out DIR``): the tool's own
        output, whose files never count as the program's."""
        return Path(self.cfg.out_dir).resolve()

    @staticmethod
    def _switches() -> dict[str, Any]:
        try:
            from probes.optrace_program import switches  # noqa: PLC0415

            return switches()
        except Exception as e:  # noqa: BLE001 - best effort: never break the program
            return {"note": f"not recorded: {type(e).__name__}"}


    # ------------------------------------------------------------------ flush / close
    def step_ended(self, _step: int = 0) -> None:
        """At a step's end: write the batch; outside the window no op is traced, so a write there
        would go unseen: grown storages are forgotten (never marked on a later step's reads)."""
        self.flush()
        if self.grown and not self._recording():
            self.grown.clear()

    def flush(self) -> None:
        """Resolve the pending digests (one host transfer) and write the batch; never raises."""
        with self.lock:
            if not self.records or self.in_write:
                return
            if self.failed is not None or _forks.foreign(self.pid):
                self.records = []  # failed, or a fork's copy of its parent's batch (the parent writes it)
                return
            with _signals.held():  # a SIGTERM arriving now waits for the batch (probes.signals)
                self.in_write = True
                try:
                    if _Digest.made != _Digest.resolved:
                        with _disable_current_modes():
                            _resolve([rec for rec in self.records if rec.__class__ is dict])
                    lines = [rec if rec.__class__ is bytes else record_line(rec) for rec in self.records]
                    n = len(self.records)
                    self.records = []
                    self._ensure_open()
                    with _signals_deferred():  # a SIGTERM handler never writes into a half-written batch
                        self.file.writelines(lines)  # into the file's buffer (WRITE_BUFFER: no new bytes object)
                        self.file.flush()  # to the OS now: a killed process keeps this batch
                    self.written += n
                    self.last_flush = time.monotonic()
                except Exception as e:  # noqa: BLE001 - disk full, a vanished directory...: stop, never break
                    self._fail(e)
                finally:
                    self.in_write = False

    def _fail(self, error: BaseException) -> None:
        """Stop recording after a failed write; say so once on stderr."""
        if self.failed is not None:
            return
        self.failed = f"{type(error).__name__}: {error}"
        self.records = []
        where = self.path or (self.out_dir / optrace_format.FILE_NAME)
        try:
            sys.stderr.write(f"forensics optrace: rank {self.rank}: writing {where} failed ({self.failed}); "
                             f"tracing stopped after {self.written} records: the trace is partial (no footer). "
                             "The program goes on untraced.\n")
        except Exception:  # noqa: BLE001
            pass

    def _stopped(self) -> str | None:
        """What ended the program early, when something did (a signal, an uncaught exception)."""
        act = sys.modules.get("probes.activate")
        sig = getattr(act, "_state", {}).get("interrupted") if act is not None else None
        if sig:
            try:
                return f"signal {int(sig)} ({signal.Signals(int(sig)).name})"
            except (ValueError, TypeError):
                return f"signal {sig}"
        if self.uncaught:
            return f"uncaught {self.uncaught}"
        return None

    def close(self) -> None:
        """Write the last batch and the footer; a close that interrupts a write (a signal handler
        running in the middle of it) writes the footer only. Never raises."""
        with self.lock:
            if self.closed:
                return
            if _forks.foreign(self.pid):  # a fork's copy of this tracer (its atexit closing it):
                self.closed = True  # the pending batch, the counts and the file are the parent's to write
                self.records = []
                return
            interrupted_write = self.in_write
            if not interrupted_write:
                self.flush()
            self.closed = True
            if not interrupted_write:
                self.leave()
            if self.failed is not None:
                self._close_file()
                return
            if self.file is None and self.seq == 0 and self.dropped == 0:
                return  # nothing traced in this process: no file
            footer = self._footer()
            with _signals.held():  # a SIGTERM during the footer's write waits for its end
                try:
                    self._ensure_open()
                    self.file.write(optrace_format.footer_line(footer))
                    self.file.flush()
                except Exception as e:  # noqa: BLE001
                    self._fail(e)
                self._close_file()

    def _close_file(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except Exception:  # noqa: BLE001
                pass


    def _footer(self) -> dict[str, Any]:
        """The footer's fields: records written and dropped, the last step, the seeds, what stopped
        the program, torch.compile's graphs, and the complete sets of packages, sources and imported
        files (the header has those seen when it was written) and the switches as the run left them."""
        footer: dict[str, Any] = {"records": self.written, "dropped": self.dropped,
                                  "last_step": self.window.step,
                                  "seeds": {"torch_initial_seed": _initial_seed(),
                                            "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")},
                                  "stopped": self._stopped(),
                                  "compiled_graphs": _compiled_graphs()}
        if self.seq > self.written:
            footer["unwritten"] = self.seq - self.written  # recorded but lost with the interrupted write
        try:
            if self.issuers is not None:
                from probes.optrace_program import script_path  # noqa: PLC0415

                footer["packages"] = self.issuers.package_versions()
                footer["sources"] = self.issuers.source_hashes(exclude=script_path())
                script = script_path()
                footer["imported"] = self.issuers.imported(exclude=(script,) if script else (),
                                                           exclude_dirs=(str(self._own_root()),))
        except Exception:  # noqa: BLE001
            pass
        footer["switches"] = self._switches()
        return footer


def _compiled_graphs() -> int | None:
    """Graphs torch.compile compiled in this process (None: dynamo never loaded, so none)."""
    if "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo.utils import counters  # noqa: PLC0415

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - private API
        return None


def _initial_seed() -> int | None:
    try:
        return int(torch.initial_seed())
    except Exception:  # noqa: BLE001
        return None


