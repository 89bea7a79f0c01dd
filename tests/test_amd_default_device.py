"""`forensics kernel` picks the ROCm backend by itself on an AMD machine (issue 40: it fell back to the
CPU unless --device rocm was given). The detection (forensics.capture.passes.rocm_gpu_status) is
mocked here: no AMD GPU, no ROCm and no ROCm build of torch are on this machine."""
from __future__ import annotations

import subprocess
from types import SimpleNamespace

import pytest

from forensics.capture import passes
from forensics.capture.passes import Tools, discover_tools, resolve_device


def test_no_cuda_and_an_amd_gpu_is_rocm():
    assert resolve_device(None, Tools(cuda=False, rocm=True)) == "rocm"
    assert resolve_device(None, Tools(cuda=True, rocm=True)) == "cuda"  # never both asked: CUDA first
    assert resolve_device(None, Tools(cuda=False, rocm=False)) == "cpu"
    assert resolve_device("cpu", Tools(rocm=True)) == "cpu"  # asked for: taken as given
    assert resolve_device(None, Tools(rocm=True), ["onednn", "mkl"]) == "cpu"  # the instruments say which backend


def test_discovery_asks_for_an_amd_gpu_only_where_no_cuda_device_is(monkeypatch):
    asked = []
    monkeypatch.setattr(passes, "rocm_gpu_status", lambda: asked.append(1) or (True, "rocminfo: gfx942"))
    monkeypatch.setattr(passes, "cuda_status", lambda: (False, "no CUDA device (test)"))
    tools = discover_tools()
    assert tools.rocm and tools.rocm_reason == "rocminfo: gfx942" and resolve_device(None, tools) == "rocm"
    monkeypatch.setattr(passes, "cuda_status", lambda: (True, "GPU 0: test"))
    assert not discover_tools().rocm and len(asked) == 1


def test_kernel_dry_run_on_a_mocked_amd_machine_plans_rocm(monkeypatch, tmp_path, capsys):
    from forensics.cli import main

    monkeypatch.setattr(passes, "cuda_status", lambda: (False, "no CUDA device (test)"))
    monkeypatch.setattr(passes, "rocm_gpu_status", lambda: (True, "rocminfo: gfx942 (test)"))
    rc = main(["kernel", "--site", "aten.mm.default", "--out", str(tmp_path / "cap"), "--dry-run", "--",
               "python", "train.py"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "rocprofv3" in out and "HIPBLASLT_LOG_MASK" in out and "CUBLASLT_LOG" not in out


def _fake_fs(monkeypatch, kfd: bool, render: bool, tools: dict[str, str]):
    monkeypatch.setattr(passes.os.path, "exists", lambda p: kfd if p == "/dev/kfd" else False)
    monkeypatch.setattr(passes.glob, "glob", lambda pat: ["/dev/dri/renderD128"] if render and "renderD" in pat else [])
    monkeypatch.setattr(passes.shutil, "which", lambda name: f"/opt/rocm/bin/{name}" if name in tools else None)

    def run(argv, **_):
        name = argv[0].rsplit("/", 1)[-1]
        if name in tools:
            return SimpleNamespace(returncode=0, stdout=tools[name], stderr="")
        return SimpleNamespace(returncode=0, stdout="0", stderr="")  # torch: no ROCm build
    monkeypatch.setattr(subprocess, "run", run)


@pytest.mark.parametrize("kfd,render,tools,found", [
    (False, False, {}, False),
    (True, False, {}, False),
    (True, True, {"rocminfo": "*******\nAgent 2\n*******\n  Name:                    gfx942\n"}, True),
    (True, True, {"rocm-smi": "GPU[0]\t\t: Card Series: \t\tAMD Instinct MI300X OAM\n"}, True),
    (True, True, {}, False),  # the nodes, but nothing confirms a GPU (no tool, no ROCm torch)
])
def test_rocm_gpu_status_from_the_driver_nodes_and_the_tools(monkeypatch, kfd, render, tools, found):
    _fake_fs(monkeypatch, kfd, render, tools)
    ok, why = passes.rocm_gpu_status()
    assert ok is found, why
    if found:
        assert why.startswith(next(iter(tools)))
