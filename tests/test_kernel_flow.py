"""`forensics kernel`'s flow (issue 30): the site parsed once, the run config read and merged once, the
passes planned once, the analysis above the capture (no capture module imports the judge), an
analysis that fails never exits 0, a refused plan leaves no folder. Real `kernel` runs of a tiny
command on the CPU backend (no torch needed in the command)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
import yaml

import forensics.capture.kernel as capture_kernel_mod
import forensics.core.site as site_mod
from forensics.cli import main
from forensics.core.errors import EXIT_BAD_INPUT, EXIT_INTERNAL, BadInput
from forensics.runtime.console import unfit
from forensics.judge import analysis as analysis_mod

pytestmark = pytest.mark.slow  # integration lane: real kernel runs (35 s on 2 cores)
REPO = Path(__file__).resolve().parents[1]
SITE = "gemm:NT:acc0:grad1#2"


def _argv(out: Path, *extra: str) -> list[str]:
    return ["kernel", "--device", "cpu", "--arms", "1", "--instruments", "torch_profiler", "-q", "--out", str(out),
            *extra, "--", sys.executable, "-c", "pass"]


def _count(monkeypatch, module, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def counted(*a, **kw):
        calls[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_site_parsed_config_read_and_passes_planned_once(tmp_path, monkeypatch, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"site: '{SITE}'\nsteps: '1-2'\n")
    parses = _count(monkeypatch, site_mod, "parse_site")
    reads = _count(monkeypatch, capture_kernel_mod, "load_run_config")
    plans = _count(monkeypatch, capture_kernel_mod, "plan_passes")
    seen = []
    real_analyze = analysis_mod.analyze
    monkeypatch.setattr(analysis_mod, "analyze", lambda cap, site=None, **kw: seen.append(site) or real_analyze(
        cap, site=site, **kw))
    code = main(_argv(tmp_path / "cap", "--config", str(cfg)))
    capsys.readouterr()
    assert code in (0, 1)  # a verdict (nothing NAMED here: `pass` runs no GEMM)
    assert parses[0] == 1, "the site is parsed once, in the command"
    assert reads[0] == 1 and plans[0] == 1
    assert isinstance(seen[0], site_mod.Occurrence) and str(seen[0]) == SITE  # the parsed value travels
    man = yaml.safe_load((tmp_path / "cap" / "manifest.yaml").read_text())
    assert man["site"] == SITE and man["passes_run"] == "sequential"
    assert man["environment"]["torch"]  # described without a second torch import (torch/version.py)


def test_a_refused_plan_leaves_no_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "cap"
    code = main(["kernel", "--device", "cpu", "--site", SITE, "--arms", "0", "-q", "--out", str(out), "--",
                 sys.executable, "-c", "pass"])
    assert code == 2 and "--arms must be at least 1" in capsys.readouterr().err  # plan_passes' refusal
    assert not out.exists()
    code = main(["kernel", "--device", "cpu", "--site", SITE, "--steps", "2-1", "-q", "--", sys.executable, "-c",
                 "pass"])  # the default folder: none is left either
    assert code == 2 and not (Path.cwd() / "forensics-capture").exists()


def test_an_analysis_that_refuses_the_capture_is_exit_3_never_0(tmp_path, monkeypatch, capsys):
    def refuse(cap, site=None, **kw):
        raise BadInput(Path(cap) / "a1" / "rank0" / "sites.jsonl", "truncated line", 3)

    monkeypatch.setattr(analysis_mod, "analyze", refuse)
    code = main(_argv(tmp_path / "cap", "--site", SITE))
    out = unfit(capsys.readouterr().out)  # the piped-width rule may break a long line (forensics.runtime.console)
    assert code == EXIT_BAD_INPUT
    assert "analysis failed:" in out and "sites.jsonl:3: truncated line" in out
    assert (tmp_path / "cap" / "manifest.yaml").is_file()  # the capture stays


def test_a_bug_in_the_analysis_is_an_internal_error_not_a_retry(tmp_path, monkeypatch, capsys):
    calls = []

    def broken(cap, site=None, keep_going=False):
        calls.append(keep_going)
        raise TypeError("a bug")

    monkeypatch.setattr(analysis_mod, "analyze", broken)
    monkeypatch.setenv("FORENSICS_CRASH_DIR", str(tmp_path / "crashes"))
    code = main(_argv(tmp_path / "cap", "--site", SITE))
    err = capsys.readouterr().err
    assert code == EXIT_INTERNAL and calls == [True]  # once: no second, stricter analysis
    assert "analysing the capture" in err and (tmp_path / "cap" / "manifest.yaml").is_file()


def test_no_capture_module_imports_the_judge():
    for path in sorted((REPO / "forensics" / "capture").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not any(n.startswith("forensics.judge") for n in names), f"{path.name} imports {names}"


def test_a_signal_to_kernel_reaches_the_pass_and_stops_the_rest(tmp_path):
    """SIGTERM to `forensics kernel` while pass a1 runs: passed on to a1's command, a2 never starts, the
    manifest says so, exit 143 (before: the signal killed kernel and a1 ran on, an orphan)."""
    import os
    import signal
    import subprocess
    import time

    ready, out = tmp_path / "ready", tmp_path / "cap"
    child = (f"import signal, sys, time, pathlib; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
             f"pathlib.Path({str(ready)!r}).write_text('1'); time.sleep(120)")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "kernel", "--device", "cpu", "--site", SITE, "--arms", "2",
                             "--instruments", "torch_profiler", "-q", "--out", str(out), "--", sys.executable, "-c", child],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        end = time.monotonic() + 120
        while not ready.exists():
            assert time.monotonic() < end and proc.poll() is None, proc.stderr.read() if proc.poll() is not None else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-2000:]
    assert "got SIGTERM: passed to pass a1" in stderr and "the passes after a1 were not run" in stderr
    arms = {a["name"]: a for a in yaml.safe_load((out / "manifest.yaml").read_text())["arms"]}
    assert arms["a1"]["status"] == "interrupted" and arms["a2"]["status"] == "skipped"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_kernel_killed_with_sigkill_takes_its_pass_along(tmp_path):
    """`forensics kernel` SIGKILLed while pass a1 runs: a1's command gets SIGTERM (before: it ran on, an orphan)."""
    import os
    import signal
    import subprocess
    import time

    ready, got, out = tmp_path / "ready", tmp_path / "got", tmp_path / "cap"
    child = (f"import os, signal, sys, time, pathlib; "
             f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(got)!r}).write_text('SIGTERM'), sys.exit(0))); "
             f"pathlib.Path({str(ready)!r}).write_text(str(os.getpid())); time.sleep(120)")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "forensics", "kernel", "--device", "cpu", "--site", SITE, "--arms", "1",
                             "--instruments", "torch_profiler", "-q", "--out", str(out), "--", sys.executable, "-c", child],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    pid = None
    try:
        end = time.monotonic() + 120
        while not ready.exists():
            assert time.monotonic() < end and proc.poll() is None
            time.sleep(0.05)
        time.sleep(0.1)
        pid = int(ready.read_text())
        proc.kill()
        proc.wait(timeout=30)
        end = time.monotonic() + 30
        while not got.exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert got.exists() and got.read_text() == "SIGTERM", "the pass outlived its SIGKILLed kernel"
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
