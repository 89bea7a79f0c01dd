"""Issue 44, property tests over EVERY reader in parsers/ and the op-trace readers, and over the
Python API's borders (tests/test_bounded_reads.py covers six readers; this file the rest).

Property: a seed file (real where the project has one, from tests/fixtures or the corpus; the
SYNTHETIC fixtures named below where no real file exists) given random bytes, a truncation, byte
flips or a JSON type swap (one value of one record replaced by a value of another type) is read to
rows or refused with one BadInput line naming the file; never another exception (a traceback, an
exit 70 through the CLI). An API call with one argument of the wrong type raises only the
documented exceptions (docs/api.md: BadArgument, BadInput, BadSite, UnknownName).
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.core.errors import BadInput
from tests.conftest import CORPUS, REPO

#: examples per reader (40: the whole file runs in ~8 s on one core, so it stays in the fast lane);
#: FORENSICS_PROPERTY_EXAMPLES=500 for a campaign rerun.
EXAMPLES = int(os.environ.get("FORENSICS_PROPERTY_EXAMPLES", "40"))

FIX = REPO / "tests" / "fixtures"
DATA = REPO / "tests" / "data"
AMD = FIX / "amd"
CPU_RANK = FIX / "cpu" / "conv1d-threads" / "a1" / "rank0"


def _materialise(result) -> None:
    """Readers that return lazy records: touch every record's tensors (parsed on use)."""
    if isinstance(result, list):
        for rec in result:
            for attr in ("inputs", "outputs"):
                list(getattr(rec, attr, ()) or ())


def _readers():
    """(name, seed path, reader, kind): kind is 'json', 'jsonl', 'json.gz' (type swaps apply) or 'bytes'."""
    from forensics.instruments.recognise import recognise
    from forensics.tracediff.traces import debugmode, megatron, torchtitan
    from parsers import (cublas_legacy, cublaslt, cupti_jsonl, hipblaslt_log, mkl_verbose, ncu, nsys,
                         onednn_verbose, rocblas_log, rocprofv3, rocprofv3_json, rocprofv3_rocpd, rpd,
                         torch_profiler_cpu)

    def ranks(mod):
        """A trace reader's own entry (rank_files, iter_ranks, run_info) on one rank file."""
        def read(p):
            for _, records in mod.iter_ranks(Path(p)):
                _materialise(list(records))
            mod.run_info(Path(p))
        return read

    return [
        # NVIDIA text logs (real: corpus, and tests/data/cublaslt/real_*.log)
        ("cublaslt-fast", DATA / "cublaslt" / "real_lines.log", cublaslt.read_log, "bytes"),
        ("cublaslt-per-line", DATA / "cublaslt" / "real_lines.log", cublaslt.read_log_per_line, "bytes"),
        ("cublaslt-corpus", CORPUS / "cublaslt" / "cublaslt_l5_torch_matmul_aarch64_stdout.log", cublaslt.read_log, "bytes"),
        ("cublas-legacy", DATA / "cublaslt" / "real_legacy_sgemm_excerpt.log", cublas_legacy.read_log, "bytes"),
        ("cublas-legacy-corpus", CORPUS / "cublas_legacy" / "cublas_legacy_gopeft_lora.log", cublas_legacy.read_log, "bytes"),
        # AMD text logs (real, tests/fixtures/amd/PROVENANCE.md)
        ("hipblaslt", AMD / "hipblaslt_mask5_level5.log", hipblaslt_log.read_log, "bytes"),
        ("hipblaslt-bench", AMD / "hipblaslt_bench_rocm_libraries12243.log", hipblaslt_log.read_log, "bytes"),
        ("rocblas", AMD / "rocblas_layer3_migraphx763.log", rocblas_log.read_log, "bytes"),
        ("rocblas-bench", AMD / "rocblas_layer2_docs_sgemm_128.log", rocblas_log.read_log, "bytes"),
        # CPU logs (real, tests/fixtures/cpu)
        ("mkl", CPU_RANK / "mkl.16564.log", mkl_verbose.read_log, "bytes"),
        ("mkl-blas", FIX / "cpu" / "logs" / "mkl_blas.log", mkl_verbose.read_log, "bytes"),
        ("onednn", FIX / "cpu" / "logs" / "onednn_conv_2thr_ts.log", onednn_verbose.read_log, "bytes"),
        ("torchprof-cpu", CPU_RANK / "torchprof.16564.json.gz", torch_profiler_cpu.read_ops, "json.gz"),
        # CUPTI JSONL: SYNTHETIC only (campaign.py's format, tests/data/cupti/README.md)
        ("cupti", DATA / "cupti" / "synthetic_two_sites_header.cupti.jsonl", cupti_jsonl.read_kernels, "jsonl"),
        # ncu CSV (real, corpus)
        ("ncu-details", CORPUS / "ncu" / "ncu_extrap_ex-gpu.s10_details_by_ncu2022.3.csv", ncu.read_csv, "bytes"),
        ("ncu-raw", CORPUS / "ncu" / "ncu_extrap_ex-gpu.s10_raw_by_ncu2022.3.csv", ncu.read_csv, "bytes"),
        # nsys SQLite (real, corpus); recognise() sniffs the same bytes
        ("nsys", CORPUS / "nsys" / "extrap_con_kernel.sqlite", nsys.read_kernels, "bytes"),
        ("nsys-ranges", CORPUS / "nsys" / "extrap_con_kernel.sqlite", nsys.read_attributed, "bytes"),
        ("nsys-recognise", CORPUS / "nsys" / "extrap_con_kernel.sqlite", recognise, "bytes"),
        # ROCm databases and JSON: rpd real; rocprofv3 JSON and rocpd SYNTHETIC (make_synthetic_rocprofv3.py)
        ("rpd", AMD / "rpd_rocm_profile_data_matmul_result.rpd", lambda p: rpd.read_database(p, with_ranges=True), "bytes"),
        ("rocpd", AMD / "synthetic_rocprofv3_v3_results.db", rocprofv3_rocpd.read_database, "bytes"),
        ("rocprofv3-json", AMD / "synthetic_rocprofv3_v3_results.json", rocprofv3_json.read_results, "json"),
        ("rocprofv3-marker", AMD / "rocprofv3_marker_api_trace.csv", rocprofv3.read_marker_trace, "bytes"),
        ("rocprofv3-api", AMD / "rocprofv3_hip_runtime_api_trace.csv", rocprofv3.read_api_trace, "bytes"),
        ("rocprofv3-v4", AMD / "rocprofv3_v4_agent_index_kernel_trace.csv", rocprofv3.read_kernel_trace, "bytes"),
        # op-level trace readers (tracediff): DebugMode and torchtitan real, Megatron SYNTHETIC
        ("debugmode-logs", FIX / "debugmode-save-logs" / "a" / "rank0.json", ranks(debugmode), "json"),
        ("debugmode-text", FIX / "debugmode-tensor-hashes" / "a" / "rank0.txt", ranks(debugmode), "bytes"),
        ("torchtitan", FIX / "torchtitan-numerics" / "a" / "numerics" / "rank_0_activations.log",
         ranks(torchtitan), "bytes"),
        ("megatron", DATA / "megatron" / "run_a" / "rank_000000.jsonl",
         ranks(megatron), "jsonl"),
    ]


READERS = {name: (src, fn, kind) for name, src, fn, kind in _readers()}
_DATA: dict[str, bytes] = {}

#: values put in place of one JSON value: every JSON type, non-finite, huge, nested.
SWAPS = ["x", "", 1.5, -1, 1 << 64, True, None, [], [1, "a"], {}, {"a": 1}, float("nan"), float("inf")]


def _source(name: str) -> bytes:
    src, _, _ = READERS[name]
    if not src.exists():
        if CORPUS in src.parents:
            pytest.skip(f"real corpus not found at {CORPUS} (CI lays ../shared beside the checkout)")
        raise AssertionError(f"seed file missing: {src}")
    if name not in _DATA:
        _DATA[name] = src.read_bytes()
    return _DATA[name]


def _paths(node, prefix=()):
    """Every (path, value) inside a parsed JSON document."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node[:64]):  # the first 64 of a long array are enough
            yield from _paths(v, prefix + (i,))


def _swap(doc, where: float, value):
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return value
    path = paths[min(int(len(paths) * where), len(paths) - 1)]
    node = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return doc


def _type_swapped(data: bytes, kind: str, where: float, line: float, value) -> bytes:
    if kind == "json.gz":
        return gzip.compress(_type_swapped(gzip.decompress(data), "json", where, line, value))
    if kind == "json":
        return json.dumps(_swap(json.loads(data), where, value)).encode()
    lines = data.split(b"\n")
    idx = [i for i, x in enumerate(lines) if x.strip()]
    i = idx[min(int(len(idx) * line), len(idx) - 1)]
    lines[i] = json.dumps(_swap(json.loads(lines[i]), where, value)).encode()
    return b"\n".join(lines)


damage = st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8)),
    st.tuples(st.just("random"), st.binary(max_size=2048)),
    st.tuples(st.just("swap"), st.tuples(st.floats(0, 1), st.floats(0, 1), st.sampled_from(SWAPS))),
)


def _damaged(data: bytes, kind: str, how) -> bytes:
    what, arg = how
    if what == "cut":
        return data[: int(len(data) * arg)]
    if what == "random":
        return arg
    if what == "swap":
        if kind == "bytes":  # not JSON: a swap is a flip of one digit into a letter
            what, arg = "flip", [(arg[0], ord("x"))]
        else:
            return _type_swapped(data, kind, *arg)
    b = bytearray(data)
    for where, value in arg:
        if b:
            b[min(int(len(b) * where), len(b) - 1)] = value
    return bytes(b)


@pytest.mark.parametrize("name", sorted(READERS))
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(how=damage)
def test_a_damaged_seed_gives_rows_or_one_bad_input_line(name, how):
    src, reader, kind = READERS[name]
    data = _damaged(_source(name), kind, how)
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, src.name)  # the seed's own name: some readers take the rank from it
    try:
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            reader(path)
        except BadInput as e:
            assert Path(e.path).name == src.name or e.path == path, (e.path, path)
            assert "\n" not in str(e)
    finally:
        shutil.rmtree(folder)


def test_the_intact_seeds_read():
    """The property above means something only if each seed reads whole (no BadInput of its own)."""
    for name, (src, reader, _) in READERS.items():
        if not src.exists():
            continue
        reader(src)


# --------------------------------------------------------------------------- the Python API's borders
CAPTURE = FIX / "cpu" / "conv1d-threads"
TRACE = FIX / "traces-cpu-divergence" / "origin.jsonl"

#: each API function, its valid call, and the arguments a type swap is tried on.
CALLS = {
    "load_capture": (lambda f, **kw: f(kw.pop("path", CAPTURE), **kw), ("path", "keep_going")),
    "analyze": (lambda f, **kw: f(kw.pop("path", CAPTURE), **kw), ("path", "site", "ranks", "shard", "keep_going", "jobs")),
    "compare": (lambda f, **kw: f(kw.pop("path", CAPTURE), **kw), ("path", "site", "force")),
    "load_trace": (lambda f, **kw: f(kw.pop("path", TRACE), **kw), ("path", "fmt")),
    "diff": (lambda f, **kw: f(kw.pop("a", TRACE), kw.pop("b", TRACE), **kw), ("a", "b", "fmt", "rank", "ranks", "window", "jobs")),
    "knob": (lambda f, **kw: f(kw.pop("name", "OMP_NUM_THREADS"), **kw),
             ("name", "site", "paths", "device", "use_cache", "workers", "uncatalogued")),
}

#: wrong-typed values: none of these is a valid value of any argument above.
WRONG = [b"x", 1.5, [b"x"], {"a": 1}, object(), ["x"], -3, "no", 0]

#: the valid values among WRONG per argument (docs/api.md): the call is allowed to run with them.
VALID = {("jobs", 0), ("rank", 0), ("site", "no"), ("ranks", "no"), ("shard", "no"), ("fmt", "no"),
         ("device", "no"), ("name", "no"), ("path", "no"), ("a", "no"), ("b", "no")}


def _documented():
    from forensics.commands.suggest import UnknownName
    from forensics.core.errors import BadArgument, BadSite

    return (BadArgument, BadInput, BadSite, UnknownName)


@pytest.mark.parametrize("fn", sorted(CALLS))
def test_a_wrong_typed_api_argument_raises_only_documented_exceptions(fn):
    import forensics
    from forensics.core.errors import BadArgument

    call, args = CALLS[fn]
    documented = _documented()
    for arg in args:
        for value in WRONG:
            if isinstance(value, (str, int)) and (arg, value) in VALID:
                continue
            try:
                call(getattr(forensics, fn), **{arg: value})
            except BadArgument as e:
                assert arg in str(e), (fn, arg, value, str(e))
                continue
            except documented:
                continue
            except Exception as e:  # pragma: no cover - the failure message names the call
                raise AssertionError(f"{fn}({arg}={value!r}) raised {type(e).__name__}: {e}") from e
            raise AssertionError(f"{fn}({arg}={value!r}) accepted a wrong-typed argument")


def test_a_rocprofv3_json_process_without_buffer_records_is_a_problem_not_a_key_error(tmp_path):
    """Found by the property above (a swap of a process node to {}): KeyError 'buffer_records' on main."""
    from parsers import rocprofv3_json

    doc = json.loads(READERS["rocprofv3-json"][0].read_bytes())
    doc["rocprofiler-sdk-tool"] = [doc["rocprofiler-sdk-tool"][0], {}]
    f = tmp_path / "results.json"
    f.write_text(json.dumps(doc))
    whole = rocprofv3_json.read_results(READERS["rocprofv3-json"][0])
    df = rocprofv3_json.read_results(f)
    assert len(df) == len(whole) > 0
    assert any("[1]: no kernel_dispatch record" in x for x in df.attrs["problems"]), df.attrs["problems"]


@pytest.mark.parametrize("suffix", [".json.gz", ".json"])
def test_a_ceiling_raised_past_the_machines_memory_still_reads(suffix, tmp_path, monkeypatch, capsys):
    """Found by benchmarks/bench_read_memory.py: with the ceiling raised to 64 GiB (as its refusal
    tells the user to) a 14 KB Kineto file gave MemoryError (exit 70): the whole-file read asked for
    ceiling + 1 bytes up front. On main this fails."""
    from forensics.cli import main
    from forensics.runtime.inputs import MAX_INPUT_ENV
    from parsers import kineto

    seed = REPO / "tests" / "fixtures" / "amd" / "kineto_rocm6.2_mi250_minitoy_train.json.gz"
    f = tmp_path / f"trace{suffix}"
    f.write_bytes(seed.read_bytes() if suffix == ".json.gz" else gzip.decompress(seed.read_bytes()))
    monkeypatch.setenv(MAX_INPUT_ENV, str(1 << 50))
    assert len(kineto.read_kernels(f)) > 0
    monkeypatch.delenv(MAX_INPUT_ENV)
    code = main(["--max-input-bytes", str(1 << 50), "analyze", str(f)])
    assert code != 70, capsys.readouterr()


#: cases the property found (FORENSICS_PROPERTY_EXAMPLES=400), each an internal error on main.
FOUND = [
    # a flipped byte in sqlite_master's text: UnicodeDecodeError from parsers/nsys.py _tables
    ("nsys", ("flip", [(0.7696891140445654, 128)]), "not UTF-8"),
    ("nsys-ranges", ("flip", [(0.5746873011948493, 128)]), "not UTF-8"),  # the same through read_attributed
    # a oneDNN timestamp with its '.' flipped to a digit: 20 digits of ms, OverflowError in Int64
    ("onednn", ("flip", [(0.751953125, 48)]), "out of range"),
    # DebugMode save_logs kwargs_str a number: TypeError (str + float) in debugmode.read_saved_logs
    ("debugmode-logs", ("swap", (1.0, 0.0, 1.5)), "kwargs_str: expected a string"),
    # the last byte of a rocpd schema's text flipped to a newline: SQLite's message quotes it, and
    # the refusal was two lines (the rule: one line)
    ("rocpd", ("flip", [(1.0, 10)]), "malformed database schema"),
]


@pytest.mark.parametrize("name,how,needle", FOUND, ids=[f[0] for f in FOUND])
def test_what_the_property_found_is_one_bad_input_line(name, how, needle, tmp_path):
    src, reader, kind = READERS[name]
    if not src.exists():
        pytest.skip(f"real corpus not found at {CORPUS}")
    path = tmp_path / src.name
    path.write_bytes(_damaged(_source(name), kind, how))
    with pytest.raises(BadInput) as e:
        reader(path)
    assert needle in str(e.value) and Path(e.value.path).name == src.name and "\n" not in str(e.value)


# --------------------------------------------------------------------------- a changed verdict comes with a note
#: files of the real CPU capture a damage is applied to (one per example), and how to swap in them.
CAPTURE_FILES = [("a1/rank0/sites.jsonl", "jsonl"), ("a1/rank0/torchprof.16564.json.gz", "json.gz"),
                 ("a1/rank0/mkl.16564.log", "bytes"), ("a2/rank0/sites.jsonl", "jsonl")]


def _verdicts(an) -> list[tuple]:
    v = an.verdicts
    return sorted(map(tuple, v[["arm", "rank", "scope", "kernel", "verdict"]].astype(str).itertuples(index=False)))


def _said(an) -> int:
    """Everything the analysis says about what it could not use: notes, missing files, losses."""
    a = an.analysis
    return len(a.notes) + len(a.missing) + len(a.losses)


_INTACT: dict[str, tuple] = {}


@pytest.mark.slow  # one whole analysis per example (~1.5 s each)
@settings(max_examples=min(EXAMPLES, 25), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(CAPTURE_FILES), how=damage)
def test_a_damaged_capture_file_changes_a_verdict_only_with_a_note(target, how):
    """analyze on the real CPU capture with one file damaged: one BadInput line, the same verdicts,
    or different verdicts together with a note, a missing file or a loss saying why."""
    import forensics

    if "intact" not in _INTACT:
        an = forensics.analyze(CAPTURE)
        _INTACT["intact"] = (_verdicts(an), _said(an))
    verdicts, said = _INTACT["intact"]
    rel, kind = target
    folder = Path(tempfile.mkdtemp())
    try:
        cap = folder / CAPTURE.name
        shutil.copytree(CAPTURE, cap)
        f = cap / rel
        f.write_bytes(_damaged(f.read_bytes(), kind, how))
        try:
            an = forensics.analyze(cap)
        except BadInput as e:
            assert "\n" not in str(e)
            return
        if _verdicts(an) != verdicts:
            assert _said(an) > said, (rel, how, _verdicts(an))
    finally:
        shutil.rmtree(folder)
