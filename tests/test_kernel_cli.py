"""`forensics kernel` end to end on the CPU: dry run, cannot-run lines, a real capture, no overwrite."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import unfit
import yaml

from forensics.cli import main
from forensics.capture.kernel import KernelResult
from forensics.pipeline import run_kernel
from forensics.capture.passes import Tools, cuda_status

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

SITE = "gemm:NT:acc0:grad1"
NO_GPU = Tools(ncu=None, nsys=None, cuda=False, cuda_reason="no CUDA device (test)")


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def test_dry_run_prints_every_argv_and_runs_nothing(tmp_path, capsys):
    out = tmp_path / "cap"
    code = main(["kernel", "--site", SITE, "--device", "cuda", "--dry-run", "--out", str(out), "--toggle", "CUBLAS_WORKSPACE_CONFIG=:0:0",
                 "--", "torchrun", "--nproc-per-node", "2", "train.py", "--lr", "1e-4"])
    text = unfit(capsys.readouterr().out)  # lines broken at 100 columns, read whole (docs/errors.md)
    assert code == 0 and not out.exists()
    assert "argv: torchrun --nproc-per-node 2 train.py --lr 1e-4" in text
    assert "pass t1-cublas_workspace_config (arm)" in text and "env:  CUBLAS_WORKSPACE_CONFIG=:0:0" in text
    assert "--target-processes all --nvtx --profile-from-start off" in text
    assert f"env:  CUBLASLT_LOG_FILE={out.resolve()}/a1/cublaslt.%i.log" in text
    from probes.config import BOOTSTRAP_DIR

    # the exact value: the bootstrap folder first, then the caller's PYTHONPATH when one is set
    assert f"env:  PYTHONPATH={BOOTSTRAP_DIR}" in text and "<probes bootstrap>" not in text


def test_config_file_and_flags_override(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"site: {SITE}\nsteps: 5-6\narms: 3\ncommand: [python, train.py]\ninstruments: [cupti]\n")
    code = main(["kernel", "--config", str(cfg), "--steps", "2", "--dry-run", "--out", str(tmp_path / "c")])
    text = unfit(capsys.readouterr().out)  # lines broken at 100 columns, read whole (docs/errors.md)
    assert code == 0 and "steps: 2 " in text and "instruments: cupti\n" in text
    assert [ln for ln in text.splitlines() if ln.startswith("pass ")] == ["pass a1 (arm)", "pass a2 (arm)",
                                                                         "pass a3 (arm)"]


def test_no_command_on_cuda_without_gpu_says_so_in_one_line(capsys):
    if cuda_status()[0]:
        pytest.skip("a CUDA device is present: the example would run")
    code = main(["kernel", "--site", SITE, "--device", "cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and len(err) == 1
    assert "needs a CUDA GPU" in err[0] and "--device cpu" in err[0] and "forensics analyze" in err[0]


def test_default_device_follows_the_machine_and_the_instruments(tmp_path, capsys):
    gpu = cuda_status()[0]
    assert main(["kernel", "--site", SITE, "--dry-run", "--out", str(tmp_path / "c"), "--", "python", "t.py"]) == 0
    text = unfit(capsys.readouterr().out)  # lines broken at 100 columns, read whole (docs/errors.md)
    assert ("device: cuda" if gpu else "device: cpu   instruments: torch_profiler,onednn,mkl") in text
    if not gpu:
        assert "pass ncu" not in text and "env:  ONEDNN_VERBOSE_TIMESTAMP=1" in text
        assert "probes: sites,cpu" in text and "cpu_instruments=torch_profiler,onednn,mkl" in text
    assert main(["kernel", "--site", SITE, "--dry-run", "--instruments", "cupti", "--", "python", "t.py"]) == 0
    assert "device: cuda   instruments: cupti" in unfit(capsys.readouterr().out)
    assert main(["kernel", "--site", SITE, "--dry-run", "--device", "cpu", "--instruments", "ncu", "--",
                 "python", "t.py"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not available with --device cpu" in err[0] and "--device cuda" in err[0]
    assert main(["kernel", "--site", SITE, "--dry-run", "--device", "tpu", "--", "python", "t.py"]) == 2


def test_out_that_is_a_file_is_bad_input(tmp_path, capsys):
    f = tmp_path / "notadir"
    f.write_text("x")
    assert main(["kernel", "--site", SITE, "--out", str(f), "-q", "--", "true"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"forensics: {f} exists and is not a folder; --out takes a folder for the capture "
                   "(choose another --out)"]
    assert f.read_text() == "x"


def test_bad_site_bad_toggle_bad_config_are_one_line(tmp_path, capsys):
    assert main(["kernel", "--site", "gemm:XX:acc0:grad1", "--dry-run", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("forensics: bad site:")
    assert main(["kernel", "--site", SITE, "--toggle", "NOEQUALS", "--dry-run", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "NAME=VALUE" in err[0]
    bad = tmp_path / "run.yaml"
    bad.write_text("site: [unclosed\n")
    assert main(["kernel", "--config", str(bad), "--dry-run", "--", "true"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"forensics: bad input: {bad}:")


@pytest.mark.slow
def test_real_capture_of_the_example_on_cpu(tmp_path, capsys):
    out = tmp_path / "cap"
    code = main(["kernel", "--site", SITE, "--out", str(out), "--instruments", "cupti,cublaslt", "-q", "--timeout", "300",
                 "--", sys.executable, "-m", "forensics.capture.example_workload", "--cpu", "--steps", "4"])
    text = unfit(capsys.readouterr().out)  # lines broken at 100 columns, read whole (docs/errors.md)
    if cuda_status()[0]:
        pytest.skip("a CUDA device is present: this test is about --device cuda without one")
    assert code == 4, text  # --device cuda (from the instruments) without a GPU: sites and digests, no kernel
    assert f"capture: {out.resolve()}  (device: cuda)" in text
    verdict = [ln for ln in text.splitlines() if ln.startswith("verdict:")]
    assert len(verdict) == 1 and verdict[0].startswith("verdict: no kernel could run: no CUDA device")
    assert "--device cpu" in verdict[0] and "attributed" not in verdict[0]
    man = yaml.safe_load((out / "manifest.yaml").read_text())
    assert [(a["name"], a["role"], a["status"]) for a in man["arms"]] == [("a1", "arm", "ok"), ("a2", "arm", "ok")]
    assert man["site"] == SITE and man["steps"] == "1-2" and man["instruments"] == ["cupti", "cublaslt"]
    assert man["command"][1:] == ["-m", "forensics.capture.example_workload", "--cpu", "--steps", "4"]
    assert "python" in man["environment"] and "FORENSICS_CONFIG" not in man["knobs"]
    digests = {}
    for arm in ("a1", "a2"):
        recs = lines(out / arm / "rank0" / "sites.jsonl")
        sites = [r for r in recs if r["event"] == "site"]
        assert [r["label"] for r in sites] == [f"{SITE}#1", f"{SITE}#2"]  # one plain wgrad per step, steps 1-2
        assert all(r["meta"]["m"] == 32 and r["meta"]["n"] == 32 and r["meta"]["k"] == 64 for r in sites)
        digests[arm] = [(r["in"], r["out"]) for r in sites]
        assert not (out / arm / "rank0" / "cupti.jsonl").exists()
        cupti = lines(out / arm / "rank0" / "no-cupti.jsonl")
        assert cupti[0]["event"] == "header" and cupti[1]["event"] == "unavailable"
        assert (out / "passes" / f"{arm}.log").exists()
    assert digests["a1"] == digests["a2"]  # CPU GEMMs are deterministic: identical arms agree bit for bit
    from forensics.capture.directory import load_capture

    cap = load_capture(out)  # CUPTI said it could not collect: the capture does not list it as present
    assert "cupti" not in cap.instruments() and any("no CUPTI-family instrument" in m for m in cap.missing)


def test_library_run_never_overwrites_and_redacts(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_TEST_TOKEN", "ghp_" + "a" * 30)
    out = tmp_path / "cap"
    out.mkdir()
    (out / "manifest.yaml").write_text("schema: 1\nprecious: true\n")
    res = run_kernel(SITE, ["echo", "hi"], out=out, arms=1, instruments=("cublaslt",),
                     toggles=("NCCL_API_KEY=sk-" + "b" * 30,), tools=NO_GPU, progress=False)
    assert isinstance(res, KernelResult)
    assert res.capture_dir == (tmp_path / "cap-2").resolve()
    assert (out / "manifest.yaml").read_text() == "schema: 1\nprecious: true\n"
    assert [(p.name, p.status) for p in res.passes] == [("a1", "ok"), ("t1-redacted-knob", "ok")]  # a secret-named knob
    text = (res.capture_dir / "manifest.yaml").read_text()
    assert "ghp_" not in text and "sk-" not in text and "<redacted>" in text
    man = yaml.safe_load(text)
    assert man["arms"][1]["toggle"] == {"NCCL_API_KEY": "<redacted>"}
    assert res.analysis is not None or res.analysis_error


def test_library_skips_ncu_and_nsys_without_gpu(tmp_path, capsys):
    res = run_kernel(SITE, ["true"], out=tmp_path / "c", arms=1, tools=NO_GPU, progress=True, device="cuda")
    err = capsys.readouterr().err  # the progress display: one line per pass, with its outcome
    assert "pass a1: ok" in err and "pass ncu: skipped" in err and "no CUDA device" not in err  # reason: once, on stdout
    by = {p.name: p for p in res.passes}
    assert by["ncu"].status == "skipped" and by["ncu"].reason == "no CUDA device (test)"
    assert by["nsys"].status == "skipped" and "skipped: no CUDA device (test)" in by["nsys"].log_path.read_text()
    man = yaml.safe_load((res.capture_dir / "manifest.yaml").read_text())
    ncu = next(a for a in man["arms"] if a["name"] == "ncu")
    assert ncu == {"name": "ncu", "role": "pass", "of": "a1", "env": {}, "status": "skipped", "rc": None,
                   "seconds": 0.0, "reason": "no CUDA device (test)"}


def test_cli_existing_out_is_refused_before_anything_runs_unless_force(tmp_path, capsys):
    out = tmp_path / "cap"
    out.mkdir()
    (out / "manifest.yaml").write_text("schema: 1\nprecious: true\n")  # an earlier capture
    marker = tmp_path / "ran"
    argv = ["kernel", "--device", "cpu", "--site", "aten.mm.default", "--arms", "1", "--instruments",
            "torch_profiler", "-q", "--out", str(out), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    assert main(argv) == 3
    assert capsys.readouterr().err == (f"forensics: {out} exists (a directory); not overwriting the capture "
                                       "(--force replaces it, or choose another --out)\n")
    assert not marker.exists() and not (tmp_path / "cap-2").exists()  # nothing ran, no silent -2
    assert main(argv[:-4] + ["--force"] + argv[-4:]) in (0, 1)
    assert marker.exists() and "precious" not in (out / "manifest.yaml").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap", "ran"]  # the earlier capture set aside is gone
