"""The op tracer in-process: records, identities, digests, chunk digests, GEMM naming, budget,
window, never-overwrite, and the round trip through the native reader."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "hash_tensor"):
    pytest.skip("torch.hash_tensor missing (torch < 2.9)", allow_module_level=True)

from probes import optrace  # noqa: E402
from probes.config import ProbeConfig  # noqa: E402
from probes.window import StepWindow, install_optimizer_hook, parse_steps  # noqa: E402


def trace(tmp_path: Path, fn, steps: str = "all", max_records: int = 100_000, chunks: bool = True,
          optimizer_hook: bool = False) -> list[dict]:
    """Run ``fn`` under the tracer; return the file's lines as dicts (header first)."""
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["optrace"], steps=steps, max_records=max_records,
                      chunk_digests=chunks)
    window = StepWindow(parse_steps(steps))
    inst = optrace.install(cfg, window, tmp_path / "rank0", 0)
    unhook = install_optimizer_hook(window) if optimizer_hook else None
    window.start()
    try:
        fn()
    finally:
        window.close()
        inst.close()
        if unhook:
            unhook()
    f = tmp_path / "rank0" / "trace.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()]


def ordered(t) -> str:
    """The order-sensitive digest the tracer records for a CPU tensor: xxh3-64 of its row-major bytes."""
    import xxhash

    return format(xxhash.xxh3_64_intdigest(t.contiguous().numpy().tobytes()), "016x")


def hexdigest(t) -> str:
    return format(torch.hash_tensor(t).item() & ((1 << 64) - 1), "016x")


def test_records_identity_digests_and_header(tmp_path):
    x = torch.randn(8, 4)
    y = torch.randn(8, 4)
    out = {}

    def fn():
        a = x + y
        b = a + 1.0
        out["b"] = b
        out["s"] = b.sum()

    lines = trace(tmp_path, fn)
    header, footer, recs = lines[0], lines[-1], lines[1:-1]
    assert header["schema"] == "forensics.optrace" and header["version"] == 1 and header["rank"] == 0
    assert "torch" in header["versions"] and isinstance(header["env"], dict)
    assert footer["type"] == "footer" and footer["records"] == len(recs) and footer["dropped"] == 0
    ids = [r["id"] for r in recs]
    assert ids == ["aten.add.Tensor:1", "aten.add.Tensor:2", "aten.sum.default:1"]
    assert [r["seq"] for r in recs] == [0, 1, 2]
    first = recs[0]
    assert first["in"][0] == {"s": [8, 4], "t": "float32", "n": 32, "h": hexdigest(x), "o": ordered(x)}
    assert "o" not in first["out"][0]  # order-sensitive digests on inputs (default "auto": CPU inputs)
    assert first["out"][0]["h"] == hexdigest(x + y)
    assert recs[2]["out"][0]["h"] == hexdigest(out["s"]) and recs[2]["out"][0]["s"] == []
    # the scalar 1.0 is part of the second add's inputs (a non-tensor argument digest)
    assert recs[1]["in"][-1]["t"] == "args"


def test_inplace_output_digest_is_taken_after_the_op(tmp_path):
    x = torch.zeros(15)  # odd count: an XOR of equal words does not cancel to 0

    def fn():
        x.add_(1.0)

    rec = trace(tmp_path, fn)[1]
    assert rec["in"][0]["h"] == hexdigest(torch.zeros(15))
    assert rec["out"][0]["h"] == hexdigest(torch.ones(15)) != rec["in"][0]["h"]


def test_chunk_digests_see_a_permutation_the_xor_misses(tmp_path):
    v = torch.arange(64, dtype=torch.float32)
    perm = v.flip(0)
    assert hexdigest(v) == hexdigest(perm)  # the whole-tensor XOR is permutation-blind
    assert not torch.equal(optrace.OpTracer._chunks(v), optrace.OpTracer._chunks(perm))
    # a swap inside one chunk is seen too
    swapped = v.clone()
    swapped[[0, 1]] = swapped[[1, 0]]
    assert not torch.equal(optrace.OpTracer._chunks(v), optrace.OpTracer._chunks(swapped))
    assert torch.equal(optrace.OpTracer._chunks(v), optrace.OpTracer._chunks(v.clone()))

    def fn():
        torch.sort(perm)

    rec = trace(tmp_path, fn)[1]
    assert rec["op"] == "aten.sort.default" and len(rec["out"][1]["c"]) == optrace.N_CHUNKS
    assert "c" in rec["in"][0]


def test_no_chunk_digests_when_disabled(tmp_path):
    v = torch.arange(64, dtype=torch.float32)
    rec = trace(tmp_path, lambda: torch.sort(v), chunks=False)[1]
    assert all("c" not in t for t in rec["out"])


def test_gemm_records_carry_te_site_names(tmp_path):
    lin = torch.nn.Linear(8, 4, bias=False)
    x = torch.randn(16, 8, requires_grad=True)

    def fn():
        lin(x).pow(2).sum().backward()  # a real dy (sum alone gives an expanded, stride-0 dy)

    recs = [r for r in trace(tmp_path, fn)[1:-1] if r.get("meta", {}).get("gemm")]
    sites = sorted(r["meta"]["gemm"]["site"] for r in recs)
    # fprop TN (y = x W^T), dgrad NN (dx = dy W), wgrad NT (dW = dy^T x)
    assert sites == ["gemm:NN:acc0:grad1", "gemm:NT:acc0:grad1", "gemm:TN:acc0:grad0"]
    phases = {r["meta"]["gemm"]["site"]: r["phase"] for r in recs}
    assert phases["gemm:TN:acc0:grad0"] == "forward" and phases["gemm:NT:acc0:grad1"] == "backward"


def test_backward_and_optimizer_records_and_step_window(tmp_path):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def fn():
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(3, 4)).sum().backward()
            opt.step()

    recs = trace(tmp_path, fn, steps="1", optimizer_hook=True)[1:-1]
    assert {r["step"] for r in recs} == {1}
    names = [r["op"] for r in recs]
    assert "backward.start" in names and "backward.end" in names
    opt_recs = [r for r in recs if r["op"] == "optimizer.step"]
    assert len(opt_recs) == 1 and opt_recs[0]["kind"] == "optimizer"
    assert len(opt_recs[0]["in"]) == 4 and len(opt_recs[0]["out"]) == 2  # params+grads before, params after


def test_record_budget_counts_dropped(tmp_path):
    x = torch.ones(4)

    def fn():
        for _ in range(10):
            x.add_(1)

    lines = trace(tmp_path, fn, max_records=3)
    assert len(lines) == 5 and lines[-1]["records"] == 3 and lines[-1]["dropped"] == 7


def test_non_blocking_copy_is_marked(tmp_path):
    x = torch.ones(4)

    def fn():
        torch.empty(4).copy_(x, non_blocking=True)

    recs = trace(tmp_path, fn)[1:-1]
    copy = [r for r in recs if r["op"] == "aten.copy_.default"][0]
    assert copy["meta"]["non_blocking"] is True


def test_generator_argument_is_stable_across_processes():
    g = torch.Generator().manual_seed(3)
    text = optrace._stable_repr(g)
    assert "0x" not in text and text.startswith("Generator(cpu,")
    assert text == optrace._stable_repr(torch.Generator().manual_seed(3))
    assert text != optrace._stable_repr(torch.Generator().manual_seed(4))
    assert optrace._stable_repr(object()) == "object"


def test_existing_trace_is_never_overwritten(tmp_path):
    (tmp_path / "rank0").mkdir()
    existing = tmp_path / "rank0" / "trace.jsonl"
    existing.write_text("keep me\n")
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["optrace"], steps="all")
    window = StepWindow(parse_steps("all"))
    inst = optrace.install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    torch.ones(2) + 1
    window.close()
    inst.close()
    assert existing.read_text() == "keep me\n"
    assert len(list((tmp_path / "rank0").glob("trace.*.jsonl"))) == 1


def test_native_reader_round_trip_and_self_diff(tmp_path):
    from forensics.tracediff.diff import diff_paths
    from forensics.tracediff.traces import detect_format
    from forensics.tracediff.traces.native import read

    trace(tmp_path, lambda: (torch.randn(4, 4) @ torch.randn(4, 4)).relu())
    assert detect_format(tmp_path) == "native"
    t = read(tmp_path)
    recs = t.ranks[0]
    assert [r.name for r in recs] == ["aten.randn.default", "aten.randn.default", "aten.mm.default", "aten.relu.default"]
    assert recs[2].extra["gemm"]["layout"] == "NN" and recs[2].outputs[0].shape == (4, 4)
    assert not diff_paths(tmp_path, tmp_path).diverged


def test_probes_package_is_free_until_enabled():
    code = ("import sys, probes, probes.config; cfg = probes.config.ProbeConfig(out_dir='x'); "
            "print('torch' in sys.modules, 'optrace' in cfg.probes)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.split()
    assert out == ["False", "False"]


def test_view_digest_reuse_matches_a_real_hash(tmp_path):
    x = torch.randn(5, 3)

    def fn():
        x.t()
        x.view(15)
        x[1:]  # a slice holds fewer elements: hashed, not reused

    recs = trace(tmp_path, fn)[1:-1]
    by_op = {r["op"]: r for r in recs}
    assert by_op["aten.t.default"]["out"][0]["h"] == hexdigest(x.t()) == hexdigest(x)
    assert by_op["aten.view.default"]["out"][0]["s"] == [15]
    assert by_op["aten.slice.Tensor"]["out"][0]["h"] == hexdigest(x[1:])
