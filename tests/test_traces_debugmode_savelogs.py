"""PyTorch DebugMode ``save_logs`` JSON and ``dump_tensor_hashes`` text read by ``forensics diff``.

The shipped pair (tests/fixtures/debugmode-save-logs, PROVENANCE.md) and a pair made IN THE TEST by
the installed torch (DebugMode around examples/cpu-divergence/train.py at 1 and 2 threads), diffed
against native traces (``forensics trace``) of the same program: both name the same ORIGIN. Only
the malformed-file cases are SYNTHETIC mutations of the real files.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.tracediff.diff import diff_paths, format_report
from forensics.tracediff.traces import _debugmode_hashes as dh
from forensics.tracediff.traces import debugmode as dm
from forensics.tracediff.traces import detect_format

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "debugmode-save-logs"
HASHES = REPO / "tests" / "fixtures" / "debugmode-tensor-hashes"
TRAIN = REPO / "examples" / "cpu-divergence" / "train.py"
WRAPPER = REPO / "tests" / "data" / "scripts" / "debugmode_save_logs.py"


def test_the_shipped_pair_names_the_wgrad_gemm_and_says_what_the_format_lacks():
    assert detect_format(FIX / "a") == "debugmode"
    report = diff_paths(FIX / "a", FIX / "b")
    d = report.ranks[0].first_divergence
    assert (d.verdict, d.identity, d.evidence) == ("ORIGIN", "aten.mm.default:3", "unproven")
    assert "order-independent" in d.input_evidence
    text = format_report(report)
    assert "lacks an order-sensitive digest" in text and "no GEMM site" in text.replace("GEMMs named", "no GEMM site")
    assert report.to_json()["lacks"] == list(dm.SAVE_LOGS_LACKS)


def test_the_same_run_twice_is_no_divergence_seen_not_proven(capsys):
    assert main(["diff", str(FIX / "a"), str(FIX / "same")]) == 0
    out = capsys.readouterr().out
    assert "no divergence seen (not proven" in out
    assert "; no divergence\n" not in out


def test_records_carry_the_calls_the_installed_torch_logged():
    recs = dm.read_saved_logs(FIX / "a" / "rank0.json")
    names = [r.name for r in recs]
    assert names.count("aten.mm.default") >= 3 and "aten.addmm.default" in names
    mm = next(r for r in recs if r.name == "aten.mm.default")
    assert mm.inputs[0].evidence == "full" and mm.inputs[0].shape is not None
    # the destination of uniform_ (uninitialised memory DebugMode does not hash) is not an input
    init = next(r for r in recs if r.name == "aten.uniform_.default")
    assert init.inputs[0].evidence == "metadata" and init.outputs[0].evidence == "full"


@pytest.mark.parametrize("mutation, words", [
    (lambda t: t[: len(t) // 2], "not JSON"),
    (lambda t: t.replace('"version": 1', '"version": 7', 1), "version 7"),
    (lambda t: t.replace('"call_depth": 1', '"call_depth": "x"', 1), r"logs\[0\]: a call without"),
])
def test_a_damaged_file_is_bad_input_naming_it(tmp_path, capsys, mutation, words):
    """SYNTHETIC: mutations of the real baseline file."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.json").write_text(mutation((FIX / "a" / "rank0.json").read_text()))
    with pytest.raises(BadInput, match=words):
        dm.read_saved_logs(bad / "rank0.json")
    assert main(["diff", str(bad), str(FIX / "b"), "--format", "debugmode"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rank0.json" in err


def _run(cmd: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.skipif(not hasattr(__import__("torch"), "hash_tensor"), reason="this torch has no hash_tensor")
def test_a_live_save_logs_pair_names_the_origin_the_native_traces_name(tmp_path):
    """Four real processes of one program: DebugMode save_logs at 1 and 2 threads, and the same
    program traced natively by ``forensics trace``; both diffs name the same first divergent op."""
    for d in ("dm1", "dm2", "h1", "h2"):
        (tmp_path / d).mkdir()
    args = ["--steps", "1"]
    procs = [
        _run([sys.executable, str(WRAPPER), "--hashes", "h1/rank0.txt", "dm1/rank0.json", str(TRAIN), "--threads", "1",
              *args], tmp_path),
        _run([sys.executable, str(WRAPPER), "--hashes", "h2/rank0.txt", "dm2/rank0.json", str(TRAIN), "--threads", "2",
              *args], tmp_path),
        _run([sys.executable, "-m", "forensics", "trace", "--out", "nat1", "--", sys.executable, str(TRAIN),
              "--threads", "1", *args], tmp_path),
        _run([sys.executable, "-m", "forensics", "trace", "--out", "nat2", "--", sys.executable, str(TRAIN),
              "--threads", "2", *args], tmp_path),
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    saved = json.loads((tmp_path / "dm1" / "rank0.json").read_text())
    assert saved["version"] == 1 and saved["logs"][0]["type"] == "op"
    native = diff_paths(tmp_path / "nat1", tmp_path / "nat2")
    logs = diff_paths(tmp_path / "dm1", tmp_path / "dm2")
    dn, dl = native.ranks[0].first_divergence, logs.ranks[0].first_divergence
    assert dn is not None and dn.verdict == "ORIGIN" and dn.evidence == "proven"
    assert dl is not None and dl.verdict == "ORIGIN"
    assert dl.identity == dn.identity, (dl.identity, dn.identity)
    assert dl.evidence == "unproven" and logs.lacks and not native.lacks
    text = diff_paths(tmp_path / "h1", tmp_path / "h2").ranks[0].first_divergence
    assert (text.verdict, text.identity, text.evidence) == ("ORIGIN", dn.identity, "unproven")


def test_the_writer_never_overwrites(tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils._debug_mode import DebugMode

    with DebugMode() as mode, DebugMode.log_tensor_hashes(hash_fn="hash_tensor"):
        torch.ones(3).add(1)
    path = dm.save_logs(mode, tmp_path / "rank0.json")
    before = path.read_text()
    with pytest.raises(FileExistsError):
        dm.save_logs(mode, path)
    assert path.read_text() == before and json.loads(before)["logs"]


def test_the_shipped_hash_dumps_name_the_same_op_and_say_what_they_lack(capsys):
    assert detect_format(HASHES / "a") == "debugmode"
    report = diff_paths(HASHES / "a", HASHES / "b")
    d = report.ranks[0].first_divergence
    assert (d.verdict, d.identity, d.evidence) == ("ORIGIN", "aten.mm.default:3", "unproven")
    assert report.lacks == list(dh.LACKS) and any("shapes and dtypes" in w for w in report.warnings)
    assert main(["diff", str(HASHES / "a"), str(HASHES / "same")]) == 0
    assert "no divergence seen (not proven" in capsys.readouterr().out


def test_hash_dump_records_keep_paths_and_modules():
    recs = dm._records(HASHES / "a" / "rank0.txt", 0)
    mm = [r for r in recs if r.name == "aten.mm.default"]
    assert len(mm) >= 3 and mm[0].extra["module"] == "<none>" and mm[0].extra["input_paths"][0] == "[0][0]"
    assert all(t.shape is None and t.evidence == "full" for t in mm[0].inputs)


@pytest.mark.parametrize("mutation, words", [
    (lambda t: t[: t.rindex("[<none>")], "declares 40 op"),
    (lambda t: t.replace("Output hashes: <root>=", "Output hashes: <root>=}", 1), "not a JSON value"),
    (lambda t: t.replace("Call index: 2\n", "Call index: two\n", 1), "not an integer"),
])
def test_a_damaged_hash_dump_is_bad_input_naming_file_and_line(tmp_path, mutation, words):
    """SYNTHETIC: mutations of the real baseline dump."""
    bad = tmp_path / "rank0.txt"
    bad.write_text(mutation((HASHES / "a" / "rank0.txt").read_text()))
    with pytest.raises(BadInput, match=words) as e:
        dm._records(bad, 0)
    assert str(e.value).startswith(f"{bad}:")
