"""The CPU backend of `forensics kernel`, for real: torch.profiler + oneDNN / oneMKL verbose logs.

Offline tests read the real captures committed under tests/fixtures/cpu/ (PROVENANCE.md there);
the ``slow`` tests run the backend on this machine's torch CPU wheel (small windows, a few seconds
per pass) and assert exact implementation names and counts. Expected values were read off the
captures' own files (sites.jsonl, mkl.<pid>.log, onednn.<pid>.log, the profiler trace).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from forensics.runtime.console import unfit

from forensics.cli import main
from forensics.judge.analysis import DISAGREE, NAMED, SINGLE, analyze
from forensics.judge.verdicts import compare_arms, toggle_report

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "cpu"
TRAIN = REPO / "examples" / "cpu-backend" / "train.py"
CONV, MM = "aten.convolution.default", "aten.mm.default"


def _verdicts(an) -> dict[tuple[str, str], tuple[str, str, dict]]:
    return {(r.arm, r.scope): (r.verdict, r.kernel, dict(r.counts)) for r in an.verdicts.itertuples()}


def _attributed(an, arm: str) -> pd.DataFrame:
    c = an.calls
    return c[(c["arm"] == arm) & c["site_label"].notna()]


# --------------------------------------------------------------------------- case 1: 1x1 Conv1d, 1 vs 2 threads
def test_conv1d_threads_capture_names_thnn_with_mkl_and_onednn_with_profiler():
    an = analyze(FIX / "conv1d-threads", site=CONV)
    v = _verdicts(an)
    thnn = (NAMED, "aten::_slow_conv2d_forward", {"torch_profiler": 1, "mkl": 1})
    mkldnn = (NAMED, "aten::mkldnn_convolution", {"torch_profiler": 1, "onednn": 1})
    assert v == {("a1", f"{CONV}#1"): thnn, ("a1", f"{CONV}#2"): thnn, ("a2", f"{CONV}#1"): thnn,
                 ("a2", f"{CONV}#2"): thnn, ("t1-omp_num_threads", f"{CONV}#1"): mkldnn,
                 ("t1-omp_num_threads", f"{CONV}#2"): mkldnn}
    reason = an.verdicts.set_index(["arm", "scope"]).loc[("a1", f"{CONV}#1"), "reason"]
    assert reason.startswith("aten::_slow_conv2d_forward -> oneMKL SGEMM: torch_profiler + mkl agree on 1 "
                             "implementation-op execution(s)")
    assert "unit compared: implementation-op executions" in reason and "SGEMM(N,N,8,16,8) CNR:OFF NThr:1 x4" in reason
    other = an.verdicts.set_index(["arm", "scope"]).loc[("t1-omp_num_threads", f"{CONV}#1"), "reason"]
    assert other.startswith("aten::mkldnn_convolution -> oneDNN convolution jit_1x1:avx512_core:")
    # the thnn path: one SGEMM per sample of the batch of 4, attributed by the oneMKL file's offsets
    for arm in ("a1", "a2"):
        calls = _attributed(an, arm)
        got = calls.groupby(["site_label", "routine", "transa", "transb", "m", "n", "k"]).size().to_dict()
        assert got == {(f"{CONV}#1", "SGEMM", "N", "N", 8, 16, 8): 4, (f"{CONV}#2", "SGEMM", "N", "N", 8, 4, 16): 4}
        assert set(calls["attributed_by"]) == {"file offset within the size the occurrence recorded before and after its call"}
        assert set(calls["nthr"]) == {1} and set(calls["cnr"]) == {"OFF"}
    # the oneDNN path: per occurrence one convolution primitive (plus its reorders), by timestamp
    calls = _attributed(an, "t1-omp_num_threads")
    conv = calls[calls["primitive"] == "convolution"]
    assert list(conv["implementation"]) == ["jit_1x1:avx512_core", "jit_1x1:avx512_core"]
    assert list(conv["problem_desc"]) == ["mb4_ic8oc16_ih1oh1kh1sh1dh0ph0_iw8ow8kw1sw1dw0pw0",
                                          "mb4_ic16oc4_ih1oh1kh1sh1dh0ph0_iw8ow8kw1sw1dw0pw0"]
    assert len(calls) == 8 and set(calls["attributed_by"]) == {"timestamp within the occurrence's [t0, t1] (same process)"}
    # lines outside every occurrence (the backward pass of step 0) stay unattributed, and say so
    rest = an.calls[an.calls["site_label"].isna()]
    assert len(rest) == 12 + 12 + 14 and rest["attributed_by"].str.startswith("unattributed:").all()


def test_conv1d_threads_compare_says_the_selection_differs(capsys):
    cmp = compare_arms(FIX / "conv1d-threads", site=CONV)
    assert cmp.pair("a2").counts() == {"IDENTICAL": 2}
    t1 = cmp.pair("t1-omp_num_threads")
    fd = t1.first_divergence[0]
    assert (fd["label"], fd["classification"], fd["role"]) == (f"{CONV}#1", "SELECTION DIFFERS", "origin")
    assert fd["kernel_baseline"] == "aten::_slow_conv2d_forward" and fd["kernel_arm"] == "aten::mkldnn_convolution"
    tog = toggle_report(FIX / "conv1d-threads", site=CONV).results[0]
    assert (tog.kernel_changed, tog.algo_changed, tog.bits_changed) == (True, True, True)
    assert main(["compare", str(FIX / "conv1d-threads"), "--site", CONV]) == 1
    out = unfit(capsys.readouterr().out)  # piped lines are broken at 100 columns (docs/errors.md): read them whole
    assert (f"first divergence {CONV}#1: SELECTION DIFFERS (origin); kernel differs: a1 ran "
            "aten::_slow_conv2d_forward -> oneMKL SGEMM, t1-omp_num_threads ran aten::mkldnn_convolution -> oneDNN "
            "convolution jit_1x1:avx512_core; algo differs too; bits differ") in out
    assert "grid" not in out  # no launch geometry on the CPU: nothing said about one


# --------------------------------------------------------------------------- case 2: aten.mm, MKL_CBWR
def test_mm_cbwr_capture_toggle_arm_shows_the_cnr_mode():
    an = analyze(FIX / "mm-cbwr", site=MM)
    assert len(an.verdicts) == 15 and set(an.verdicts["verdict"]) == {NAMED}
    assert set(an.verdicts["kernel"]) == {"aten::mm"}
    for arm, cnr in (("a1", "OFF"), ("a2", "OFF"), ("t1-mkl_cbwr", "COMPATIBLE")):
        calls = _attributed(an, arm)
        assert len(calls) == 5 and set(calls["cnr"]) == {cnr} and set(calls["routine"]) == {"SGEMM"}
        assert sorted(calls["site_label"]) == [f"{MM}#{i}" for i in range(1, 6)]
    tog = toggle_report(FIX / "mm-cbwr", site=MM).results[0]
    assert tog.toggle == {"MKL_CBWR": "COMPATIBLE"}
    assert (tog.kernel_changed, tog.algo_changed) == (False, True)
    first = tog.occurrences.iloc[0]
    assert "cnr=OFF" in first["algo_baseline"] and "cnr=COMPATIBLE" in first["algo_arm"]
    fd = compare_arms(FIX / "mm-cbwr", site=MM).pair("t1-mkl_cbwr").first_divergence[0]
    assert (fd["label"], fd["classification"]) == (f"{MM}#1", "SELECTION DIFFERS")


# --------------------------------------------------------------------------- case 3: the shipped example, twice
def test_example_capture_identical_arms_nothing_over_claimed(capsys):
    an = analyze(FIX / "example")
    assert _verdicts(an) == {(arm, f"gemm:NT:acc0:grad1#{i}"): (NAMED, "aten::mm", {"torch_profiler": 1, "mkl": 1})
                             for arm in ("a1", "a2") for i in (1, 2)}
    calls = _attributed(an, "a1")
    assert list(calls[["transa", "transb", "m", "n", "k"]].itertuples(index=False, name=None)) == [("N", "T", 32, 32, 64)] * 2
    assert main(["compare", str(FIX / "example")]) == 0
    out = capsys.readouterr().out
    assert "a2 (replica) vs a1: IDENTICAL 2" in out and "first divergence" not in out


def test_analyze_cli_on_the_committed_capture(tmp_path, capsys):
    code = main(["analyze", str(FIX / "conv1d-threads"), "--out", str(tmp_path / "an")])
    out = capsys.readouterr().out
    assert code == 0 and "6 of 6 (scope, implementation) pairs NAMED" in out
    assert "verdict: 2 implementation(s) NAMED" in out
    assert "aten::_slow_conv2d_forward -> oneMKL SGEMM" in out
    assert "aten::mkldnn_convolution -> oneDNN convolution jit_1x1:avx512_core" in out
    assert "Nsight" not in out and "CUPTI" not in out  # a CPU capture is not told the GPU instruments are missing
    data = json.loads((tmp_path / "an" / "analysis.json").read_text())
    assert {v["kernel"] for v in data["verdicts"]} == {"aten::_slow_conv2d_forward", "aten::mkldnn_convolution"}


# --------------------------------------------------------------------------- what is missing or wrong
def _copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(FIX / name, dst)
    return dst


def test_without_the_library_log_single_source_names_what_is_missing(tmp_path):
    cap = _copy("mm-cbwr", tmp_path)
    for f in cap.glob("*/rank0/mkl.*.log"):
        f.unlink()
    an = analyze(cap, site=MM)
    assert set(an.verdicts["verdict"]) == {SINGLE}
    reason = an.verdicts["reason"].iloc[0]
    assert reason.startswith("only torch.profiler (CPU ops) saw this scope; missing: oneDNN verbose log, oneMKL verbose log")
    assert any(m.startswith("no oneMKL verbose log") for m in an.missing)


def test_a_library_log_the_profiler_does_not_explain_is_reported(tmp_path):
    """oneDNN lines inside a thnn scope (real lines of the 2-thread arm, re-stamped into a1's occurrence #1:
    a doctored copy, made here) are said in the verdict, never silently dropped."""
    cap = _copy("conv1d-threads", tmp_path)
    recs = [json.loads(x) for x in (cap / "a1" / "rank0" / "sites.jsonl").read_text().splitlines()]
    first = next(r for r in recs if r.get("event") == "site")
    mid = (first["cpu"]["t0_ns"] + first["cpu"]["t1_ns"]) // 2
    src = next((cap / "t1-omp_num_threads" / "rank0").glob("onednn.*.log")).read_text().splitlines()
    execs = [ln for ln in src if ",primitive,exec," in ln][:4]
    stamped = [ln.replace(ln.split(",")[2], f"{mid // 1_000_000}.{mid % 1_000_000:06d}", 1) for ln in execs]
    (cap / "a1" / "rank0" / f"onednn.{first['pid']}.log").write_text("\n".join(stamped) + "\n")
    an = analyze(cap, site=CONV)
    v = an.verdicts[(an.verdicts["arm"] == "a1") & (an.verdicts["scope"] == f"{CONV}#1")]
    row = v[v["kernel"] == "aten::_slow_conv2d_forward"].iloc[0]
    assert row["verdict"] == NAMED
    assert "oneDNN also logged 4 call(s) in this scope" in row["reason"]
    assert "no implementation op the profiler saw here calls" in row["reason"]
    # ... and the 4 oneDNN calls are rows of their own: SINGLE-SOURCE, what the log saw and what is missing
    alone = v[v["verdict"] == SINGLE]
    assert sum(c["onednn"] for c in alone["counts"]) == 4
    assert all(r.startswith("seen by the oneDNN verbose log") for r in alone["reason"])
    assert all("torch.profiler (CPU ops) saw this scope but no implementation op these calls make" in r
               for r in alone["reason"])
    assert any(k.startswith("oneDNN convolution jit_1x1:") for k in alone["kernel"])


def test_matcher_many_ops_and_calls_not_one_to_one_is_disagree():
    from forensics import instruments as reg
    from forensics.judge.cpu import match

    inst = reg.get("mkl")
    launches = pd.DataFrame({"key": ["aten::mm", "aten::mm"], "kernel": ["aten::mm", "aten::mm"]})
    calls = pd.DataFrame({"routine": ["SGEMM"] * 3, "transa": ["N"] * 3, "transb": ["N"] * 3, "m": [4] * 3,
                          "n": [4] * 3, "k": [4] * 3, "cnr": ["OFF"] * 3, "nthr": [1] * 3})
    res = match(inst, launches, calls)
    assert (res["calls"], res["groups"], res["matched"]) == (1, 2, {})
    assert "cannot tell which execution issued which call" in res["detail"]
    two = match(inst, launches, calls.iloc[:2])
    assert (two["calls"], two["groups"], two["matched"]) == (2, 2, {"aten::mm": 2})


def test_a_malformed_library_line_is_one_error_naming_file_and_line(tmp_path, capsys):
    cap = _copy("conv1d-threads", tmp_path)
    log = next((cap / "a1" / "rank0").glob("mkl.*.log"))
    lines = log.read_text().splitlines()
    lines[3] = lines[3].replace(") ", " ", 1)
    log.write_text("\n".join(lines) + "\n")
    assert main(["analyze", str(cap), "--out", str(tmp_path / "an")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{log}:4:" in err[0] and "malformed oneMKL call line" in err[0]


def test_split_onednn_keeps_program_output_apart():
    from probes.cpu import split_onednn

    raw = (b"epoch 1\nonednn_verbose,v1,info,oneDNN v3.12.0\npartial line onednn_verbose,v1,primitive,exec,x\n"
           b"tail without newline")
    ours, theirs = split_onednn(raw)
    assert ours == b"onednn_verbose,v1,info,oneDNN v3.12.0\nonednn_verbose,v1,primitive,exec,x\n"
    assert theirs == b"epoch 1\npartial line tail without newline"


# --------------------------------------------------------------------------- for real, on this machine
@pytest.mark.slow
def test_kernel_cpu_backend_runs_for_real(tmp_path, capsys, monkeypatch):
    """Case 1 live: one arm at 1 intra-op thread, the toggle arm at 2 (pytorch/pytorch#116369)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "cap"
    code = main(["kernel", "--device", "cpu", "--site", CONV, "--steps", "0", "--arms", "1", "--toggle",
                 "OMP_NUM_THREADS=2", "--out", str(out), "-q", "--timeout", "300", "--",
                 sys.executable, str(TRAIN), "--model", "conv1d", "--steps", "2"])
    text = capsys.readouterr().out
    assert code == 0, text
    assert f"capture: {out.resolve()}  (device: cpu)" in text and "verdict: 2 implementation(s) NAMED" in text
    an = analyze(out, site=CONV)
    v = _verdicts(an)
    assert {k: (x[0], x[1]) for k, x in v.items()} == {
        ("a1", f"{CONV}#1"): (NAMED, "aten::_slow_conv2d_forward"), ("a1", f"{CONV}#2"): (NAMED, "aten::_slow_conv2d_forward"),
        ("t1-omp_num_threads", f"{CONV}#1"): (NAMED, "aten::mkldnn_convolution"),
        ("t1-omp_num_threads", f"{CONV}#2"): (NAMED, "aten::mkldnn_convolution")}
    sgemm = _attributed(an, "a1").groupby(["site_label", "routine", "m", "n", "k"]).size().to_dict()
    assert sgemm == {(f"{CONV}#1", "SGEMM", 8, 16, 8): 4, (f"{CONV}#2", "SGEMM", 8, 4, 16): 4}
    conv = _attributed(an, "t1-omp_num_threads")
    conv = conv[conv["primitive"] == "convolution"]
    assert len(conv) == 2 and all(re.fullmatch(r"[\w]+:\w+", i) for i in conv["implementation"])
    fd = compare_arms(out, site=CONV).pair("t1-omp_num_threads").first_divergence[0]
    assert (fd["label"], fd["classification"]) == (f"{CONV}#1", "SELECTION DIFFERS")
    # the program's own stdout inside the window reached its stdout (the pass log), not the oneDNN log
    log = (out / "passes" / "t1-omp_num_threads.log").read_text()
    assert "step 0 loss=" in log and "onednn_verbose" not in log
    onednn = next((out / "t1-omp_num_threads" / "rank0").glob("onednn.*.log")).read_text()
    assert "step 0" not in onednn and onednn.startswith("onednn_verbose,")
    probe = [json.loads(x) for x in next((out / "a1" / "rank0").glob("cpuprobe*.jsonl")).read_text().splitlines()]
    assert probe[0]["instruments"] == ["torch_profiler", "onednn", "mkl"] and probe[-1]["unavailable"] == {}
    assert not list(out.glob("*/rank0/onednn-window.*.raw"))  # the stdout capture file is gone


@pytest.mark.slow
def test_knob_dynamic_on_the_cpu_backend_reaches(tmp_path, capsys):
    """Case 2 live: `forensics knob MKL_CBWR --values COMPATIBLE` (dynamic) on an aten.mm site."""
    code = main(["knob", "MKL_CBWR", "--site", MM, "--steps", "0", "--values", "COMPATIBLE", "--out",
                 str(tmp_path / "cap"), "--json", str(tmp_path / "k.json"), "--", sys.executable, str(TRAIN),
                 "--model", "mm", "--steps", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    data = json.loads((tmp_path / "k.json").read_text())
    dyn = data["dynamic"]
    assert dyn["device"] == "cpu" and dyn["summary"] == [
        "MKL_CBWR=COMPATIBLE: kernel unchanged, algo CHANGED, bits CHANGED (vs a1)"]
    reach, = dyn["reach"]  # the oneMKL CNR mode is part of the algo descriptor; the bits changed too
    assert reach.startswith("MKL_CBWR=COMPATIBLE: REACHES (algo or attributes changed, bits changed) at the site; "
                            "evidence: a1 `routine=SGEMM cnr=OFF nthr=")
    assert "k1-COMPATIBLE `routine=SGEMM cnr=COMPATIBLE nthr=" in reach
    assert "REACHES (algo or attributes changed" in out
    an = analyze(tmp_path / "cap", site=MM)
    cnr = {a: set(g) for a, g in an.calls[an.calls["site_label"].notna()].groupby("arm")["cnr"]}
    assert cnr == {"a1": {"OFF"}, "a2": {"OFF"}, "k1-COMPATIBLE": {"COMPATIBLE"}}


@pytest.mark.slow
def test_probe_never_breaks_the_program_when_the_profiler_is_taken(tmp_path):
    """A program that runs its own torch.profiler over the window: ours says unavailable, the run goes on."""
    script = tmp_path / "own_profiler.py"
    script.write_text(
        "import torch\n"
        "m = torch.nn.Linear(8, 8); opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):\n"
        "    for _ in range(3):\n"
        "        m(torch.randn(4, 8)).sum().backward(); opt.step()\n"
        "print('done')\n")
    from forensics.pipeline import run_kernel

    res = run_kernel("aten.addmm.default", [sys.executable, str(script)], device="cpu", arms=1, out=tmp_path / "c",
                     progress=False, timeout_s=300)
    assert [(p.name, p.status) for p in res.passes] == [("a1", "ok")]
    log = (res.capture_dir / "passes" / "a1.log").read_text()
    assert "done" in log and "no active profiling session" not in log  # their profiler was left alone
    probe = [json.loads(x) for x in next((res.capture_dir / "a1" / "rank0").glob("cpuprobe*.jsonl")).read_text().splitlines()]
    reasons = [r for r in probe if r.get("event") == "unavailable"]
    assert [r["instrument"] for r in reasons] == ["torch_profiler"]
    assert os.path.exists(res.capture_dir / "a1" / "rank0" / "sites.jsonl")


@pytest.mark.slow
def test_a_backward_site_on_the_readme_example_is_named_and_both_arms_exit_0(tmp_path, capsys):
    """The README's next step after `forensics diff`: the wgrad site of the CPU example, step 0.

    Regression: the instruments used to start at the first site occurrence, here inside backward;
    the profiler started there lost its thread state when the autograd node returned and both
    arms died with SIGSEGV when it was stopped. They now start at the window's first forward GEMM.
    """
    site = "gemm:NT:acc0:grad1#1"
    out = tmp_path / "cap"
    code = main(["kernel", "--site", site, "--ranks", "0", "--steps", "0", "--device", "cpu", "--out", str(out),
                 "-q", "--timeout", "300", "--", sys.executable, str(REPO / "examples" / "cpu-divergence" / "train.py"),
                 "--threads", "1"])
    text = capsys.readouterr().out
    assert code == 0, text
    an = analyze(out, site=site)
    import yaml

    arms = yaml.safe_load((out / "manifest.yaml").read_text())["arms"]
    assert [(a["name"], a["status"], a["rc"]) for a in arms] == [("a1", "ok", 0), ("a2", "ok", 0)]
    v = _verdicts(an)
    assert {k: (x[0], x[1]) for k, x in v.items()} == {("a1", site): (NAMED, "aten::mm"), ("a2", site): (NAMED, "aten::mm")}
    for ident in an.verdicts["identity"]:  # who ran, on a fresh capture: the wgrad mm (dy.t(), x) is SGEMM N,T
        assert ident == {"conflicts": [], "checked": ["operation", "problem size", "layout", "precision"],
                         "unchecked": []}
    assert "verdict: 1 implementation(s) NAMED" in text
    assert "aten::mm -> oneMKL SGEMM" in (out / "analysis" / "report.md").read_text()
    for arm in ("a1", "a2"):
        log = (out / "passes" / f"{arm}.log").read_text()
        assert "threads=1 loss=" in log and "no active profiling session" not in log
        probe = [json.loads(x) for x in next((out / arm / "rank0").glob("cpuprobe*.jsonl")).read_text().splitlines()]
        assert probe[-1]["event"] == "summary" and probe[-1]["unavailable"] == {}


@pytest.mark.slow
def test_instruments_first_wanted_inside_backward_leave_the_profiler_off_and_the_program_alive(tmp_path):
    """No GEMM before backward: the profiler is not started there (it would be lost), says why; the run goes on."""
    script = tmp_path / "backward_only_gemm.py"
    script.write_text(
        "import torch\n"
        "class Scale(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x, w):\n"
        "        ctx.save_for_backward(x, w)\n"
        "        return x * w.sum()\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        x, w = ctx.saved_tensors\n"
        "        return g * w.sum(), torch.mm(x.t(), g).sum().expand_as(w)\n"
        "x = torch.randn(64, 32); w = torch.randn(32, 32, requires_grad=True)\n"
        "opt = torch.optim.SGD([w], lr=0.1)\n"
        "for _ in range(2):\n"
        "    Scale.apply(x, w).sum().backward(); opt.step()\n"
        "print('done')\n")
    from forensics.pipeline import run_kernel

    res = run_kernel("aten.mm.default", [sys.executable, str(script)], device="cpu", arms=1, out=tmp_path / "c",
                     steps="0", progress=False, timeout_s=300)
    assert [(p.name, p.status) for p in res.passes] == [("a1", "ok")]
    log = (res.capture_dir / "passes" / "a1.log").read_text()
    assert "done" in log and "no active profiling session" not in log
    probe = [json.loads(x) for x in next((res.capture_dir / "a1" / "rank0").glob("cpuprobe*.jsonl")).read_text().splitlines()]
    assert [r["instrument"] for r in probe if r.get("event") == "unavailable"] == ["torch_profiler"]
    assert "inside backward" in probe[-1]["unavailable"]["torch_profiler"]
    sites = [json.loads(x) for x in next((res.capture_dir / "a1" / "rank0").glob("sites*.jsonl")).read_text().splitlines()]
    assert [r["label"] for r in sites if r.get("event") == "site"] == ["aten.mm.default#1"]


# --------------------------------------------------------------------------- bundle
def test_bundle_of_a_cpu_capture_carries_the_library_lines_and_an_honest_repro(tmp_path):
    import subprocess
    import tarfile

    from forensics.evidence.bundle import write_bundle

    write_bundle(FIX / "conv1d-threads", tmp_path / "conv.tar.gz", site=CONV)
    with tarfile.open(tmp_path / "conv.tar.gz") as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        report = tar.extractfile(f"{top}/report.md").read().decode()
        repro = tar.extractfile(f"{top}/repro.py").read().decode()
        mkl = [n for n in names if "/raw/a1/rank0/mkl." in n]
        onednn = [n for n in names if "/raw/t1-omp_num_threads/rank0/onednn." in n]
        assert len(mkl) == 1 and len(onednn) == 1
        assert tar.extractfile(mkl[0]).read().decode().count("SGEMM(") == 8  # the site's 2 x 4 calls only
        assert tar.extractfile(onednn[0]).read().decode().count(",convolution,jit_1x1:") == 2
    assert "From the library logs (oneDNN verbose, oneMKL verbose)" in report
    assert "| torch_profiler | onednn | mkl |" in report and "cuBLASLt log (`[Trace]`" not in report
    assert "two independent instruments agree on the implementation-op execution count" in report
    assert "## Execution counts per instrument" in report and "launch count" not in report
    # the convolution itself is rerun (not the SGEMMs under it), at the captured thread count
    assert "torch.ops.aten.convolution.default" in repro and "THREADS = 1" in repro
    assert "nothing to run" not in repro
    write_bundle(FIX / "mm-cbwr", tmp_path / "mm.tar.gz", site=MM)
    with tarfile.open(tmp_path / "mm.tar.gz") as tar:
        top = tar.getnames()[0].split("/")[0]
        tar.extractall(tmp_path / "mm", filter="data")
    r = subprocess.run([sys.executable, str(tmp_path / "mm" / top / "repro.py"), "--device", "cpu"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "m=64 n=16 k=32 trans=TN float32 x float32 -> float32" in r.stdout and "from oneMKL verbose log" in r.stdout
    assert "threads: 2 (captured: oneMKL verbose log (NThr))" in r.stdout  # the arm's NThr:2, set before the GEMM
    assert "ONEDNN_VERBOSE" not in r.stdout  # an instrument's setting is no knob


@pytest.mark.slow
def test_cpu_backend_under_torchrun_rank_local_and_nothing_from_the_launcher(tmp_path, capsys):
    """Two ranks under torchrun: every rank's own files; the agent (no RANK, window from step 0) runs no
    occurrence, so it starts no instrument and writes nothing."""
    out = tmp_path / "cap"
    code = main(["kernel", "--device", "cpu", "--site", MM, "--steps", "0", "--arms", "1", "--out", str(out), "-q",
                 "--timeout", "300", "--", sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                 str(TRAIN), "--model", "mm", "--steps", "1"])
    assert code == 0, capsys.readouterr().out
    files = sorted(p.relative_to(out / "a1").as_posix() for p in (out / "a1").rglob("*") if p.is_file())
    ranks = {f.split("/")[0] for f in files if f.startswith("rank")}
    assert ranks == {"rank0", "rank1"}
    for r in ("rank0", "rank1"):
        mine = [f.split("/")[1].split(".")[0] for f in files if f.startswith(r + "/")]
        assert sorted(mine) == ["cpuprobe", "mkl", "sites", "torchprof"]  # one of each: no launcher's extra files
    an = analyze(out, site=MM)
    assert set(an.verdicts["verdict"]) == {NAMED} and sorted(set(an.verdicts["rank"])) == [0, 1]
    assert len(an.verdicts) == 10  # 5 aten.mm per rank in step 0
