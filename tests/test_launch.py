"""forensics.runtime.launch, the one way a user's command is run under the probes, on real processes:
the child dies with its parent (even a SIGKILLed one), a SIGINT sent to the parent reaches the child,
a timeout kills it, and the exit status reads as a shell's."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from forensics.runtime.launch import Ended, exit_code, launch

pytestmark = pytest.mark.slow  # integration lane: real processes (4 s on 2 cores)
REPO = Path(__file__).resolve().parents[1]

#: The child: writes its pid, then waits; on SIGINT/SIGTERM it writes which one it got and exits 0.
CHILD = """
import os, signal, sys, time
out = sys.argv[1]
def got(signum, frame):
    open(out + ".got", "w").write(signal.Signals(signum).name)
    sys.exit(0)
signal.signal(signal.SIGINT, got)
signal.signal(signal.SIGTERM, got)
open(out + ".tmp", "w").write(str(os.getpid()))
os.replace(out + ".tmp", out)
time.sleep(120)
"""

#: The parent: launch()es the child and writes how it ended as JSON.
PARENT = """
import json, sys
from forensics.runtime.launch import launch
ended = launch([sys.executable, "-c", sys.argv[1], sys.argv[2]], who="parent", what="the child")
open(sys.argv[2] + ".ended", "w").write(json.dumps({"returncode": ended.returncode, "received": ended.received,
                                                    "status": ended.status}))
"""


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _wait_for(path: Path, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.02)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _start_parent(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    pidfile = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD, str(pidfile)], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)  # no terminal: a SIGINT reaches the parent alone
    _wait_for(pidfile)
    return parent, pidfile


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_child_is_stopped_when_its_parent_is_killed(tmp_path):
    parent, pidfile = _start_parent(tmp_path)
    child = int(pidfile.read_text())
    try:
        assert _alive(child)
        parent.kill()  # SIGKILL: no handler of the parent runs
        parent.wait(timeout=30)
        end = time.monotonic() + 30
        while _alive(child) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its SIGKILLed parent"
        assert Path(f"{pidfile}.got").read_text() == "SIGTERM"  # PDEATHSIG, caught by the child's handler
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_sigint_to_the_parent_reaches_the_child_and_reads_130(tmp_path):
    parent, pidfile = _start_parent(tmp_path)
    child = int(pidfile.read_text())
    try:
        parent.send_signal(signal.SIGINT)
        _out, err = parent.communicate(timeout=60)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
    assert Path(f"{pidfile}.got").read_text() == "SIGINT"
    ended = json.loads(Path(f"{pidfile}.ended").read_text())
    assert ended == {"returncode": 0, "received": int(signal.SIGINT), "status": 130}
    assert f"parent: got SIGINT: passed to the child (pid {child})" in err
    assert parent.returncode == 0  # the parent went on after the child stopped (a KeyboardInterrupt would be 1)


def test_a_timeout_kills_the_command_and_says_so(tmp_path):
    t0 = time.monotonic()
    ended = launch([sys.executable, "-c", "import time; time.sleep(60)"], timeout_s=1.0)
    assert ended.timed_out and ended.returncode == -signal.SIGKILL
    assert time.monotonic() - t0 < 30 and ended.seconds >= 1.0


def test_exit_status_reads_as_a_shell_would():
    assert launch([sys.executable, "-c", "import sys; sys.exit(3)"]).status == 3
    assert exit_code(-15) == 143 and exit_code(0) == 0
    assert Ended(-9, 0.1).status == 137 and Ended(0, 0.1, received=15).status == 143


def test_a_missing_program_raises_for_the_caller_to_word(tmp_path):
    with pytest.raises(FileNotFoundError):
        launch([str(tmp_path / "no-such-program")])
