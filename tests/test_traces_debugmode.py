"""PyTorch DebugMode hash dumps: produced IN THE TEST by the installed torch, in subprocesses.

Two runs of one small CPU workload that genuinely differ (``torch.set_num_threads(1)`` vs ``(4)``
changes the split of a float sum, so ``aten.sum`` gives different bits from equal inputs; the test
checks the sums really differ) and a control rerun with the same thread count that does not.
Each run writes the structured dump (:func:`forensics.tracediff.traces.debugmode.dump`) and the raw
``debug_string()`` text. Only the malformed-file cases are SYNTHETIC mutations of these real dumps.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.tracediff.diff import diff_paths
from forensics.core.errors import BadInput
from forensics.tracediff.traces import detect_format
from forensics.tracediff.traces import debugmode as dm

pytest.importorskip("torch.utils._debug_mode", reason="this torch has no DebugMode")

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

WORKLOAD = r"""
import sys
from pathlib import Path
import torch
from forensics.tracediff.traces.debugmode import capture, dump

threads, out = int(sys.argv[1]), Path(sys.argv[2])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 4096, generator=g)
xs = torch.randn(8, 32, generator=g)  # GEMMs this small run on one thread on any CPU (on an AMX
w = torch.randn(16, 32, generator=g, requires_grad=True)  # machine a 256x4096 one split by threads)
with capture(hash_fn=["hash_tensor", "norm"]) as mode:
    h = xs @ w.t()                # a Linear forward: TN
    s = x.sum()                   # the float reduction whose split follows the thread count
    loss = (torch.relu(h) * s).sum()
    loss.backward()               # the wgrad mm: NT, backward
(out / "text").mkdir(parents=True)
dump(mode, out / "debugmode.rank0.jsonl", rank=0, step=1)
with open(out / "text" / "rank0.txt", "x") as f:
    f.write(mode.debug_string())
(out / "sum.hex").write_text(float(s).hex())
try:  # a second dump to the same path must be refused, the first left intact
    dump(mode, out / "debugmode.rank0.jsonl", rank=0, step=1)
except FileExistsError:
    (out / "overwrite-refused").write_text("yes")
"""


def _start(threads: int, out: Path) -> subprocess.Popen:
    repo = str(Path(__file__).resolve().parents[1])
    return subprocess.Popen([sys.executable, "-c", WORKLOAD, str(threads), str(out)], cwd=repo,
                            env={**os.environ, "PYTHONPATH": repo}, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three independent processes, started together (the torch import dominates their cost)."""
    base = tmp_path_factory.mktemp("debugmode")
    arms = {"a": 1, "b": 4, "c": 1}
    procs = {k: _start(t, base / k) for k, t in arms.items()}
    for k, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, f"workload {k} failed: {err[-2000:]}"
    return {k: base / k for k in arms}


def test_the_runs_really_differ_and_the_control_does_not(runs):
    sums = {k: (p / "sum.hex").read_text() for k, p in runs.items()}
    assert sums["a"] != sums["b"], "thread count did not change the float sum: the workload is not a divergence"
    assert sums["a"] == sums["c"]


def test_features_of_the_installed_torch():
    f = dm.features()
    assert f["debug_mode"] and f["log_tensor_hashes"] and f["hash_inputs"]


def test_structured_dump_reads_with_evidence_and_gemm_meta(runs):
    trace = dm.read(runs["a"] / "debugmode.rank0.jsonl")
    recs = trace.records(0)
    assert trace.format == "debugmode" and trace.run_info["hash_fn"] == ["hash_tensor", "norm"]
    mms = [r for r in recs if r.name == "aten.mm.default"]
    assert mms[0].extra["gemm"] == {"layout": "TN", "acc": 0, "grad": 0}  # x @ w.t()
    assert mms[0].phase == "forward" and mms[-1].phase == "backward"
    assert {r.extra["gemm"]["grad"] for r in mms[1:]} == {1}
    s = next(r for r in recs if r.name == "aten.sum.default")
    assert s.identity == "aten.sum.default:1" and s.step == 1
    assert s.inputs[0].evidence == "full" and s.inputs[0].shape == (256, 4096) and s.inputs[0].dtype == "float32"
    assert s.outputs[0].shape == () and s.outputs[0].digest.isdigit()


def test_inputs_of_the_origin_are_bit_equal(runs):
    """The sum's input carries the same hash_tensor in both runs (the input test passes on bits)."""
    def sum_line(run: Path) -> dict:
        lines = (run / "debugmode.rank0.jsonl").read_text().splitlines()[1:]
        return next(json.loads(x) for x in lines if json.loads(x)["op"] == "aten.sum.default")

    a, b = sum_line(runs["a"]), sum_line(runs["b"])
    assert a["input_hash"][0][0][0] == b["input_hash"][0][0][0]  # hash_tensor of x
    assert a["hash"][0] != b["hash"][0]


def test_norm_only_hash_is_summary_evidence():
    (d,) = dm._tensors([836425.2137485787], "t: f32[256, 4096]", ["norm"])
    assert d.evidence == "summary" and d.shape == (256, 4096)
    (d,) = dm._tensors([[9274346530863579136, 836425.2137485787]], "t: f32[256, 4096]", None)
    assert d.evidence == "full" and d.digest == "9274346530863579136"


@pytest.mark.parametrize("form", ["debugmode.rank0.jsonl", "text"])
def test_divergence_found_at_the_sum(runs, form):
    rep = diff_paths(runs["a"] / form, runs["b"] / form)
    d = rep.ranks[0].first_divergence
    assert rep.format == "debugmode"
    # DebugMode's hash_tensor digest is an XOR (order-independent): equal inputs are a screen, so
    # the ORIGIN is unproven and says why (issue 13: an XOR digest never proves equality)
    assert (d.verdict, d.evidence, d.identity, d.site) == ("ORIGIN", "unproven", "aten.sum.default:1", "aten.sum.default")
    assert d.input_evidence == "order-independent input digest"
    ctl = diff_paths(runs["a"] / form, runs["c"] / form)
    assert not ctl.diverged and ctl.pattern == "none"


def test_detection_and_mixed_formats_refused(runs):
    megatron_run = Path(__file__).resolve().parent / "data" / "megatron" / "run_a"
    assert detect_format(runs["a"] / "text") == "debugmode"
    assert detect_format(runs["a"] / "text" / "rank0.txt") == "debugmode"
    assert detect_format(runs["a"] / "debugmode.rank0.jsonl") == "debugmode"
    assert detect_format(megatron_run) == "megatron"
    with pytest.raises(BadInput, match="format 'megatron' differs"):
        diff_paths(runs["a"] / "text", megatron_run)


def test_cli_diff_on_debugmode(runs, tmp_path, capsys):
    from forensics.cli import main

    out = tmp_path / "report.json"
    code = main(["diff", str(runs["a"] / "text"), str(runs["b"] / "text"), "--json", str(out)])
    assert code == 1
    rep = json.loads(out.read_text())
    assert rep["ranks"]["0"]["first_divergence"]["identity"] == "aten.sum.default:1"


def test_bad_files_are_one_line_with_file_and_line(runs, tmp_path):
    real = (runs["a"] / "debugmode.rank0.jsonl").read_text()
    cut = tmp_path / "cut.rank0.jsonl"
    cut.write_text(real[: len(real) - 40])  # SYNTHETIC: truncated mid-line
    with pytest.raises(BadInput) as e:
        dm.read(cut)
    n = real[: len(real) - 40].count("\n") + 1
    assert str(e.value).startswith(f"{cut}:{n}: truncated line")
    foreign = tmp_path / "foreign.rank0.jsonl"
    foreign.write_text('{"schema": "something.else"}\n')
    with pytest.raises(BadInput, match=r"foreign\.rank0\.jsonl:1: foreign file"):
        dm.read(foreign)
    text = (runs["a"] / "text" / "rank0.txt").read_text().splitlines()
    garbled = tmp_path / "garbled.rank0.txt"
    garbled.write_text("\n".join(text[:2] + ["    aten::mm(t: f32[2, 2]  ->  # {'hash': (1,"] + text[2:]) + "\n")
    with pytest.raises(BadInput, match=r"garbled\.rank0\.txt:3: not a DebugMode"):
        dm.read(garbled)
    nohash = tmp_path / "nohash.rank0.txt"
    nohash.write_text("    aten::mm(t: f32[2, 2], t: f32[2, 2])  ->  t: f32[2, 2]\n")
    with pytest.raises(BadInput, match="no tensor hashes"):
        dm.read(nohash)
    empty = tmp_path / "empty.rank0.jsonl"
    empty.write_text("")
    with pytest.raises(BadInput):
        dm.read(empty)


def test_dump_never_overwrites(runs):
    """The workload dumped twice to one path: the second was refused and the first is intact."""
    assert (runs["a"] / "overwrite-refused").read_text() == "yes"
    assert dm.read(runs["a"] / "debugmode.rank0.jsonl").records(0)[-1].source.endswith(
        f":{len((runs['a'] / 'debugmode.rank0.jsonl').read_text().splitlines())}")


def test_rank_named_files_in_one_directory(runs, tmp_path):
    """Per-rank files: the real rank-0 dumps placed as rank0 and rank1 of a two-rank run."""
    import shutil

    for arm in ("a", "b"):
        (tmp_path / arm).mkdir()
        for r in (0, 1):
            shutil.copy(runs[arm] / "text" / "rank0.txt", tmp_path / arm / f"rank{r}.txt")
    assert sorted(dm.rank_files(tmp_path / "a")) == [0, 1]
    rep = diff_paths(tmp_path / "a", tmp_path / "b")
    assert rep.pattern == "op_nondeterministic" and rep.site == "aten.sum.default"
    assert all(rep.ranks[r].first_divergence.identity == "aten.sum.default:1" for r in (0, 1))
