"""Kill tests (issue 15): a traced two-rank torchrun job (gloo, CPU) stopped mid-run by SIGTERM
(sent to `forensics trace`, which passes it on) and by SIGKILL (every process of the job at once,
as a scheduler or the OOM killer does). The traces stay readable, say they are partial, and are
diffed up to where they stop; no process of the job outlives the test.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (hasattr(torch, "hash_tensor") and dist.is_available() and dist.is_gloo_available()):
    pytest.skip("needs torch.hash_tensor and the gloo backend", allow_module_level=True)

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import CONTROL_FLOW, diff_paths, format_report  # noqa: E402
from forensics.tracediff.traces.native import read_footer, stream_end_of  # noqa: E402
from tests.test_trace_command import alive, descendants, env, wait_for  # noqa: E402

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "optrace_long_ddp.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def job(ready: Path, steps: int | None = None) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
            "--master-port", str(free_port()), str(SCRIPT), "--ready", str(ready), "--ready-after", "40"]
    return argv + (["--steps", str(steps)] if steps else [])


def start(out: Path, ready: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "forensics", "trace", "--out", str(out), "--", *job(ready)],
                            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_ready(ready: Path) -> None:
    for rank in (0, 1):
        wait_for(Path(f"{ready}.{rank}"), timeout=120)
    time.sleep(0.3)  # a few more steps, so the stop lands mid-step


def cleanup(proc: subprocess.Popen, below: set[int]) -> None:
    for p in alive(below | descendants(proc.pid)):
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The same job run to its end: complete traces to diff the stopped ones against.

    600 steps: far past where a stop lands (about 0.3 s after step 40). With 60, a stop delayed by
    a loaded machine landed after the reference's last step, and the diff rightly reported the
    stopped run's extra steps as control flow (the reference's program had ended there).
    """
    base = tmp_path_factory.mktemp("kill_ref")
    code, out = trace_command(job(base / "ready", steps=600), base / "ref")
    assert code == 0
    return out


@pytest.fixture(scope="module")
def terminated(tmp_path_factory) -> tuple[Path, int, str, set[int]]:
    base = tmp_path_factory.mktemp("kill_term")
    proc = start(base / "run", base / "ready")
    below: set[int] = set()
    try:
        wait_ready(base / "ready")
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=120)
        left = alive(below)
    finally:
        cleanup(proc, below)
    return base / "run", proc.returncode, stdout, left


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> tuple[Path, set[int]]:
    base = tmp_path_factory.mktemp("kill_9")
    proc = start(base / "run", base / "ready")
    below: set[int] = set()
    try:
        wait_ready(base / "ready")
        below = descendants(proc.pid) | {proc.pid}
        for p in below:  # the whole job at once, like a cgroup kill
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while alive(below) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = alive(below)
    finally:
        cleanup(proc, below)
    return base / "run", left


def _records(run: Path, rank: int) -> int:
    return stream_end_of(run / f"rank{rank}" / "trace.jsonl").records


def test_sigterm_stops_every_rank_and_each_trace_says_it_was_interrupted(terminated):
    run, code, stdout, left = terminated
    assert code == 128 + signal.SIGTERM and not left
    for rank in (0, 1):
        f = run / f"rank{rank}" / "trace.jsonl"
        assert read_footer(f)["stopped"] == "signal 15 (SIGTERM)"
        end = stream_end_of(f)
        assert end.partial and end.how == "interrupted" and end.records > 500
        assert f"{f}: interrupted (signal 15 (SIGTERM)) at record {end.records}: partial" in stdout


def test_sigterm_traces_are_diffed_up_to_where_they_stop(reference, terminated):
    run = terminated[0]
    rep = diff_paths(reference, run)
    assert all(rep.ranks[r].records_compared < _records(reference, r) for r in (0, 1)), "stopped after the reference's end"
    assert not rep.diverged and rep.pattern == "none"
    for rank in (0, 1):
        res = rep.ranks[rank]
        assert res.partial_b.startswith("interrupted (signal 15 (SIGTERM))")
        assert res.records_compared == stream_end_of(run / f"rank{rank}" / "trace.jsonl").records
        assert all(d is None or d.verdict != CONTROL_FLOW for d in [res.first_divergence])
    text = format_report(rep)
    assert "B is partial: interrupted" in text and "CONTROL_FLOW" not in text


def test_sigkill_leaves_readable_traces_marked_truncated(killed):
    run, left = killed
    assert not left
    for rank in (0, 1):
        f = run / f"rank{rank}" / "trace.jsonl"
        assert read_footer(f) is None
        end = stream_end_of(f)
        assert end.partial and end.how == "truncated" and end.records > 500
        assert end.reason.startswith(f"truncated at record {end.records} (no footer): partial")


def test_sigkill_traces_are_diffed_up_to_where_they_stop(reference, killed, terminated):
    run = killed[0]
    rep = diff_paths(reference, run)
    assert all(rep.ranks[r].records_compared < _records(reference, r) for r in (0, 1)), "stopped after the reference's end"
    assert not rep.diverged
    for rank in (0, 1):
        res = rep.ranks[rank]
        assert res.partial_b.startswith("truncated at record")
        assert res.records_compared == stream_end_of(run / f"rank{rank}" / "trace.jsonl").records
    both = diff_paths(terminated[0], run)  # two partial traces: compared up to the shorter
    assert not both.diverged and all(r.partial_a and r.partial_b for r in both.ranks.values())
