"""Hypothesis fuzzing of the text parsers (cuBLASLt log, legacy cuBLAS log, key=value tokenizer).

Contract: a parser returns rows or raises BadInput (never any other exception); values written
into a SYNTHETIC line in the real [Trace] format come back out of the parser unchanged.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from forensics.core.errors import BadInput
from parsers import cublas_legacy, cublaslt
from parsers._text import TokenError, flat_pairs, format_kv, tokenize_kv
import pytest

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

DATA = Path(__file__).parent / "data" / "cublaslt"
REAL_LT = (DATA / "real_lines.log").read_bytes()
SYNTH_LT = (DATA / "rendered_level5.log").read_bytes()  # RENDERED from the 13.10 format strings
LEGACY = (DATA / "synthetic_legacy_gemmex.log").read_bytes()

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _parse(reader, data: bytes, **kw):
    """Run ``reader`` on ``data`` written to a temp file; return the result or the BadInput."""
    fd, name = tempfile.mkstemp(suffix=".log")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            return reader(name, **kw)
        except BadInput as e:
            assert e.path == name and "\n" not in str(e)
            return e
    finally:
        os.unlink(name)


# --- strategies ------------------------------------------------------------------------------------

LETTERS = "abcxyzABCXYZ"
key = st.builds(str.__add__, st.sampled_from(LETTERS), st.text(alphabet=LETTERS + "019_", max_size=11))
plain_value = st.text(alphabet=LETTERS + "0123456789_.?:+-=", max_size=12)
ws = st.text(alphabet=" \t", min_size=1, max_size=3)


def blocks(depth: int = 2):
    value = plain_value if depth == 0 else st.one_of(plain_value, st.deferred(lambda: blocks(depth - 1)))
    return st.lists(st.tuples(key, value), max_size=5)


pairs_strategy = blocks(2)
noisy_text = st.text(alphabet=st.sampled_from(list("ab=[] \t01x_.?")), max_size=40)


# --- tokenizer -------------------------------------------------------------------------------------

@FUZZ
@given(pairs_strategy)
def test_tokenizer_round_trip(pairs):
    text = format_kv(pairs)
    assert tokenize_kv(text) == pairs
    assert flat_pairs(text) == pairs


@FUZZ
@given(noisy_text)
@example("a=[b=[c=1]")
@example("a=] b=1")
def test_fast_and_general_tokenizers_agree(text):
    try:
        general = tokenize_kv(text)
    except TokenError:
        general = TokenError
    try:
        fast = flat_pairs(text)
    except TokenError:
        fast = TokenError
    assert fast == general


@FUZZ
@given(pairs_strategy, st.lists(ws, min_size=1, max_size=30))
def test_random_whitespace_does_not_change_the_parse(pairs, spaces):
    tokens = format_kv(pairs).split(" ")
    text = "".join(t + spaces[i % len(spaces)] for i, t in enumerate(tokens))
    assert tokenize_kv(text) == pairs
    assert flat_pairs(text) == pairs


# --- cuBLASLt log ------------------------------------------------------------------------------------

TYPES = ["R_32F", "R_16F", "R_16BF", "R_8F_E4M3", "R_8F_E5M2", "R_4F_E2M1", "R_8I", "R_32I", "R_64F"]
dim = st.integers(min_value=1, max_value=1 << 20)


@st.composite
def trace_call(draw):
    """Random field values and the SYNTHETIC [Trace] line (the real [Trace] format) that prints them."""
    m, n, k = draw(dim), draw(dim), draw(dim)
    ta, tb = draw(st.sampled_from("NT")), draw(st.sampled_from("NT"))
    types = [draw(st.sampled_from(TYPES)) for _ in range(4)]
    a = (m, k) if ta == "N" else (k, m)
    b = (k, n) if tb == "N" else (n, k)
    lds = [draw(st.integers(1, 1 << 20)) for _ in range(4)]
    algo = {"algoId": draw(st.integers(0, 100)), "tile": f"MATMUL_TILE_{draw(st.sampled_from([32, 64, 128, 256]))}x8",
            "stages": draw(st.sampled_from(["MATMUL_STAGES_64x1", "MATMUL_STAGES_128xAUTO"])),
            "customOption": draw(st.integers(0, 40)), "numSplitsK": draw(st.integers(1, 16))}
    extra_key = "zz" + draw(st.text(alphabet=LETTERS, min_size=1, max_size=8))
    extra_val = draw(st.text(alphabet=LETTERS + "0123456789_", min_size=1, max_size=8))
    compute = [("computeType", "COMPUTE_32F"), ("scaleType", "R_32F")]
    if ta == "T" or draw(st.booleans()):
        compute.append(("transa", f"OP_{ta}"))
    if tb == "T" or draw(st.booleans()):
        compute.append(("transb", f"OP_{tb}"))
    desc = lambda t, rc, ld: [("type", t), ("rows", str(rc[0])), ("cols", str(rc[1])), ("ld", str(ld))]  # noqa: E731
    pairs = [("A", "0X1"), ("Adesc", desc(types[0], a, lds[0])), ("B", "0X2"), ("Bdesc", desc(types[1], b, lds[1])),
             ("C", "0X3"), ("Cdesc", desc(types[2], (m, n), lds[2])), ("D", "0X4"), ("Ddesc", desc(types[3], (m, n), lds[3])),
             ("computeDesc", compute), ("algo", [(k_, str(v)) for k_, v in algo.items()] + [(extra_key, extra_val)]),
             ("workSpace", "0X0"), ("workSpaceSizeInBytes", str(draw(st.integers(0, 1 << 30)))),
             ("beta", draw(st.sampled_from(["0", "1", "?"]))), ("outOfPlace", "0"), ("stream", "0X0")]
    pid = draw(st.integers(1, 1 << 22))
    ts = draw(st.sampled_from(["", "[2026-11-29 10:00:00]"]))
    sep = draw(st.sampled_from([" ", "  ", "\t", " \t "]))  # random whitespace between fields
    line = f"{ts}[cublasLt][{pid}][Trace][cublasLtMatmul] {format_kv(pairs).replace(' ', sep)}"
    expect = dict(m=m, n=n, k=k, transa=ta, transb=tb, layout=ta + tb, a_type=types[0], b_type=types[1],
                  c_type=types[2], d_type=types[3], lda=lds[0], ldb=lds[1], ldc=lds[2], ldd=lds[3], pid=pid,
                  algo_id=algo["algoId"], tile=algo["tile"], stages=algo["stages"],
                  custom_option=algo["customOption"], num_splits_k=algo["numSplitsK"], consistent=True)
    return line, expect, {f"algo.{extra_key}": extra_val}


@FUZZ
@given(st.lists(trace_call(), min_size=1, max_size=4))
def test_cublaslt_round_trip(calls):
    data = "".join(line + "\n" for line, _, _ in calls).encode()
    log = _parse(cublaslt.read_log, data)
    assert not isinstance(log, BadInput), log
    assert len(log.calls) == len(calls)
    for (_, expect, extra), (_, row) in zip(calls, log.calls.iterrows()):
        assert {c: row[c] for c in expect} == expect
        assert row.extra == {**extra, "workSpace": "0X0"}


@FUZZ
@given(st.data())
def test_cublaslt_random_truncation(data):
    src = data.draw(st.sampled_from([REAL_LT, SYNTH_LT]))
    cut = data.draw(st.integers(0, len(src)))
    for tolerate in (False, True):
        out = _parse(cublaslt.read_log, src[:cut], tolerate_truncated_tail=tolerate)
        if isinstance(out, BadInput):
            assert cut == 0 or out.line is not None or "empty" in out.message
        else:
            assert len(out.calls) <= src.count(b"[Trace]")


@FUZZ
@given(st.binary(max_size=400))
@example(b"[cublasLt][1][Trace][cublasLtMatmul] Adesc=[rows=\xff]\n")
@example(b"[cublasLt][1][Trace][cublasLtMatmul] \n")
def test_cublaslt_random_bytes(blob):
    out = _parse(cublaslt.read_log, blob)
    assert isinstance(out, (BadInput, cublaslt.CublasLtLog))


@FUZZ
@given(st.sampled_from(["Trace", "Api", "Info", "Hints", "Error", "Tr4ce", ""]),
       st.sampled_from(["cublasLtMatmul", "cublasLtSSSMatmul", "cublasLtMatmulAlgoGetHeuristic", "cublasLtCreate"]),
       noisy_text)
def test_cublaslt_random_descriptor_content(level, function, rest):
    line = f"[cublasLt][7][{level}][{function}] {rest}\n".encode()
    out = _parse(cublaslt.read_log, line)
    assert isinstance(out, (BadInput, cublaslt.CublasLtLog))
    if isinstance(out, BadInput):
        assert out.line == 1


@FUZZ
@given(st.lists(st.tuples(key, st.one_of(plain_value, blocks(1))), max_size=6))
def test_cublaslt_random_key_values_in_descriptors(fields):
    line = f"[cublasLt][7][Trace][cublasLtMatmul] Adesc=[{format_kv(fields)}] Cdesc=[{format_kv(fields)}] algo=[{format_kv(fields)}]\n"
    out = _parse(cublaslt.read_log, line.encode())
    assert isinstance(out, (BadInput, cublaslt.CublasLtLog))


# --- legacy cuBLAS log ---------------------------------------------------------------------------------

@FUZZ
@given(st.integers(0, len(LEGACY)), st.booleans())
def test_legacy_random_truncation(cut, tolerate):
    out = _parse(cublas_legacy.read_log, LEGACY[:cut], tolerate_truncated_tail=tolerate)
    if not isinstance(out, BadInput):
        assert len(out) <= 2 and set(out.function) <= {"cublasGemmEx", "cublasSgemmStridedBatched"}


@FUZZ
@given(st.binary(max_size=400))
def test_legacy_random_bytes(blob):
    out = _parse(cublas_legacy.read_log, blob)
    assert isinstance(out, BadInput) or hasattr(out, "attrs")


@FUZZ
@given(st.lists(st.sampled_from(LEGACY.decode().splitlines()), max_size=30), st.binary(max_size=20))
def test_legacy_shuffled_lines(lines, noise):
    assume(lines)
    out = _parse(cublas_legacy.read_log, ("\n".join(lines) + "\n").encode() + noise)
    assert isinstance(out, BadInput) or hasattr(out, "attrs")
