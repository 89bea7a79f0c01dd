"""Pass planning: the exact ncu/nsys argument lists, env additions, arms, and every "cannot run" path."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

from forensics.core.errors import BadInput
from forensics.capture.kernel import load_run_config, run_pass
from forensics.capture.passes import Tools, describe_plan, find_tool, plan_passes
from forensics.instruments.ncu import NCU_PERMISSION_REASON, ncu_argv, ncu_nvtx_include, ncu_permission_denied
from forensics.instruments.nsys import nsys_argv, nsys_export_argv

CMD = ["torchrun", "--nproc-per-node", "8", "train.py", "--lr", "1e-4"]
GPU = Tools(ncu="/opt/nvidia/nsight-compute/2025.3.1/ncu", nsys="/usr/local/cuda/bin/nsys", cuda=True, cuda_reason="")


def plan(tmp_path, **kw):
    return plan_passes("gemm:NT:acc0:grad1", CMD, out=tmp_path / "cap", tools=kw.pop("tools", GPU), **kw)


def test_default_plan_has_two_arms_then_ncu_then_nsys(tmp_path):
    p = plan(tmp_path)
    assert [(x.name, x.role, x.arm) for x in p.passes] == [
        ("a1", "arm", "a1"), ("a2", "arm", "a2"), ("ncu", "pass", "a1"), ("nsys", "pass", "a1")]
    assert all(x.skip_reason is None for x in p.passes)


def test_arm_pass_runs_the_command_unmodified_with_cublaslt_per_pid(tmp_path):
    a1 = plan(tmp_path).passes[0]
    cap = tmp_path / "cap"
    assert a1.argv == CMD
    assert a1.env == {"CUBLASLT_LOG_LEVEL": "5", "CUBLASLT_LOG_FILE": f"{cap}/a1/cublaslt.%i.log"}
    assert a1.log_path == cap / "passes" / "a1.log"
    cfg = a1.probe_config
    assert cfg.probes == ["sites", "cupti"] and cfg.out_dir == f"{cap}/a1" and cfg.site == "gemm:NT:acc0:grad1"
    assert cfg.steps == "1-2" and cfg.ranks == "all" and not cfg.cuda_profiler_window


def test_exact_ncu_argv_window_mode(tmp_path):
    ncu = plan(tmp_path).passes[2]
    cap = tmp_path / "cap"
    assert ncu.argv == [
        "/opt/nvidia/nsight-compute/2025.3.1/ncu", "--target-processes", "all", "--nvtx",
        "--profile-from-start", "off", "--clock-control", "none", "--print-units", "base",
        "--section", "LaunchStats", "--metrics", "gpu__time_duration.sum",
        "-o", f"{cap}/ncu/window", *CMD]
    assert "-f" not in ncu.argv and "--force-overwrite" not in ncu.argv
    assert ncu.probe_config.cuda_profiler_window and ncu.probe_config.probes == ["sites"]
    assert ncu.probe_config.extra == {"digests": False}  # no hash kernels replayed inside the window
    assert ncu.env == {}  # no CUBLASLT logging under replay


def test_exact_ncu_argv_nvtx_mode():
    argv = ncu_argv("ncu", Path("/c/ncu/window"), ["python", "t.py"], site="gemm:NT:acc0:grad1", mode="nvtx")
    assert argv[:6] == ["ncu", "--target-processes", "all", "--nvtx", "--nvtx-include",
                        "regex:forensics@gemm:NT:acc0:grad1#[0-9]+"]
    assert "--profile-from-start" not in argv
    assert ncu_nvtx_include("gemm:NT:acc0:grad1#3") == "forensics@gemm:NT:acc0:grad1#3"  # start/end: no '/'
    with pytest.raises(ValueError):
        ncu_argv("ncu", Path("r"), ["x"], site="gemm:NT:acc0:grad1", mode="everything")


def test_exact_nsys_argv_and_export(tmp_path):
    nsys = plan(tmp_path).passes[3]
    cap = tmp_path / "cap"
    assert nsys.argv == ["/usr/local/cuda/bin/nsys", "profile", "-t", "cuda,nvtx,cublas",
                         "--capture-range=cudaProfilerApi", "--capture-range-end=stop", "--sample=none",
                         "--cpuctxsw=none", "-o", f"{cap}/nsys/window", *CMD]
    assert nsys.post == [["/usr/local/cuda/bin/nsys", "export", "--type", "sqlite", "-o",
                          f"{cap}/nsys/window.sqlite", f"{cap}/nsys/window.nsys-rep"]]
    assert nsys_argv("nsys", Path("r"), ["x"])[-1] == "x" and nsys_export_argv("n", Path("r"))[-1] == "r.nsys-rep"


def test_toggles_and_explicit_env_arms(tmp_path):
    p = plan(tmp_path, arms=1, toggles=["CUBLAS_WORKSPACE_CONFIG=:0:0", "TORCH_BLAS_PREFER_CUBLASLT=1"],
             instruments=("cupti", "cublaslt"))
    names = [x.name for x in p.passes]
    assert names == ["a1", "t1-cublas_workspace_config", "t2-torch_blas_prefer_cublaslt"]
    t1 = p.passes[1]
    assert t1.toggle == {"CUBLAS_WORKSPACE_CONFIG": ":0:0"} and t1.env["CUBLAS_WORKSPACE_CONFIG"] == ":0:0"
    assert t1.env["CUBLASLT_LOG_FILE"].endswith("/t1-cublas_workspace_config/cublaslt.%i.log")
    q = plan(tmp_path, env_arms={"base": {}, "ws": {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}}, instruments=("cupti",))
    assert [(x.name, x.toggle) for x in q.passes] == [("base", {}), ("ws", {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})]
    assert q.passes[0].env == {}  # no cublaslt instrument: no logging variables


def test_bad_plans_raise_value_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown instrument"):
        plan(tmp_path, instruments=("cupti", "perf"))
    with pytest.raises(ValueError, match="NAME=VALUE"):
        plan(tmp_path, toggles=["CUBLAS_WORKSPACE_CONFIG"])
    with pytest.raises(ValueError, match="at least 1"):
        plan(tmp_path, arms=0)
    with pytest.raises(ValueError, match="arm name"):
        plan(tmp_path, env_arms={"ncu": {}})
    with pytest.raises(ValueError, match="bad step window"):
        plan(tmp_path, steps="two")
    with pytest.raises(ValueError, match="bad rank"):
        plan(tmp_path, ranks="0,x")


def test_cannot_run_no_cuda(tmp_path):
    p = plan(tmp_path, tools=Tools(ncu="/x/ncu", nsys="/x/nsys", cuda=False, cuda_reason="no CUDA device (test)"))
    assert [x.skip_reason for x in p.passes] == [None, None, "no CUDA device (test)", "no CUDA device (test)"]


def test_cannot_run_no_ncu_no_nsys(tmp_path):
    p = plan(tmp_path, tools=Tools(ncu=None, nsys=None, cuda=True))
    assert p.passes[2].skip_reason.startswith("ncu (Nsight Compute) not found")
    assert p.passes[3].skip_reason.startswith("nsys (Nsight Systems) not found")


def test_skipped_pass_writes_its_reason_to_its_log(tmp_path):
    p = plan(tmp_path, tools=Tools(ncu=None, nsys=None, cuda=True))
    r = run_pass(p.passes[2], timeout_s=10)
    assert r.status == "skipped" and r.returncode is None and "not found" in r.reason
    assert "skipped: ncu (Nsight Compute) not found" in r.log_path.read_text()


# SYNTHETIC: a stand-in `ncu` executable printing the line real ncu prints without counter
# permission (format of the ==ERROR== line as documented by NVIDIA for ERR_NVGPUCTRPERM).
FAKE_NCU = """#!/bin/sh
echo "==PROF== Connected to process 4242"
echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0."
exit 1
"""


def test_cannot_run_ncu_without_counter_permission(tmp_path):
    fake = tmp_path / "bin" / "ncu"
    fake.parent.mkdir()
    fake.write_text(FAKE_NCU)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    p = plan(tmp_path, tools=Tools(ncu=str(fake), nsys=None, cuda=True), instruments=("ncu",))
    ncu = p.passes[-1]
    ncu.folder.mkdir(parents=True)
    r = run_pass(ncu, timeout_s=30)
    assert r.status == "failed" and r.reason == NCU_PERMISSION_REASON and r.returncode == 1
    assert ncu_permission_denied(r.log_path.read_text())
    assert not ncu_permission_denied("==PROF== Disconnected from process 4242")


def test_failed_and_timed_out_passes(tmp_path):
    p = plan_passes("gemm:NT:acc0:grad1", [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"],
                    out=tmp_path / "c", tools=GPU, arms=1, instruments=("cublaslt",))
    p.passes[0].config_path = None  # a plain command, no probes
    r = run_pass(p.passes[0], timeout_s=60)
    assert r.status == "failed" and r.returncode == 3 and r.reason == "exit status 3: boom"
    p.passes[0].argv = [sys.executable, "-c", "import time; time.sleep(30)"]
    r = run_pass(p.passes[0], timeout_s=1)
    assert r.status == "timeout" and "stopped after 1 s" in r.reason
    p.passes[0].argv = [str(tmp_path / "no-such-program")]
    r = run_pass(p.passes[0], timeout_s=5)
    assert r.status == "failed" and r.reason.startswith("could not start")


def test_find_tool_searches_install_globs(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    d = tmp_path / "nsight-compute" / "2025.1.0"
    d.mkdir(parents=True)
    (d / "ncu").write_text("")
    assert find_tool("ncu", (str(tmp_path / "nsight-compute" / "*" / "ncu"),)) == str(d / "ncu")
    assert find_tool("ncu", ()) is None


def test_describe_plan_lists_every_argv_and_env(tmp_path):
    text = describe_plan(plan(tmp_path, tools=Tools(cuda=False, cuda_reason="no CUDA device (test)")))
    assert "pass ncu (pass of a1)  [cannot run: no CUDA device (test)]" in text
    assert "argv: torchrun --nproc-per-node 8 train.py --lr 1e-4" in text
    assert "env:  CUBLASLT_LOG_LEVEL=5" in text and "then: nsys export --type sqlite" in text


def test_run_config_yaml(tmp_path):
    good = tmp_path / "run.yaml"
    good.write_text("site: gemm:NT:acc0:grad1\nsteps: 3\ninstruments: cupti,ncu\ntoggles: [A=1]\n"
                    "command: torchrun --nproc-per-node 2 train.py\ntimeout: 60\n")
    cfg = load_run_config(good)
    assert cfg == {"site": "gemm:NT:acc0:grad1", "steps": "3", "instruments": ["cupti", "ncu"], "toggles": ["A=1"],
                   "command": ["torchrun", "--nproc-per-node", "2", "train.py"], "timeout_s": 60}
    bad = tmp_path / "bad.yaml"
    bad.write_text("site: gemm:NT:acc0:grad1\nsteps: [1\n")
    with pytest.raises(BadInput) as e:
        load_run_config(bad)
    assert str(e.value).startswith(f"{bad}:") and "not valid YAML" in str(e.value)
    unknown = tmp_path / "u.yaml"
    unknown.write_text("site: x\nbogus: 1\n")
    with pytest.raises(BadInput, match="unknown key"):
        load_run_config(unknown)
    empty = tmp_path / "e.yaml"
    empty.write_text("")
    with pytest.raises(BadInput, match="empty"):
        load_run_config(empty)
    with pytest.raises(BadInput, match="no such"):
        load_run_config(tmp_path / "missing.yaml")
    assert os.path.exists(good)


# --------------------------------------------------------------------------- ROCm (docs/amd.md)
def test_rocm_arms_get_the_library_logs_and_rocprofv3_wraps_each_arm(tmp_path, monkeypatch):
    from forensics.instruments import rocprofv3

    monkeypatch.setattr(rocprofv3, "rocm_status", lambda: (True, ""))
    tools = Tools(cuda=False, cuda_reason="no CUDA device (test)", other={"rocprofv3": "/opt/rocm/bin/rocprofv3"})
    p = plan_passes("aten.mm.default", ["python", "train.py"], out=tmp_path / "cap", device="rocm", tools=tools)
    assert [x.name for x in p.passes] == ["a1", "a2"]  # no pass of its own: rocprofv3 runs in the arms
    a1 = p.passes[0]
    assert a1.argv == ["/opt/rocm/bin/rocprofv3", "--kernel-trace", "--marker-trace", "--hip-runtime-trace",
                       "--output-format", "csv", "-d", str(tmp_path / "cap" / "a1"), "-o", "%pid%", "--",
                       "python", "train.py"]
    assert a1.env["HIPBLASLT_LOG_MASK"] == "34"
    assert a1.env["HIPBLASLT_LOG_FILE"] == str(tmp_path / "cap" / "a1" / "hipblaslt.%i.log")
    assert a1.env["ROCBLAS_LAYER"] == "3"
    assert a1.env["ROCBLAS_LOG_TRACE_PATH"] == str(tmp_path / "cap" / "a1" / "rocblas_trace.log")
    assert a1.env["ROCBLAS_LOG_BENCH_PATH"] == str(tmp_path / "cap" / "a1" / "rocblas_bench.log")
    assert not a1.notes and not any(k.startswith("CUBLAS") for k in a1.env)


def test_rocm_without_an_amd_gpu_runs_the_arms_unwrapped_and_says_so(tmp_path, monkeypatch):
    from forensics.instruments import rocprofv3

    monkeypatch.setattr(rocprofv3, "rocm_status", lambda: (False, "no ROCm device (test)"))
    p = plan_passes("aten.mm.default", ["python", "train.py"], out=tmp_path / "cap", device="rocm", tools=Tools())
    a1 = p.passes[0]
    assert a1.argv == ["python", "train.py"]
    assert len(a1.notes) == 1 and "no ROCm device (test)" in a1.notes[0] and "rocprofv3 --kernel-trace" in a1.notes[0]
    text = describe_plan(p)
    assert "device: rocm" in text and "note: rocprofv3 cannot run here (no ROCm device (test))" in text
    assert "env:  HIPBLASLT_LOG_MASK=34" in text


def test_dry_run_asks_for_rocm_on_a_machine_without_it(tmp_path, capsys):
    from forensics.cli import main

    rc = main(["kernel", "--site", "aten.mm.default", "--device", "rocm", "--dry-run", "--out", str(tmp_path / "c"),
               "--", "python", "train.py"])
    out = unfit(capsys.readouterr().out)  # the piped-width rule may break a long line
    assert rc == 0 and "device: rocm" in out and "instruments: hipblaslt,rocblas,rocprofv3" in out
    assert "--kernel-trace --marker-trace --hip-runtime-trace --output-format csv" in out
    assert "ncu" not in out and "CUBLASLT" not in out


def test_a_wrapped_arm_is_not_declared_another_command(tmp_path, monkeypatch):
    """The manifest declares an arm's command only when it differs from the run's (--arm-command):
    rocprofv3's wrapper is not a different command (compare would read it as one)."""
    from forensics.capture.kernel import build_manifest
    from forensics.instruments import rocprofv3

    monkeypatch.setattr(rocprofv3, "rocm_status", lambda: (True, ""))
    tools = Tools(other={"rocprofv3": "/opt/rocm/bin/rocprofv3"})
    p = plan_passes("aten.mm.default", ["python", "train.py"], out=tmp_path / "cap", device="rocm", tools=tools)
    assert p.passes[0].argv[0] == "/opt/rocm/bin/rocprofv3" and p.passes[0].command == ["python", "train.py"]
    m = build_manifest(p, ["python", "train.py"], p.instruments)
    arms = {a["name"]: a for a in m["arms"]}
    assert "command" not in arms["a1"] and "command" not in arms["a2"]
    assert m["device"] == "rocm"
