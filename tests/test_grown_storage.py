"""Storage-level resizes (``torch.UntypedStorage.resize_``, outside the dispatcher).

FSDP2 frees an unsharded parameter with ``untyped_storage().resize_(0)`` and re-allocates it with
``resize_(n)``: the grown bytes are uninitialised (the allocator's leftovers), read by a ``view``
before ``split_with_sizes_copy`` writes them. Two identical FSDP2 runs read different garbage
there, and with no traced producer the differ named the view a RECEIVER
(tests/test_trace_fsdp_real.py has the real program). The tracer now records each storage resize
(``storage.resize_``, kind ``event``) and marks a tensor entry read from a grown storage no traced op
has written since (``g``: the resize's identity); the differ passes over a record whose differing
inputs are such reads while its differing outputs are that memory still (a view of it). A reader
whose outputs differ because of it is judged (a RECEIVER that says why), never passed through.

The differ tests use SYNTHETIC traces (tests/test_diff.py's helpers); the tracer tests run real ops
in this process."""
from __future__ import annotations

import json

import pytest

from forensics.tracediff.diff import RECEIVER, diff_paths
from tests.test_diff import rec, tensor, write_trace


def _grown(h: str, shape=(128,), ident: str | None = "storage.resize_:1") -> dict:
    t = tensor(h, shape=shape, ordered=f"o{h}")
    del t["h"]  # a CPU tensor carries "o" alone
    if ident:
        t["g"] = ident
    return t


def _fsdp_like(garbage: str, g: bool = True, reader_out: str | None = None) -> list[dict]:
    """SYNTHETIC: a storage grown from 0 to 512 bytes, read by a view (its output is the same memory),
    then written whole by split_with_sizes_copy; ``reader_out`` adds an op that computes from the
    garbage instead (its output is no longer that memory)."""
    ident = "storage.resize_:1" if g else None
    recs = [
        rec("storage.resize_", 1, [{"s": None, "t": "args", "n": 3, "h": "00000000000000aa"}], [], kind="event",
            meta={"bytes": [0, 512], "device": "cpu"}),
        rec("aten.view.default", 1, [_grown(garbage, ident=ident), {"s": None, "t": "args", "n": 2, "h": "0" * 16}],
            [_grown(garbage, shape=(2, 64), ident=ident)]),
    ]
    if reader_out is not None:
        recs.append(rec("aten.add_.Tensor", 1, [_grown(garbage, shape=(2, 64), ident=ident), _grown("one", ident=None)],
                        [tensor(reader_out, shape=(2, 64))]))
    recs += [
        rec("fsdp.split_with_sizes_copy.default", 1, [tensor("gathered", shape=(2, 66))],
            [tensor("w", shape=(2, 64)), tensor("b", shape=(2, 2))]),
        rec("aten.mm.default", 1, [tensor("x"), tensor("w", shape=(2, 64))], [tensor("y")]),
    ]
    return recs


def test_a_view_of_a_grown_storage_whose_garbage_differs_is_passed_over(tmp_path):
    a = write_trace(tmp_path / "a", {0: _fsdp_like("garbage1")})
    b = write_trace(tmp_path / "b", {0: _fsdp_like("garbage2")})
    res = diff_paths(a, b).ranks[0]
    assert res.first_divergence is None
    (art,) = res.artifacts
    assert art.name == "aten.view.default" and "storage resize grew (storage.resize_:1)" in art.artifact
    assert "uninitialised" in art.artifact


def test_without_the_mark_the_same_view_is_a_receiver(tmp_path):
    """What the differ said before (a trace without ``g``, as older tracers wrote): the unmarked read
    is an input difference like any other."""
    a = write_trace(tmp_path / "a", {0: _fsdp_like("garbage1", g=False)})
    b = write_trace(tmp_path / "b", {0: _fsdp_like("garbage2", g=False)})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d is not None and d.verdict == RECEIVER and d.identity == "aten.view.default:1"


def test_a_mark_on_one_side_only_is_no_artifact(tmp_path):
    a = write_trace(tmp_path / "a", {0: _fsdp_like("garbage1")})
    b = write_trace(tmp_path / "b", {0: _fsdp_like("garbage2", g=False)})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d is not None and d.verdict == RECEIVER and d.identity == "aten.view.default:1"


def test_garbage_that_reaches_a_computed_value_is_judged_and_says_why(tmp_path):
    """An op that computes from the uninitialised bytes (its outputs differ and are not that memory
    any more) is not passed over: a RECEIVER whose warning names the resize."""
    a = write_trace(tmp_path / "a", {0: _fsdp_like("garbage1", reader_out="sum1")})
    b = write_trace(tmp_path / "b", {0: _fsdp_like("garbage2", reader_out="sum2")})
    res = diff_paths(a, b).ranks[0]
    d = res.first_divergence
    assert d is not None and d.verdict == RECEIVER and d.identity == "aten.add_.Tensor:1"
    assert any("storage resize grew (storage.resize_:1)" in w and "uninitialised" in w for w in d.warnings)
    assert [x.name for x in res.artifacts] == ["aten.view.default"]


def test_garbage_read_by_an_op_whose_outputs_match_is_passed_over(tmp_path):
    a = write_trace(tmp_path / "a", {0: _fsdp_like("garbage1", reader_out="same")})
    b = write_trace(tmp_path / "b", {0: _fsdp_like("garbage2", reader_out="same")})
    assert diff_paths(a, b).ranks[0].first_divergence is None


def test_a_real_difference_after_the_grown_read_is_still_the_origin(tmp_path):
    recs_b = _fsdp_like("garbage2")
    recs_b[-1] = rec("aten.mm.default", 1, [tensor("x"), tensor("w", shape=(2, 64))], [tensor("y2")])
    a = write_trace(tmp_path / "a", {0: _fsdp_like("garbage1")})
    b = write_trace(tmp_path / "b", {0: recs_b})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d is not None and d.verdict == "ORIGIN" and d.identity == "aten.mm.default:1"


def test_a_mark_that_is_not_text_is_bad_input(tmp_path):
    from forensics.core.errors import BadInput

    recs = _fsdp_like("garbage1")
    recs[1]["in"][0]["g"] = 5
    a = write_trace(tmp_path / "a", {0: recs})
    b = write_trace(tmp_path / "b", {0: _fsdp_like("garbage2")})
    with pytest.raises(BadInput, match="'g'"):
        diff_paths(a, b).ranks[0]


# --------------------------------------------------------------------------- the tracer, for real

def _records(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()][1:-1]


def test_the_tracer_records_resizes_and_marks_reads_until_a_traced_op_writes(tmp_path):
    torch = pytest.importorskip("torch")
    from tests.traced import trace_in_process

    def program() -> None:
        t = torch.zeros(64)
        st = t.untyped_storage()
        st.resize_(0)  # FSDP2's free_storage
        st.resize_(256)  # alloc_storage: 256 uninitialised bytes
        v = t.view(8, 8)  # read before any write: marked, and so is its output (the same memory)
        v.copy_(torch.ones(8, 8))  # a traced op writes it
        t.view(8, 8).sum()  # no mark any more
        k = torch.ones(4)
        ks = k.untyped_storage()
        ks.resize_(32)  # grown from 16 bytes: the first 16 are kept
        k.sum()  # reads the kept bytes only: no mark
        torch.empty(0).set_(ks).sum()  # reaches the new bytes: marked (set_ changes metadata, writes nothing)

    before = torch.UntypedStorage.__dict__.get("resize_")
    recs = _records(trace_in_process(tmp_path, program))
    assert torch.UntypedStorage.__dict__.get("resize_") is before  # unhooked on close
    resizes = [r for r in recs if r["op"] == "storage.resize_"]
    assert [r["meta"]["bytes"] for r in resizes] == [[256, 0], [0, 256], [16, 32]]
    assert all(r["kind"] == "event" and not r["out"] for r in resizes)
    marked = [(r["id"], [e.get("g") for e in r["in"] if e.get("t") != "args"], [e.get("g") for e in r["out"]])
              for r in recs if any("g" in e for e in r["in"] + r["out"])]
    assert marked == [("aten.view.default:1", ["storage.resize_:2"], ["storage.resize_:2"]),
                      ("aten.set_.source_Storage:1", [None], ["storage.resize_:3"]),  # set_ writes no byte
                      ("aten.sum.default:3", ["storage.resize_:3"], [None])], marked


def test_resize_is_not_wrapped_unless_the_tracer_is_installed():
    torch = pytest.importorskip("torch")
    assert "resize_" not in torch.UntypedStorage.__dict__
    assert torch.UntypedStorage.resize_ is torch._C.StorageBase.resize_
