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
from probes.window import StepWindow, parse_steps  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)


def trace(tmp_path: Path, fn, steps: str = "all", max_records: int = 100_000, chunks: bool = True,
          optimizer_hook: bool = False, ordered: str = "auto") -> list[dict]:
    """Run ``fn`` under the tracer; return the file's lines as dicts (header first)."""
    f = trace_in_process(tmp_path, fn, steps, max_records, chunks, optimizer_hook, ordered)
    return [json.loads(line) for line in f.read_text().splitlines()]


def ordered(t) -> str:
    """The order-sensitive digest the tracer records for a CPU tensor: xxh3-64 of its row-major bytes."""
    import xxhash

    return format(xxhash.xxh3_64_intdigest(t.contiguous().numpy().tobytes()), "016x")


def hexdigest(t) -> str:
    """The tracer's order-independent digest, computed here independently: for CPU tensors of 4- and
    8-byte real elements the XOR of the elements' bits (Python ints), else torch.hash_tensor."""
    size = t.element_size()
    if t.device.type == "cpu" and size in (4, 8) and not t.is_complex() and t.dtype != torch.bool:
        words = t.detach().reshape(-1).contiguous().view({4: torch.int32, 8: torch.int64}[size]).tolist()
        acc = 0
        for w in words:
            acc ^= w & ((1 << (8 * size)) - 1)
        return format(acc, "016x")
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
    assert header["schema"] == "forensics.optrace" and header["version"] == 2 and header["rank"] == 0
    assert "torch" in header["versions"] and isinstance(header["env"], dict)
    assert footer["type"] == "footer" and footer["records"] == len(recs) and footer["dropped"] == 0
    ids = [r["id"] for r in recs]
    assert ids == ["aten.add.Tensor:1", "aten.add.Tensor:2", "aten.sum.default:1"]
    assert [r["seq"] for r in recs] == [0, 1, 2]
    first = recs[0]
    # a CPU tensor's order-sensitive digest stands alone, inputs and outputs (it proves equality and
    # difference: no XOR pass; a producer's output and its consumer's input carry the same kind)
    assert first["in"][0] == {"s": [8, 4], "t": "float32", "n": 32, "o": ordered(x)}
    assert first["out"][0] == {"s": [8, 4], "t": "float32", "n": 32, "o": ordered(x + y)}
    assert recs[1]["in"][0] == first["out"][0]
    assert recs[2]["out"][0]["o"] == ordered(out["s"]) and recs[2]["out"][0]["s"] == []
    assert header["ordered"]["cpu_sides"] == optrace.CPU_SIDES
    # the scalar 1.0 is part of the second add's inputs (a non-tensor argument digest)
    assert recs[1]["in"][-1]["t"] == "args"


def test_inplace_output_digest_is_taken_after_the_op(tmp_path):
    x = torch.zeros(15)  # odd count: an XOR of equal words does not cancel to 0

    def fn():
        x.add_(1.0)

    rec = trace(tmp_path, fn)[1]
    assert rec["in"][0]["o"] == ordered(torch.zeros(15)) and "h" not in rec["in"][0]
    assert rec["out"][0]["o"] == ordered(torch.ones(15)) != ordered(torch.zeros(15))
    rec = trace(tmp_path / "off", fn, ordered="off")[1]  # without order-sensitive digests: the XOR
    assert rec["in"][0]["h"] == hexdigest(torch.ones(15)) and "o" not in rec["in"][0]
    assert rec["out"][0]["h"] == hexdigest(torch.full((15,), 2.0))


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


def test_records_with_and_without_pending_digests_keep_their_order_and_values(tmp_path):
    """A record with no digest left to resolve becomes its line at once; one holding a digest still
    on its device (a chunk digest, here) waits for the flush. One batch mixes both: the file has
    them in op order, every chunk digest resolved to hex."""
    v = torch.arange(64, dtype=torch.float32).flip(0)

    def fn():
        a = v + 1
        torch.sort(a)
        a.mul(2)
        torch.sort(v)
        v.sub(1)

    recs = [r for r in trace(tmp_path, fn) if r.get("op", "").startswith("aten.")]
    assert [r["op"] for r in recs] == ["aten.add.Tensor", "aten.sort.default", "aten.mul.Tensor",
                                       "aten.sort.default", "aten.sub.Tensor"]
    assert [r["seq"] for r in recs] == sorted(r["seq"] for r in recs)
    for r in recs[1::2]:
        chunks = r["out"][1]["c"]
        assert len(chunks) == optrace.N_CHUNKS and all(isinstance(c, str) and len(c) == 16 for c in chunks)
    assert recs[0]["out"][0]["o"] == ordered(v + 1) and recs[4]["out"][0]["o"] == ordered(v - 1)


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

    recs = trace(tmp_path, fn, ordered="off")[1:-1]  # XOR digests: a view's output reuses its input's
    by_op = {r["op"]: r for r in recs}
    assert by_op["aten.t.default"]["out"][0]["h"] == hexdigest(x.t()) == hexdigest(x)
    assert by_op["aten.view.default"]["out"][0]["s"] == [15]
    assert by_op["aten.slice.Tensor"]["out"][0]["h"] == hexdigest(x[1:])
    recs = trace(tmp_path / "o", fn)[1:-1]  # order-sensitive: reused only where the order is kept
    by_op = {r["op"]: r for r in recs}
    t_out = by_op["aten.t.default"]["out"][0]
    assert t_out["ol"] == [1, 0] and t_out["o"] == memory_digest(x.t(), [1, 0]) == ordered(x)
    assert by_op["aten.view.default"]["out"][0]["o"] == ordered(x.view(15)) == ordered(x)
    assert by_op["aten.slice.Tensor"]["out"][0]["o"] == ordered(x[1:])
    assert all("h" not in r["out"][0] for r in recs)


# --------------------------------------------------------------------------- order-sensitive digests

@pytest.mark.parametrize("mode,ins,outs", [("auto", True, True), ("inputs", True, True), ("all", True, True),
                                           ("off", False, False)])
def test_ordered_digest_modes(tmp_path, mode, ins, outs):
    x = torch.randn(6, 5)
    lines = trace(tmp_path, lambda: torch.cumsum(x, 0), ordered=mode)
    rec = lines[1]
    assert ("o" in rec["in"][0]) == ins and ("o" in rec["out"][0]) == outs
    if ins:  # a CPU tensor: o on both sides, in every mode but off, and then no XOR
        assert rec["in"][0]["o"] == ordered(x) and rec["out"][0]["o"] == ordered(torch.cumsum(x, 0))
        assert "h" not in rec["in"][0] and "h" not in rec["out"][0]
    else:
        assert rec["in"][0]["h"] == hexdigest(x) and rec["out"][0]["h"] == hexdigest(torch.cumsum(x, 0))
    assert lines[0]["ordered"]["mode"] == mode


def test_ordered_cpu_digest_sees_what_the_xor_cannot():
    v = torch.arange(64, dtype=torch.float32)
    swapped = v.clone()
    swapped[[3, 40]] = swapped[[40, 3]]
    assert hexdigest(v) == hexdigest(swapped)  # XOR: permutation-blind
    assert optrace.ordered_cpu(v) != optrace.ordered_cpu(swapped)
    signs = v.clone()
    signs[[5, 9]] = -signs[[5, 9]]  # two sign flips cancel in an XOR of the bits
    assert hexdigest(v) == hexdigest(signs) and optrace.ordered_cpu(v) != optrace.ordered_cpu(signs)
    # row-major order, whatever the strides: a transposed copy has the same digest as its view
    m = torch.randn(7, 3)
    assert optrace.ordered_cpu(m.t()) == optrace.ordered_cpu(m.t().contiguous()) != optrace.ordered_cpu(m)
    for dtype in (torch.bfloat16, torch.float16, torch.int8, torch.bool, torch.complex64, torch.float64):
        assert optrace.ordered_cpu(torch.ones(3, dtype=dtype)) is not None
    assert optrace.ordered_cpu(torch.tensor(2.0)) == optrace.ordered_cpu(torch.tensor([2.0]))


def memory_digest(t, layout) -> str:
    """What the tracer's ``o`` with layout ``ol`` must be, computed independently: xxh3-64 of the
    row-major bytes of ``t.permute(layout)`` (for a dense permuted tensor: its memory, in order)."""
    import xxhash

    return format(xxhash.xxh3_64_intdigest(t.permute(layout).contiguous().numpy().tobytes()), "016x")


def test_transposed_input_is_digested_in_memory_order_with_its_layout(tmp_path):
    a, w = torch.randn(4, 6), torch.randn(5, 6)
    rec = next(r for r in trace(tmp_path, lambda: torch.mm(a, w.t()))[1:-1] if r["op"] == "aten.mm.default")
    wt = rec["in"][1]
    assert wt["s"] == [6, 5] and wt["ol"] == [1, 0]
    assert wt["o"] == memory_digest(w.t(), [1, 0]) == ordered(w)  # w's own bytes: no copy needed
    assert wt["o"] != ordered(w.t())  # not the row-major digest: the layout says which it is
    assert "h" not in wt  # the order-sensitive digest stands alone
    assert "ol" not in rec["in"][0] and rec["in"][0]["o"] == ordered(a)
    header = trace(tmp_path / "h", lambda: torch.mm(a, a.t()))[0]
    assert header["ordered"]["cpu"] == optrace.ORDERED_CPU


def test_dense_order_is_canonical_and_refuses_gaps():
    x = torch.randn(2, 3, 4)
    assert optrace.dense_order(x) is None  # row-major
    p = x.permute(2, 0, 1)
    assert optrace.dense_order(p) == [1, 2, 0] and p.permute([1, 2, 0]).is_contiguous()
    assert optrace.dense_order(torch.randn(3, 1, 4).transpose(0, 2)) == [1, 2, 0]  # size-1 dim first
    # the same memory layout with a size-1 dim whose stride differs gives the same order
    y = torch.randn(4, 3).t().unsqueeze(1)
    z = torch.as_strided(y, y.shape, (1, 99, 3))
    assert y.stride() != z.stride() and optrace.dense_order(y) == optrace.dense_order(z)
    assert optrace.dense_order(torch.randn(1, 4).expand(3, 4)) is None  # overlapping: copied row-major
    assert optrace.dense_order(torch.randn(6, 4)[::2]) is None  # gaps
    assert optrace.dense_order(torch.randn(6, 4).t()[::2]) is None


def test_layout_digest_sees_a_permutation_and_a_strided_input_is_row_major(tmp_path):
    w = torch.randn(5, 6)
    w2 = w.clone()
    w2[[0, 3]] = w2[[3, 0]]

    def fn():
        torch.mm(torch.ones(2, 6), w.t())
        torch.mm(torch.ones(2, 6), w2.t())
        torch.mm(torch.ones(2, 3), w[:3, ::2].t())  # gaps: copied, row-major, no layout

    mms = [r for r in trace(tmp_path, fn)[1:-1] if r["op"] == "aten.mm.default"]
    assert hexdigest(w.t()) == hexdigest(w2.t())  # an XOR would be blind to the swap
    assert mms[0]["in"][1]["o"] != mms[1]["in"][1]["o"]  # the same layout, different order: seen
    assert "ol" not in mms[2]["in"][1] and mms[2]["in"][1]["o"] == ordered(w[:3, ::2].t())


def test_view_outputs_reuse_the_input_digest_only_over_the_same_bytes(tmp_path):
    """A view writes nothing: its output's order-sensitive digest is the input's when both are dense
    over the same bytes (memory order, the output's own dim order), else it is digested anew."""
    w = torch.randn(5, 6)
    gappy = torch.randn(5, 12)[:, ::2]  # not dense: its digest is of a row-major copy

    def fn():
        torch.ops.aten.unsqueeze(w.t(), 0)
        gappy.t()

    recs = trace(tmp_path, fn, ordered="all")[1:-1]
    t_w = next(r for r in recs if r["op"] == "aten.t.default" and r["in"][0]["s"] == [5, 6] and "ol" not in r["in"][0]
               and r["in"][0]["o"] == ordered(w))
    assert t_w["out"][0]["o"] == t_w["in"][0]["o"] == memory_digest(w.t(), [1, 0]) and t_w["out"][0]["ol"] == [1, 0]
    unsq = next(r for r in recs if r["op"] == "aten.unsqueeze.default")
    out = unsq["out"][0]
    assert out["ol"] == optrace.dense_order(w.t().unsqueeze(0))
    assert out["o"] == memory_digest(w.t().unsqueeze(0), out["ol"]) == unsq["in"][0]["o"]
    t_g = next(r for r in recs if r["op"] == "aten.t.default" and r["in"][0]["o"] == ordered(gappy))
    assert "ol" not in t_g["out"][0] and t_g["out"][0]["o"] == ordered(gappy.t()) != t_g["in"][0]["o"]


def test_ordered_device_digest_properties():
    """The on-device digest (used for GPU tensors; the same code runs on CPU tensors here)."""
    v = torch.randn(1000)
    d = optrace.ordered_device
    assert torch.equal(d(v), d(v.clone()))
    swapped = v.clone()
    swapped[[0, 999]] = swapped[[999, 0]]
    signs = v.clone()
    signs[[1, 2]] = -signs[[1, 2]]
    assert not torch.equal(d(v), d(swapped)) and not torch.equal(d(v), d(signs))
    assert d(v).dtype == torch.int64 and d(v).dim() == 0
    assert torch.equal(d(torch.ones(4, 2).t()), d(torch.ones(4, 2).t().contiguous()))
    assert d(torch.ones(3, dtype=torch.bfloat16)).dtype == torch.int64


# --------------------------------------------------------------------------- batches, faults, stops

def _installed(tmp_path: Path, **extra):
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["optrace"], steps="all", max_records=10**6, extra=extra)
    window = StepWindow(parse_steps("all"))
    inst = optrace.install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    return window, inst


def test_records_reach_the_file_in_bounded_batches(tmp_path, monkeypatch):
    """Before the process ends: every FLUSH_EVERY records, and after FLUSH_SECONDS."""
    x = torch.ones(4)
    monkeypatch.setattr(optrace.tracer, "FLUSH_SECONDS", 3600.0)
    window, inst = _installed(tmp_path)
    f = tmp_path / "rank0" / "trace.jsonl"
    try:
        for _ in range(optrace.FLUSH_EVERY + 10):
            x.add_(1)
        assert len(f.read_text().splitlines()) == 1 + optrace.FLUSH_EVERY  # header + one batch, on disk now
        monkeypatch.setattr(optrace.tracer, "FLUSH_SECONDS", 0.0)
        x.add_(1)
        assert len(f.read_text().splitlines()) == 1 + optrace.FLUSH_EVERY + 11
    finally:
        window.close()
        inst.close()
    assert json.loads(f.read_text().splitlines()[-1])["records"] == optrace.FLUSH_EVERY + 11


class _FullDisk:
    def __init__(self, real):
        self.real = real

    def write(self, text):
        raise OSError(28, "No space left on device")

    writelines = write

    def flush(self):
        pass

    def close(self):
        self.real.close()


def test_write_failure_stops_recording_once_and_never_breaks_the_program(tmp_path, capsys):
    x = torch.ones(4)
    window, inst = _installed(tmp_path)
    tracer = inst.tracer
    try:
        x.add_(1)
        tracer.flush()
        tracer.file = _FullDisk(tracer.file)
        for _ in range(optrace.FLUSH_EVERY * 2 + 5):  # several batches fail: one message
            x.add_(1)
        tracer.flush()
        assert torch.equal(x, torch.full((4,), float(optrace.FLUSH_EVERY * 2 + 7)))  # the program went on
    finally:
        window.close()
        inst.close()
    err = capsys.readouterr().err.splitlines()
    assert len([e for e in err if "forensics optrace" in e]) == 1
    assert "No space left on device" in err[0] and "tracing stopped after 1 records" in err[0]
    lines = (tmp_path / "rank0" / "trace.jsonl").read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["seq"] == 0  # header + the batch written; no footer


def test_footer_says_a_signal_stopped_the_run(tmp_path, monkeypatch):
    from probes import activate

    x = torch.ones(2)
    window, inst = _installed(tmp_path)
    x + 1
    monkeypatch.setitem(activate._state, "interrupted", 15)
    window.close()
    inst.close()
    footer = json.loads((tmp_path / "rank0" / "trace.jsonl").read_text().splitlines()[-1])
    assert footer["stopped"] == "signal 15 (SIGTERM)" and footer["records"] == 1


def test_close_in_the_middle_of_a_write_writes_the_footer_only(tmp_path):
    """A signal handler that closes the tracer while a batch is being written (same thread)."""
    x = torch.ones(2)
    window, inst = _installed(tmp_path)
    tracer = inst.tracer
    x + 1
    tracer.flush()
    x + 2  # pending, not written
    tracer.in_write = True  # as if the handler ran inside flush()
    tracer.close()
    lines = [json.loads(x) for x in (tmp_path / "rank0" / "trace.jsonl").read_text().splitlines()]
    assert [x.get("type") for x in lines] == ["header", None, "footer"]
    assert lines[-1]["records"] == 1 and lines[-1]["unwritten"] == 1
    window.close()
    inst.close()


def test_sigterm_is_held_while_a_batch_is_written(tmp_path):
    """A SIGTERM handler that closed the tracer in the middle of the buffered write could not write
    the footer ("reentrant call inside BufferedWriter"): seen under load in the kill test. The
    signal is held for the write and delivered right after it."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        pytest.skip("no pthread_sigmask on this platform")
    x = torch.ones(2)
    window, inst = _installed(tmp_path)
    tracer = inst.tracer
    x + 1
    tracer._ensure_open()
    real, seen = tracer.file, []

    class Spy:
        def write(self, data):
            seen.append(signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []))
            return real.write(data)

        def writelines(self, lines):
            seen.append(signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, []))
            return real.writelines(lines)

        def __getattr__(self, name):
            return getattr(real, name)

    tracer.file = Spy()
    tracer.flush()
    tracer.file = real
    assert seen == [True]
    assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # unblocked after it
    window.close()
    inst.close()


def test_uncaught_exception_is_in_the_footer(tmp_path):
    script = ("import torch, sys\n"
              "from pathlib import Path\n"
              "from probes import optrace\n"
              "from probes.config import ProbeConfig\n"
              "from probes.window import StepWindow, parse_steps\n"
              f"out = Path({str(tmp_path)!r})\n"
              "w = StepWindow(parse_steps('all'))\n"
              "inst = optrace.install(ProbeConfig(out_dir=str(out), probes=['optrace'], steps='all'), w, out / 'rank0', 0)\n"
              "import atexit; atexit.register(inst.close)\n"
              "w.start(); torch.ones(2) + 1\n"
              "raise ValueError('boom')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1])
    assert proc.returncode == 1 and "ValueError: boom" in proc.stderr
    footer = json.loads((tmp_path / "rank0" / "trace.jsonl").read_text().splitlines()[-1])
    assert footer["stopped"] == "uncaught ValueError"


# --------------------------------------------------------------------------- backward node, program

def test_backward_records_name_their_node_and_forward_op(tmp_path):
    lin = torch.nn.Linear(4, 3)
    x = torch.randn(5, 4)
    recs = trace(tmp_path, lambda: lin(x).relu().sum().backward())[1:-1]
    by_id = {r["id"]: r for r in recs}
    mm = next(r for r in recs if r["op"] == "aten.mm.default" and r["phase"] == "backward")
    assert mm["meta"]["node"] == "AddmmBackward0" and by_id[mm["meta"]["fwd"]]["op"] == "aten.addmm.default"
    thr = next(r for r in recs if r["op"] == "aten.threshold_backward.default")
    assert thr["meta"]["node"] == "ReluBackward0" and by_id[thr["meta"]["fwd"]]["op"] == "aten.relu.default"
    assert all("node" not in r.get("meta", {}) for r in recs if r["phase"] == "forward")


def test_packages_that_issue_ops_are_recorded_with_versions(tmp_path, monkeypatch):
    site = tmp_path / "lib" / "site-packages"
    pkg = site / "fakeops"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import torch\ndef run(x):\n    return torch.exp(x)\n")
    dist = site / "fakeops-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeops\nVersion: 1.2.3\n")
    (dist / "top_level.txt").write_text("fakeops\n")
    monkeypatch.syspath_prepend(str(site))
    import importlib

    fakeops = importlib.import_module("fakeops")
    lines = trace(tmp_path / "t", lambda: fakeops.run(torch.ones(3)))
    assert lines[0]["packages"] == {"fakeops": "1.2.3"} and lines[-1]["packages"] == {"fakeops": "1.2.3"}
    assert "sha256" in lines[0]["program"]


def test_digests_taken_before_a_flush_resolve_to_their_own_values(tmp_path, monkeypatch):
    """An optimizer step's inputs are digested before its own ops run; when those ops trigger a
    flush (here: every record), the step's record must still carry the values from before."""
    monkeypatch.setattr(optrace.tracer, "FLUSH_SECONDS", 0.0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = {}

    def fn():
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        before["w"] = model.weight.detach().clone()
        opt.step()

    lines = trace(tmp_path, fn)
    rec = next(x for x in lines[1:-1] if x.get("op") == "optimizer.step")
    assert rec["in"][0]["o"] == ordered(before["w"])
    assert rec["out"][0]["o"] == ordered(model.weight.detach()) != ordered(before["w"])


def test_device_digests_made_before_a_flush_are_resolved_by_a_later_one(tmp_path, monkeypatch):
    """float16 tensors get hash_tensor digests, resolved at flush (the path a GPU takes): the
    optimizer step's input digests are made before flushes that have nothing to resolve, and
    its record, written by a later flush, must still carry hex text, the values from before."""
    monkeypatch.setattr(optrace.tracer, "FLUSH_SECONDS", 0.0)
    model = torch.nn.Linear(4, 2).half()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = {}

    def fn():
        opt.zero_grad()
        model(torch.ones(3, 4, dtype=torch.float16)).sum().backward()
        before["w"] = hexdigest(model.weight.detach().clone())
        opt.step()
        torch.ones(2) + 1  # float32: text digests only, one more flush

    lines = trace(tmp_path, fn, optimizer_hook=True, ordered="off")  # CPU float16 inputs: hash_tensor, not xxh3
    digests = [e[k] for r in lines[1:-1] for side in ("in", "out") for e in r.get(side, []) if e
               for k in ("h", "o") if k in e]
    assert digests and all(isinstance(d, str) and len(d) == 16 and int(d, 16) >= 0 for d in digests)
    rec = next(x for x in lines[1:-1] if x.get("op") == "optimizer.step")
    assert rec["in"][0]["h"] == before["w"] != rec["out"][0]["h"]
    assert optrace._Digest.made == optrace._Digest.resolved


def test_issuers_walk_once_per_calling_frame_and_again_for_a_generator(tmp_path):
    """Ops called from one frame share its issuer (the walk is done once while it runs); a
    generator's frame, resumed from two callers, has two."""
    from probes.optrace_program import Issuers

    lib, user = tmp_path / "lib", tmp_path / "user"
    lib.mkdir()
    user.mkdir()
    (lib / "fakelib.py").write_text(
        "import sys\n"
        "def twice(note):\n    note(sys._getframe())\n    note(sys._getframe())\n"
        "def gen(note):\n    while True:\n        note(sys._getframe())\n        yield\n")
    for name in ("a", "b"):
        (user / f"{name}.py").write_text(
            "import fakelib\n"
            "def run(note, g):\n    fakelib.twice(note)\n    next(g)\n"
            "def resume(g):\n    next(g)\n")
    sys.path[:0] = [str(lib), str(user)]
    try:
        import importlib

        fakelib, a, b = (importlib.import_module(m) for m in ("fakelib", "a", "b"))
        iss = Issuers()
        iss.skip_roots += (str(lib.resolve()) + "/",)
        g = fakelib.gen(iss.note)
        a.run(iss.note, g)
        b.run(iss.note, g)
        assert iss.sources == {str((user / "a.py").resolve()), str((user / "b.py").resolve())}
        iss2 = Issuers()
        iss2.skip_roots += (str(lib.resolve()) + "/",)
        g2 = fakelib.gen(iss2.note)
        next(g2)  # first resumed here (this test file) ...
        b.resume(g2)  # ... then from b.py: the generator frame is walked again
        assert str((user / "b.py").resolve()) in iss2.sources and str(Path(__file__).resolve()) in iss2.sources
        iss2.forget()
        assert iss2.last is None
    finally:
        for m in ("fakelib", "a", "b"):
            sys.modules.pop(m, None)
        del sys.path[:2]


def test_a_compiled_function_runs_under_the_tracer(tmp_path):
    """torch.compile in the traced program: the tracer's handler runs outside dynamo's frame
    evaluation (directly when dynamo is not evaluating frames, else through torch._dynamo.disable),
    the program's result is unchanged and its ops are recorded."""
    torch._dynamo.reset()
    x = torch.randn(8, 4)

    @torch.compile(backend="eager")
    def f(v):
        return torch.cumsum(v * 2.0, 0).sin()

    expected = torch.cumsum(x * 2.0, 0).sin()
    got = {}
    recs = trace(tmp_path, lambda: got.setdefault("y", f(x)))[1:-1]
    assert torch.equal(got["y"], expected)
    assert any(r["op"] == "aten.cumsum.default" for r in recs)
    assert optrace._dynamo_callback() is None  # outside any compiled frame: the direct path


def test_split_gives_pytrees_leaves_in_pytrees_order():
    """The handler's own walk of plain lists and tuples (sizes, dims, lists of tensors) gives the
    leaves pytree gives, in the same order; other containers go to pytree. Only a top-level
    torch.Size with no container beside it stays one leaf (as before this walk existed)."""
    import collections

    from torch.utils._pytree import tree_leaves

    a, b = torch.ones(2), torch.nn.Parameter(torch.ones(3))
    nt = collections.namedtuple("nt", "x y")

    class SubList(list):
        pass

    cases = [((a, [0], True), {}), ((a, [512], b, b, 1e-5), {}), ((a, [a, b], None), {"alpha": 2}),
             ((a, (1, (2, [a]))), {"k": [a, None]}), ((a, torch.Size([2]), [3]), {}), ((a, [torch.Size([2, 3])]), {}),
             ((nt(a, 1),), {}), (({"x": a},), {}), ((a,), {"d": {"y": b}}), ((None, [None, a]), {}),
             ((a, []), {"z": ()}), ((a, [nt(b, 2)]), {}), ((a, SubList([1, 2])), {}), ((a, [1]), {"x": {"q": 1}})]
    for args, kwargs in cases:
        tensors, others = optrace._split(args, kwargs)
        leaves = tree_leaves((args, kwargs))
        want_t = [x for x in leaves if isinstance(x, torch.Tensor)]
        want_o = [x for x in leaves if not isinstance(x, torch.Tensor)]
        assert [id(x) for x in tensors] == [id(x) for x in want_t], (args, kwargs)
        assert others == want_o and [type(x) for x in others] == [type(x) for x in want_o], (args, kwargs)
    assert optrace._split((a, torch.Size([2, 3])), {}) == ([a], [torch.Size([2, 3])])


def test_a_void_op_that_writes_its_arguments_records_them_as_outputs(tmp_path):
    """``_foreach_*_`` and the fused optimizers return nothing: what they did is only in the
    arguments they write (``Tensor(a!)`` in the schema). Their records carry those arguments'
    digests after the op as outputs, and ``meta.written`` says how many each argument gave.
    Before, such records had no outputs, so a difference born inside a fused AdamW step could not
    be placed at it."""
    a, b = torch.ones(4), torch.arange(3.0)
    p = torch.nn.Parameter(torch.ones(4))
    p.grad = torch.full((4,), 0.5)
    opt = torch.optim.AdamW([p], lr=0.1, fused=True)

    def run():
        torch._foreach_add_([a, b], 1.0)
        opt.step()

    recs = {r["id"]: r for r in trace(tmp_path, run)[1:-1] if "op" in r}
    fe = recs["aten._foreach_add_.Scalar:1"]  # ours (:2 is the optimizer's step count)
    assert [e["o"] for e in fe["out"]] == [ordered(a), ordered(b)]  # after the op: 2s and 1, 2, 3
    assert fe["meta"]["written"] == {"self": 2}
    fused = recs["aten._fused_adamw_.default:1"]
    state = opt.state[p]
    assert fused["meta"]["written"] == {"self": 1, "grads": 1, "exp_avgs": 1, "exp_avg_sqs": 1, "max_exp_avg_sqs": 0}
    assert [e["o"] for e in fused["out"]] == [ordered(p.detach()), ordered(p.grad), ordered(state["exp_avg"]),
                                              ordered(state["exp_avg_sq"])]
    assert fused["out"][0]["o"] != fused["in"][0]["o"]  # the parameter moved: the output is after, the input before
    assert optrace._written_args(torch.ops.aten.add_.Tensor) == ()  # returns what it writes: outputs as before


def test_an_out_variants_output_buffer_is_no_input(tmp_path):
    """``torch.mm(a, b, out=buf)``: ``buf``'s contents before the op are overwritten, never read. A
    buffer allocated outside the traced ops (torch.compile's generated code allocates in C++) holds
    garbage there, which read as differing inputs between identical runs. The buffer is the
    record's output only."""
    a, b = torch.arange(4.0).reshape(2, 2), torch.ones(2, 2)
    buf = torch.full((2, 2), 7.0)
    recs = [r for r in trace(tmp_path, lambda: torch.mm(a, b, out=buf))[1:-1] if r.get("op") == "aten.mm.out"]
    assert len(recs) == 1
    assert [e["o"] for e in recs[0]["in"]] == [ordered(a), ordered(b)]  # no entry for buf's old contents
    assert [e["o"] for e in recs[0]["out"]] == [ordered(buf)]
    assert optrace._out_names(torch.ops.aten.max.dim_max) == {"max", "max_values"}


def test_an_op_that_overwrites_every_element_does_not_read_self(tmp_path):
    """``copy_``, ``fill_``, ``zero_`` and the random fills write every element of ``self`` from
    their other arguments: ``self``'s old contents (garbage, for a buffer from ``empty``) are no
    input of the record."""
    src = torch.arange(4.0)

    def run():
        buf = torch.empty(4)
        buf.copy_(src)
        buf.fill_(2.0)
        buf.zero_()
        torch.manual_seed(0)
        buf.uniform_()

    recs = {r["op"]: r for r in trace(tmp_path, run)[1:-1] if "op" in r}
    assert [e.get("o") for e in recs["aten.copy_.default"]["in"]] == [ordered(src)]
    for op in ("aten.fill_.Scalar", "aten.zero_.default", "aten.uniform_.default"):
        assert all(e["t"] in ("args", "generator") for e in recs[op]["in"]), recs[op]["in"]  # no tensor
    assert recs["aten.copy_.default"]["out"][0]["o"] == ordered(src)


def test_digests_leave_the_storage_resizable(tmp_path):
    """The tracer read CPU tensors through ``tensor.numpy()``, which marks the storage not resizable
    for good: FSDP2 then failed to free an unsharded parameter ("Trying to resize storage that is
    not resizable") and the traced program died. Every CPU digest now reads memory in place."""
    base = torch.randn(6, 8)
    views = [base.t(), base[:, ::2], base[1:3], torch.randn(3, 1).expand(3, 5), torch.randn(4, 4, dtype=torch.float64)]

    def run():
        for v in views:
            v.mul(1.0)  # a non-contiguous input, digested on the general path
        torch.randn(2, 3).t().add(1)

    trace(tmp_path, run)
    assert optrace.xor_cpu(base[:, ::2]) is not None and optrace.ordered_cpu(base.t()) is not None
    for v in [base, *views]:
        owner = v if v._base is None else v._base
        owner.untyped_storage().resize_(0)  # raised before


def test_a_tensor_subclass_is_never_read_in_place():
    """A wrapper subclass (FSDP2's DTensor parameters) has no memory of its own at ``data_ptr``:
    reading there killed the process (SIGSEGV) once digests read memory in place."""
    from torch.utils._python_dispatch import return_and_correct_aliasing  # noqa: F401 (torch has wrapper subclasses)

    class Wrapper(torch.Tensor):
        @staticmethod
        def __new__(cls, inner):
            return torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            return NotImplemented

    w = Wrapper(torch.randn(4, 4))
    with pytest.raises(TypeError):
        optrace._raw(w)
    with pytest.raises(TypeError):
        optrace._np_words(w, optrace.np.uint32)
