"""A RECEIVER as the first divergence: where its differing input came from, in each run.

Every earlier record matched, so the difference did not come out of a traced op. The differ says
which traced op last wrote the input's bits in each run (forensics/tracediff/provenance.py) and
what follows: written outside the traced ops in one run only, in neither, or another tensor read
in each run. Before, a RECEIVER said "inputs DIFFER" and nothing about where to look (a real
2-rank DDP run: rank 1's first divergence is DDP's gradient bucket, filled by the C++ reducer's
all-reduce, which no traced op wrote). The programs below are traced for real, in this process.
"""
from __future__ import annotations

import ctypes

import pytest

torch = pytest.importorskip("torch")

from forensics.tracediff.diff import diff_paths, format_report  # noqa: E402
from forensics.tracediff.provenance import MAX_HITS, _line_offset  # noqa: E402
from forensics.tracediff.divergence import ORIGIN, RECEIVER  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)


def _first(tmp_path, program):
    a = trace_in_process(tmp_path / "a", lambda: program(False))
    b = trace_in_process(tmp_path / "b", lambda: program(True))
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert d is not None and d.verdict == RECEIVER, d
    return d, format_report(rep)


def _poke(t, value: float = 42.0, index: int = 0) -> None:
    """Write one element through memory: no dispatcher op (as a C++ library or another thread would)."""
    ctypes.c_float.from_address(t.data_ptr() + 4 * index).value = value


def _mul_then_add(poke: bool, sparse_first: bool = False) -> None:
    """y = arange * 2 (the traced writer); in run B one element of y is overwritten untraced; y + 1."""
    if sparse_first:
        torch.arange(4.0).reshape(2, 2).to_sparse()  # sparse: recorded as metadata only
    y = torch.arange(8.0).mul(2.0)
    if poke:
        _poke(y)
    y.add(1.0)


def test_a_value_written_outside_the_traced_ops_in_one_run(tmp_path):
    d, text = _first(tmp_path, _mul_then_add)
    assert d.name == "aten.add.Tensor"
    (src,) = d.input_sources
    assert src["input"] == 0
    assert src["writer_a"]["identity"] == "aten.mul.Tensor:1" and src["writer_b"] is None
    assert "in run B aten.mul.Tensor:1's output matched run A's" in src["reading"]
    assert "in run B the value was changed after it" in src["reading"]
    assert f"input 0: {src['reading']}" in text


def test_no_traced_op_wrote_the_value_in_either_run(tmp_path):
    def program(other: bool) -> None:
        import numpy as np

        x = torch.from_numpy(np.full(8, 2.0 if other else 1.0, dtype=np.float32))  # no dispatcher op
        x.mul(3.0)

    d, _ = _first(tmp_path, program)
    (src,) = d.input_sources
    assert src["writer_a"] is None and src["writer_b"] is None
    assert src["reading"].startswith("no traced op's output on this rank has these bits' digest before it, in either run")


def test_another_tensor_read_in_each_run(tmp_path):
    def program(swap: bool) -> None:
        p = torch.arange(4.0).mul(2.0)
        q = torch.arange(4.0).mul(3.0)
        (q if swap else p).add(1.0)

    d, _ = _first(tmp_path, program)
    (src,) = d.input_sources
    assert src["writer_a"]["identity"] == "aten.mul.Tensor:1"
    assert src["writer_b"]["identity"] == "aten.mul.Tensor:2"
    assert "(both outputs match across the runs): the op read another tensor in each run" in src["reading"]


def test_the_latest_writer_of_equal_bits_is_named_not_an_earlier_one(tmp_path):
    """Two traced ops write the same bits before the receiver; the later one is named (and the
    reading speaks of bits, not of one tensor)."""
    def program(poke: bool) -> None:
        torch.zeros(4).add(1.0)  # aten.add.Tensor:1 writes ones
        y = torch.zeros(4).add(1.0)  # aten.add.Tensor:2 writes the same bits
        if poke:
            _poke(y, 7.0)
        y.mul(5.0)

    d, _ = _first(tmp_path, program)
    (src,) = d.input_sources
    assert src["writer_a"]["identity"] == "aten.add.Tensor:2"
    assert "holds the bits of aten.add.Tensor:2's output" in src["reading"] and "another tensor was read" in src["reading"]


def test_an_origin_gets_no_input_sources(tmp_path):
    def program(threads: int) -> None:
        x = torch.ones(1 << 22).div_(3.0)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            x.sum()  # its summation order follows the thread count
        finally:
            torch.set_num_threads(before)

    a = trace_in_process(tmp_path / "a", lambda: program(1))
    b = trace_in_process(tmp_path / "b", lambda: program(2))
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d is not None and d.verdict == ORIGIN and d.input_sources == []


def test_line_offsets_across_chunks(tmp_path):
    f = tmp_path / "lines.txt"
    lines = [f"line {i}\n".encode() * (i % 3 + 1) for i in range(1, 200)]
    f.write_bytes(b"".join(lines))
    import mmap

    with open(f, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        data = f.read_bytes()
        starts = [0] + [i + 1 for i, c in enumerate(data) if c == 10][:-1]
        for n in (1, 2, 7, 100, len(starts)):
            assert _line_offset(mm, n, chunk=16) == starts[n - 1]
        assert _line_offset(mm, len(starts) + 2, chunk=16) is None
    assert MAX_HITS >= 1000


def test_kernel_from_a_receiver_report_says_where_the_input_came_from(tmp_path):
    """`forensics kernel --from` refuses a RECEIVER; its one line carries the reading."""
    import json

    from forensics.tracediff.from_report import site_from_report

    a = trace_in_process(tmp_path / "a", lambda: _mul_then_add(False))
    b = trace_in_process(tmp_path / "b", lambda: _mul_then_add(True))
    report = tmp_path / "report.json"
    report.write_text(json.dumps(diff_paths(a, b).to_json()))
    found = site_from_report(report)
    assert not found.ok and found.verdict == RECEIVER
    assert "input 0: in run A it holds the bits of aten.mul.Tensor:1's output" in found.reason
    assert "\n" not in found.reason


def test_a_writer_found_by_its_xor_digest_only_is_called_a_screen(tmp_path):
    a = trace_in_process(tmp_path / "a", lambda: _mul_then_add(False), ordered="off")
    b = trace_in_process(tmp_path / "b", lambda: _mul_then_add(True), ordered="off")
    (src,) = diff_paths(a, b).ranks[0].first_divergence.input_sources
    assert src["writer_a"]["by"] == "XOR digest"
    assert "aten.mul.Tensor:1's output (seq 1, by its XOR digest only (a screen, not proof))" in src["reading"]


def test_an_input_with_both_digests_finds_an_output_that_has_only_the_xor():
    """A device tensor's inputs carry both digests under --ordered-digests inputs, its outputs only
    the XOR: the writer is still found (by the XOR), never reported missing."""
    from forensics.tracediff.provenance import _holds
    from forensics.tracediff.traces import TensorDigest

    inp = TensorDigest(shape=(4,), dtype="float32", numel=4, digest="aa" * 8, ordered="bb" * 8)
    assert _holds(TensorDigest(shape=(4,), dtype="float32", numel=4, digest="aa" * 8), inp) == "XOR digest"
    assert _holds(TensorDigest(shape=(4,), dtype="float32", numel=4, digest="aa" * 8, ordered="bb" * 8),
                  inp) == "order-sensitive digest"
    assert _holds(TensorDigest(shape=(4,), dtype="float32", numel=4, digest="aa" * 8, ordered="cc" * 8), inp) is None
    assert _holds(TensorDigest(shape=(2, 2), dtype="float32", numel=4, digest="aa" * 8), inp) is None


def test_tensors_recorded_without_a_digest_earlier_are_said_to_hide_writes(tmp_path):
    a = trace_in_process(tmp_path / "a", lambda: _mul_then_add(False, sparse_first=True))
    b = trace_in_process(tmp_path / "b", lambda: _mul_then_add(True, sparse_first=True))
    (src,) = diff_paths(a, b).ranks[0].first_divergence.input_sources
    assert "run B also recorded tensors without a digest, metadata only, before it" in src["reading"]
