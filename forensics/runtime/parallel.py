"""Rank groups in worker processes: the one place forensics starts a process pool.

Python's :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start method (no fork
of a process that may hold threads: pyarrow's, rich's), one task per group of ranks, results
returned in task order, progress on stderr (:mod:`forensics.runtime.progress`). A
:class:`~forensics.core.errors.ForensicsError` raised in a worker (bad input naming a file and line)
is raised again here as the same one-line error; any other exception is an internal error whose
worker traceback is kept as its cause.

Past one machine the same tasks go to a Dask cluster (:func:`run_on_dask`, the optional ``dask``
extra): given a scheduler's address (``tcp://host:8786``, as ``DASK_SCHEDULER_ADDRESS`` holds it) or
its scheduler file (the JSON ``dask scheduler --scheduler-file`` writes), as NVIDIA's nsys recipes
take them. The workers must see the input paths (a shared file system) and import forensics.
"""
from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput, ForensicsError


def available_cores() -> int:
    """Cores this process may run on (affinity and cgroup CPU sets respected where the OS says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def workers_for(tasks: int, jobs: int | None) -> int:
    """Worker processes for ``tasks`` tasks: ``jobs`` (None or <= 0: one per core), at most one per task."""
    return max(1, min(tasks, available_cores() if jobs is None or jobs <= 0 else jobs))


@dataclass
class _Failure:
    """A ForensicsError raised in a worker, in a form that always crosses the process boundary."""

    name: str
    text: str
    path: str | None
    message: str | None
    line: int | None

    def raise_again(self) -> None:
        if self.name == "BadInput" and self.path is not None and self.message is not None:
            raise BadInput(self.path, self.message, self.line)
        from forensics.core import errors  # noqa: PLC0415

        cls = getattr(errors, self.name, None)
        if isinstance(cls, type) and issubclass(cls, ForensicsError) and cls is not BadInput:
            raise cls(self.text)
        raise BadInput("worker", self.text)


def _call(fn: Callable[..., Any], args: tuple) -> Any:
    try:
        return fn(*args)
    except ForensicsError as e:
        return _Failure(type(e).__name__, str(e), getattr(e, "path", None), getattr(e, "message", None),
                        getattr(e, "line", None))


def run_groups(fn: Callable[..., Any], tasks: Sequence[tuple], sizes: Sequence[int], jobs: int, what: str,
               unit: str = "ranks", progress: bool = True, scheduler: str | None = None) -> list[Any]:
    """``[fn(*task) for task in tasks]`` in ``jobs`` worker processes (``fn`` importable at module
    level); ``sizes`` (ranks per task) drive the progress line. Results in task order.
    ``scheduler``: a Dask scheduler's address or file instead: the tasks run on its workers."""
    from forensics.runtime.progress import Progress  # noqa: PLC0415

    if scheduler:
        return run_on_dask(fn, tasks, sizes, scheduler, what, unit=unit, progress=progress)

    results: list[Any] = [None] * len(tasks)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool, \
            Progress(what, total=sum(sizes), unit=unit, every=10.0 if progress else float("inf")) as bar:
        futures = {pool.submit(_call, fn, task): i for i, task in enumerate(tasks)}
        try:
            for fut in as_completed(futures):
                i = futures[fut]
                out = fut.result()
                if isinstance(out, _Failure):
                    out.raise_again()
                results[i] = out
                bar.advance(sizes[i])
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
    return results


#: How long a Dask client waits for its scheduler before the command gives up (exit 4).
CONNECT_TIMEOUT = "30s"


def dask_client(scheduler: str) -> Any:
    """A ``dask.distributed.Client`` of the cluster ``scheduler`` names: an existing file is a
    scheduler file, anything else an address. Unavailable (exit 4) without dask or when the
    scheduler cannot be reached; BadInput (exit 3) for a scheduler file that is not one."""
    from forensics.core.errors import Unavailable  # noqa: PLC0415

    try:
        from dask.distributed import Client  # noqa: PLC0415 (the optional dask extra, only when asked)
    except ImportError as e:
        raise Unavailable(f"--scheduler {scheduler}: dask.distributed is not installed ({e}); install the "
                          "extra: pip install -e '.[dask]'") from e
    path = Path(scheduler)
    try:
        if path.is_file():
            import json  # noqa: PLC0415

            try:
                json.loads(path.read_text(encoding="utf-8"))["address"]
            except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
                raise BadInput(path, "not a Dask scheduler file (a JSON object with an 'address', as "
                                     "`dask scheduler --scheduler-file F` writes it)") from e
            return Client(scheduler_file=str(path), timeout=CONNECT_TIMEOUT)
        return Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as e:
        raise Unavailable(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({type(e).__name__}: {e})") from e


def run_on_dask(fn: Callable[..., Any], tasks: Sequence[tuple], sizes: Sequence[int], scheduler: str | Any,
                what: str, unit: str = "ranks", progress: bool = True) -> list[Any]:
    """``[fn(*task) for task in tasks]`` on a Dask cluster (``scheduler``: its address, its scheduler
    file, or a ``Client``), one future per task; results in task order, errors as :func:`run_groups`."""
    from forensics.runtime.progress import Progress  # noqa: PLC0415

    own = isinstance(scheduler, str)
    client = dask_client(scheduler) if own else scheduler
    try:
        from dask.distributed import as_completed as dask_completed  # noqa: PLC0415

        results: list[Any] = [None] * len(tasks)
        with Progress(what, total=sum(sizes), unit=unit, every=10.0 if progress else float("inf")) as bar:
            futures = [client.submit(_call, fn, task, pure=False) for task in tasks]
            index = {f.key: i for i, f in enumerate(futures)}
            try:
                for fut in dask_completed(futures):
                    i = index[fut.key]
                    out = fut.result()
                    if isinstance(out, _Failure):
                        out.raise_again()
                    results[i] = out
                    bar.advance(sizes[i])
            except BaseException:
                client.cancel(futures)
                raise
        return results
    finally:
        if own:
            client.close()


def rank_span(ranks: Sequence[int | None]) -> str:
    """Ranks as a short text: ``0-255`` when contiguous, else the first 16 and ``...``; None skipped."""
    known = sorted(r for r in ranks if r is not None)
    if not known:
        return "none"
    if len(known) > 1 and known[-1] - known[0] + 1 == len(known):
        return f"{known[0]}-{known[-1]}"
    return ",".join(map(str, known[:16])) + (" ..." if len(known) > 16 else "")


def shard_outputs(where: os.PathLike[str] | str, patterns: Sequence[str], what: str, hint: str) -> list[Path]:
    """The files shards wrote: ``where`` itself when a file, else every match of ``patterns`` in
    the folder (then its subfolders), sorted; BadInput when there is none (``hint``: how to make one)."""
    where = Path(where)
    if where.is_file():
        return [where]
    if not where.is_dir():
        raise BadInput(where, f"no such shard folder or {what}")
    found = [f for pattern in patterns for f in sorted(where.glob(pattern))]
    if not found:
        raise BadInput(where, f"no {what} here nor in its folders: nothing to merge ({hint})")
    return found
