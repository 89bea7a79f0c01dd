"""The evidence bundle opened as a new user would, from a SYNTHETIC capture with planted secrets.

The capture (tests/synthetic_captures.py) is synthetic: real formats, made-up values, labelled
``synthetic: true``. Secrets are planted in the manifest, every environment.json and a site
header; none may survive anywhere in the tarball.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

import pytest
import yaml

from forensics.evidence.bundle import OutputExists, scrub, write_bundle
from forensics.cli import main
from forensics.core.errors import EXIT_BAD_INPUT, BadInput
from tests.synthetic_captures import (
    CUTLASS_BF16,
    PLANTED,
    SPLITK_REDUCE,
    Arm,
    Gemm,
    build_capture,
    wgrad_scenario,
)

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

SECTIONS = ["## Verdict", "## Kernel", "## Problem and algo descriptors", "## Launch counts per instrument",
            "## Arms", "## Discriminator table", "## Toggles", "## Environment", "## Plot", "## Files", "## Limits"]
FOCUS = "gemm:NT:acc0:grad1#2"


def _scenario() -> list[Gemm]:
    gemms = wgrad_scenario()
    # SYNTHETIC toggles: ws0 swaps the focus wgrad onto a CUTLASS kernel + split-K reduce; lt1 changes nothing.
    gemms[3].kernel_in = {"ws0": CUTLASS_BF16}
    gemms[3].algo_in = {"ws0": {"algoId": 21, "tile": "MATMUL_TILE_64x64", "stages": "MATMUL_STAGES_64x4",
                                "numSplitsK": 4, "reductionScheme": "CUBLASLT_REDUCTION_SCHEME_INPLACE"}}
    return gemms


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    root = tmp_path_factory.mktemp("bundle")
    arms = [Arm("a1"), Arm("a2"), Arm("ws0", toggle={"CUBLAS_WORKSPACE_CONFIG": ":0:0"}),
            Arm("lt1", toggle={"TORCH_BLAS_PREFER_CUBLASLT": "1"}), Arm("old", versions={"driver": "550.54.15"})]
    cap = build_capture(root / "cap", _scenario(), arms, plant_secrets=True)
    out = write_bundle(cap, root / "evidence.tar.gz")
    with tarfile.open(out) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    top = next(iter(members)).split("/")[0]
    return {"cap": cap, "path": out, "members": members, "top": top,
            "files": {name[len(top) + 1:]: data for name, data in members.items()}}


def test_tarball_listing_is_safe_and_complete(bundle):
    names = list(bundle["members"])
    for name in names:
        p = PurePosixPath(name)
        assert not p.is_absolute() and ".." not in p.parts and p.parts[0] == bundle["top"]
    files = set(bundle["files"])
    assert {"report.md", "evidence.json", "manifest.yaml", "repro.py"} <= files
    assert "launches.png" in files  # matplotlib is installed in the test environment
    raw = {f for f in files if f.startswith("raw/")}
    assert raw == {f"raw/{arm}/rank0/{name}" for arm in ("a1", "a2", "ws0", "lt1", "old")
                   for name in ("sites.jsonl", "cupti.jsonl", f"cublaslt.{_pid(arm)}.log")}


def _pid(arm: str) -> int:
    return 41000 + 101 * len(arm) + sum(map(ord, arm))


def test_report_reads_end_to_end(bundle):
    report = bundle["files"]["report.md"].decode()
    positions = [report.index(s) for s in SECTIONS]
    assert positions == sorted(positions), "sections out of order"
    assert report.startswith("# Evidence bundle: `gemm:NT:acc0:grad1`")
    assert "SYNTHETIC capture" in report
    assert f"Focus occurrence: `{FOCUS}`" in report
    assert "**NAMED**" in report and "cupti + cublaslt agree on 1 launch(es)" in report
    assert f"- focus `{FOCUS}`, arm `a1` rank 0: `sm90_xmma_gemm_bf16bf16_f32f32_f32" in report
    assert f"rank 0: `{FOCUS}` SAME KERNEL, DIFFERENT BITS (origin)" in report
    assert "The discriminator is output dtype: float32 DIVERGENT, bfloat16 CLEAN" in report
    # kernel symbol mangled and demangled
    assert CUTLASS_BF16 in report and "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm" in report
    # problem and algo descriptors
    assert "| a1 | 0 | gemm:NT:acc0:grad1#2 | 256 | 256 | 512 | NT |" in report
    assert "MATMUL_TILE_64x64" in report and "CUBLASLT_REDUCTION_SCHEME_INPLACE" in report
    # toggles: one changes the kernel, one does not
    assert "CUBLAS_WORKSPACE_CONFIG=:0:0: kernel CHANGED (a1 ran " in report
    assert "), algo CHANGED, bits unchanged (vs a1)" in report
    assert "TORCH_BLAS_PREFER_CUBLASLT=1: kernel unchanged, algo unchanged, bits unchanged (vs a1)" in report
    # a non-comparable arm is said to be so, not diffed
    assert "`old` vs `a1`: **NOT COMPARABLE** (version driver differs: a1=570.124.06 old=550.54.15)" in report
    # environment and plot
    assert "| a1 | NVIDIA H200 | 9.0 | 132 | 570.124.06 | 12.8 | 12.8.4.1 |" in report
    assert "![kernel launches per arm](launches.png)" in report
    assert bundle["files"]["launches.png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_evidence_json_is_machine_readable(bundle):
    ev = json.loads(bundle["files"]["evidence.json"])
    assert ev["schema"] == "forensics.bundle" and ev["synthetic"] is True
    assert ev["site"] == "gemm:NT:acc0:grad1" and ev["focus"] == FOCUS
    pairs = {p["arm"]: p for p in ev["comparison"]["pairs"]}
    assert pairs["a2"]["first_divergence"]["0"]["label"] == FOCUS
    assert pairs["old"]["comparable"] is False and pairs["old"]["occurrences"] == []
    assert ev["discriminator"]["gemm"]["separating"] == ["output dtype"]
    toggles = {r["arm"]: r for r in ev["toggles"]["results"]}
    assert toggles["ws0"]["kernel_changed"] is True and toggles["lt1"]["kernel_changed"] is False
    assert ev["environment"]["a1"]["device"] == "NVIDIA H200"


def test_raw_records_are_the_sites_only(bundle):
    files = bundle["files"]
    sites = [json.loads(x) for x in files["raw/a1/rank0/sites.jsonl"].decode().splitlines()]
    assert sites[0]["event"] == "header"
    assert [s["label"] for s in sites[1:]] == ["gemm:NT:acc0:grad1#1", FOCUS]
    ext_ids = {s["external_id"] for s in sites[1:]}
    cupti = [json.loads(x) for x in files["raw/a1/rank0/cupti.jsonl"].decode().splitlines()]
    kernels = [r for r in cupti if r["kind_name"] == "CONCURRENT_KERNEL"]
    ext = {r["correlation_id"]: r["external_id"] for r in cupti if r["kind_name"] == "EXTERNAL_CORRELATION"}
    assert len(kernels) == 2 and {ext[k["correlation_id"]] for k in kernels} == ext_ids
    assert {r["kind_name"] for r in cupti} == {"RUNTIME", "EXTERNAL_CORRELATION", "CONCURRENT_KERNEL"}
    lt = files[f"raw/ws0/rank0/cublaslt.{_pid('ws0')}.log"].decode().splitlines()
    assert len(lt) == 2 and all("[Trace][cublasLtMatmul]" in x for x in lt)
    assert "rows=256 cols=256" in lt[0] and "numSplitsK=4" in lt[1]


def test_no_planted_secret_survives(bundle):
    blob = b"".join(bundle["members"].values())
    for name, value in PLANTED.items():
        assert value.encode() not in blob, name
    assert b"Pl4ntedPassw0rd" not in blob and b"hf_Synthetic" not in blob
    manifest = yaml.safe_load(bundle["files"]["manifest.yaml"])
    assert manifest["arms"][0]["env"]["HF_TOKEN"] == "<redacted>"
    assert manifest["arms"][0]["env"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"  # knobs are kept


def test_scrub_catches_name_value_pairs_in_free_text():
    text = "WANDB_API_KEY=abc123def456 python train.py --token hf_abcdefghijklmnopqrstuvwxyz0123 https://u:pw@h/x"
    out = scrub(text, set())
    assert "abc123def456" not in out and "hf_abcdefghijklmnopqrstuvwxyz0123" not in out and "pw@" not in out
    argv = '{"argv": ["train.py", "--wandb-api-key", "k3y", "--db-password=hunter2", "--lr", "0.1"]}'
    out = scrub(argv, set())
    assert "k3y" not in out and "hunter2" not in out and '"--lr", "0.1"' in out
    assert scrub("python train.py --access-key AKIAXXXX --steps 2", set()) == \
        "python train.py --access-key <redacted> --steps 2"


def test_repro_runs_on_the_cpu_as_a_new_user_would(bundle, tmp_path):
    script = tmp_path / "repro.py"
    script.write_bytes(bundle["files"]["repro.py"])
    run = subprocess.run([sys.executable, str(script), "--device", "cpu"], capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert f"problem: {FOCUS} m=256 n=256 k=512 trans=NT bfloat16 x bfloat16 -> float32" in out
    assert "device: cpu; captured on NVIDIA H200: the device differs" in out
    assert "knobs: CUBLAS_WORKSPACE_CONFIG=:4096:8" in out and "HF_TOKEN" not in out
    assert "run 2: out [256, 256] float32" in out and "result: IDENTICAL across 2 runs" in out


def test_never_overwrites(bundle):
    before = bundle["path"].read_bytes()
    with pytest.raises(OutputExists, match="exists .a file.; forensics never overwrites a bundle"):
        write_bundle(bundle["cap"], bundle["path"])
    assert bundle["path"].read_bytes() == before


def test_cli_site_not_in_capture_is_one_line(bundle, tmp_path, capsys):
    code = main(["bundle", str(bundle["cap"]), "-o", str(tmp_path / "b.tar.gz"), "--site", "gemm:TT:acc1:grad1"])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT and len(err.splitlines()) == 1
    assert err.startswith(f"forensics: bad input: {bundle['cap']}: site gemm:TT:acc1:grad1 is not in the capture")
    assert not (tmp_path / "b.tar.gz").exists()


def test_cli_existing_output_is_one_line(bundle, capsys):
    code = main(["bundle", str(bundle["cap"]), "-o", str(bundle["path"])])
    err = capsys.readouterr().err.strip()
    assert code == EXIT_BAD_INPUT and len(err.splitlines()) == 1
    assert err == (f"forensics: {bundle['path']} exists (a file); not overwriting the bundle "
                   "(--force replaces it, or choose another -o)")


def test_cli_force_replaces_the_bundle_whole(bundle, tmp_path, capsys):
    path = tmp_path / "evidence.tar.gz"
    path.write_bytes(b"stale")
    assert main(["bundle", str(bundle["cap"]), "-o", str(path), "--force"]) == 0
    assert tarfile.is_tarfile(path) and f"wrote {path}" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["evidence.tar.gz"]  # no temporary file left


def test_capture_without_site_records(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, extra_kernels=(SPLITK_REDUCE,))]  # SYNTHETIC
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1")])
    Path(cap / "a1" / "rank0" / "sites.jsonl").unlink()
    with pytest.raises(BadInput, match="no site records"):
        write_bundle(cap, tmp_path / "b.tar.gz")
    assert not (tmp_path / "b.tar.gz").exists()


def test_extra_section_from_another_tool(tmp_path):
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, diverge_in=("a2",))]  # SYNTHETIC
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")])
    section = tmp_path / "knob.section.json"
    section.write_text(json.dumps({"title": "Knob scope: NVTE_X", "markdown": "## Knob scope: `NVTE_X`\n\nnot on path\n",
                                   "data": {"name": "NVTE_X", "token": PLANTED["HF_TOKEN"]}}))
    code = main(["bundle", str(cap), "-o", str(tmp_path / "b.tar.gz"), "--section", str(section)])
    assert code == 0
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}
    report = files["report.md"].decode()
    assert report.index("## Knob scope: `NVTE_X`") < report.index("## Environment")
    assert json.loads(files["evidence.json"])["sections"][0]["data"]["name"] == "NVTE_X"
    assert PLANTED["HF_TOKEN"].encode() not in b"".join(files.values())
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2")
    assert main(["bundle", str(cap), "-o", str(tmp_path / "c.tar.gz"), "--section", str(bad)]) == EXIT_BAD_INPUT


def test_without_matplotlib_the_report_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    gemms = [Gemm("gemm:TN:acc0:grad0", 256, 512, 256, diverge_in=("a2",))]  # SYNTHETIC
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")])
    with tarfile.open(write_bundle(cap, tmp_path / "b.tar.gz")) as tar:
        names = [m.name.split("/", 1)[1] for m in tar.getmembers()]
        report = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("report.md"))).read().decode()
    assert "launches.png" not in names
    assert "No plot: matplotlib is not installed" in report
