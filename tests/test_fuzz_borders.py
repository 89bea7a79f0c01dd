"""Typed borders (issue 28): every field a reader uses, given a value of the wrong type, a
non-finite number, a huge integer, NULL or deep nesting, is refused as bad input naming the file,
the record and the field, or read with the same result; never an internal error or a traceback.

A systematic campaign, not random: for each format, each used field of one real record (from the
corpus or our fixtures) gets each value of ``VALUES`` in turn. Outcome classes counted per format:
``refused`` (BadInput naming the file and the field), ``same`` (read, same result as the intact
file), ``changed`` (read, a different result: allowed only where the result says so). Complements
tests/test_fuzz_commands.py (seeded random damage through whole commands) and
tests/test_corpus_mutations.py (cuts and byte flips of every corpus file).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from tests._helpers import assert_bad_input
from tests.conftest import CORPUS, REPO

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

#: JSON literals put in place of one field's value: wrong types, non-finite, huge, NULL, deep.
VALUES = {
    "text": '"x"', "float": "1.5", "list": "[1]", "object": '{"a": 1}', "bool": "true", "null": "null",
    "inf": "Infinity", "-inf": "-Infinity", "nan": "NaN", "int64+1": str(1 << 63), "1e20": "1e20",
    "30digits": "1" * 30, "negative": "-5", "mixed": '["a", null, {}]', "deep": "[" * 1000 + "]" * 1000,
}


#: The values of the diff and capture campaigns (one command run each: the costly part of the campaign).
DIFF_VALUES = {k: VALUES[k] for k in ("text", "float", "list", "object", "null", "nan", "int64+1", "30digits", "deep")}

#: The JSON kind of each value, and those checked whatever the field's own kind (out of any range).
KIND = {"text": str, "float": float, "list": list, "object": dict, "bool": bool, "null": type(None), "negative": int,
        "mixed": list, "int64+1": int}  # 2**63 is a valid unsigned 64-bit digest
ALWAYS = ("inf", "-inf", "nan", "1e20", "30digits", "deep")


def _wrong_type(name: str, old: object, path: list | None = None) -> bool:
    """Whether value ``name`` is of another JSON kind than ``old`` (or out of every range).

    DebugMode's ``hash_tensor`` values are unsigned 64-bit: 2**63 is in their range."""
    if name == "int64+1" and path and path[0] in ("hash", "input_hash") and isinstance(old, (int, list)):
        return False
    if name in ALWAYS:
        return True
    kind = KIND[name]
    return type(old) is not kind


#: Counts of outcome per campaign, printed at the end of the module (``pytest -s`` shows them).
CAMPAIGN: dict[str, dict[str, int]] = {}


@pytest.fixture(scope="module", autouse=True)
def _campaign_summary():
    yield
    total = sum(sum(c.values()) for c in CAMPAIGN.values())
    print(f"\nborder campaign: {total} mutated inputs")
    for name, counts in CAMPAIGN.items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def _put(doc: object, path: list, literal: str) -> str:
    """``doc`` as JSON text with the value at ``path`` replaced by the JSON ``literal``."""
    holder = doc
    for p in path[:-1]:
        holder = holder[p]  # type: ignore[index]
    old = holder[path[-1]]  # type: ignore[index]
    holder[path[-1]] = "__MUTATED__"  # type: ignore[index]
    try:
        return json.dumps(doc).replace('"__MUTATED__"', literal)
    finally:
        holder[path[-1]] = old  # type: ignore[index]


def _outcome(read, path: Path, field: str) -> str:
    """'refused' (one BadInput line naming the file and the field) or 'read'; anything else fails."""
    try:
        read(path)
    except BadInput as e:
        text = str(e)
        assert "\n" not in text and str(path) in text, text
        assert field.split(".")[-1] in text or "JSON" in text or "nested" in text, f"{field}: {text}"
        return "refused"
    return "read"


# --------------------------------------------------------------------------- Kineto
KINETO = CORPUS / "kineto" / "hta_critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz"
KINETO_FIELDS = ["ts", "dur", "tid", "pid", "name", "cat", "args", "args.grid", "args.block", "args.correlation",
                 "args.External id", "args.device", "args.stream"]


@pytest.fixture(scope="module")
def kineto_doc():
    if not KINETO.is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    return json.loads(gzip.decompress(KINETO.read_bytes()))


@pytest.mark.parametrize("field", KINETO_FIELDS)
def test_kineto_kernel_event_fields(field, kineto_doc, tmp_path):
    """Each used field of a real kernel event: a value of another type or out of range is refused."""
    from parsers.kineto import read_trace

    events = kineto_doc["traceEvents"]
    i = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    where = ["traceEvents", i, *(["args", field[5:]] if field.startswith("args.") else [field])]
    intact = read_trace(KINETO).kernels
    outcomes = {}
    for name, literal in VALUES.items():
        p = tmp_path / f"{name}.json"
        p.write_text(_put(kineto_doc, where, literal))
        outcomes[name] = _outcome(read_trace, p, field)
        kin = CAMPAIGN.setdefault("kineto (reader)", {})
        kin[outcomes[name]] = kin.get(outcomes[name], 0) + 1
        if outcomes[name] == "read" and field != "cat":  # another category is another (ignored) event
            got = read_trace(p).kernels
            assert len(got) == len(intact), (field, name)
    # a wrong type or a non-finite/huge number is never read as if it were a value
    same_type = {"args": "object"}.get(field)
    for name in ("inf", "-inf", "nan", "int64+1", "30digits", "list", "object", "bool", "mixed"):
        assert name == same_type or outcomes[name] == "refused", (field, name, outcomes)


# --------------------------------------------------------------------------- traces through `forensics diff`
def _cli(argv: list[str]) -> tuple[object, str, str]:
    from tests.test_fuzz_commands import _run

    return _run(argv)


def _verdict_lines(stdout: str) -> list[str]:
    """What a diff concluded: per rank the kind and op of the first divergence, the pattern and the site."""
    import re

    out = []
    for x in stdout.splitlines():
        m = re.match(r"rank (\d+): .*?first divergence: (\S+) (?:\(.*?\) )?(\S+)", x)
        if m:
            out.append(" ".join(m.groups()))
        elif x.startswith(("rank ", "pattern:", "site:")):
            out.append(x)
    return out


def _warnings(stdout: str) -> set[str]:
    return {x.strip() for x in stdout.splitlines() if "warning" in x or "partial" in x or "comparability" in x}


def _diff_campaign(a: Path, b: Path, target: Path, fields: list[tuple[str, list]], tmp_path: Path) -> dict:
    """Mutate ``target`` (a JSONL file inside ``b``) field by field; diff a vs the damaged b.

    Returns ``{outcome: count}``; fails on a traceback, an exit other than 0/1/3, a refusal that
    is not one line naming the file, or a changed verdict with no new warning."""
    code0, out0, err0 = _cli(["diff", str(a), str(b)])
    assert code0 in (0, 1), err0
    lines = target.read_text().splitlines()
    counts: dict[str, int] = {}
    for line_index, path in fields:
        obj = json.loads(lines[line_index])
        try:
            _put(obj, path, "0")
        except (KeyError, IndexError):
            continue
        for name, literal in DIFF_VALUES.items():
            work = tmp_path / "work"
            if work.exists():
                import shutil

                shutil.rmtree(work)
            import shutil

            shutil.copytree(b, work)
            damaged = work / target.relative_to(b)
            text = list(lines)
            text[line_index] = _put(obj, path, literal)
            damaged.write_text("\n".join(text) + "\n")
            code, out, err = _cli(["diff", str(a), str(work)])
            where = f"{target.name} line {line_index + 1} {path} = {name}"
            old = obj
            for p in path:
                old = old[p]
            assert "Traceback" not in out + err and code in (0, 1, 3), f"{where}: exit {code}\n{err}"
            if code == 3:
                assert_bad_input(code, err, file=damaged, out=out)
                counts["refused"] = counts.get("refused", 0) + 1
                continue
            if _verdict_lines(out.replace(str(work), str(b))) == _verdict_lines(out0) and code == code0:
                counts["same"] = counts.get("same", 0) + 1
                continue
            if not _wrong_type(name, old, path):  # another value of the field's own type: another valid input
                counts["changed: a valid value"] = counts.get("changed: a valid value", 0) + 1
                continue
            new = _warnings(out.replace(str(work), str(b))) - _warnings(out0)
            assert new, f"{where}: the verdict changed and nothing says so\n{out0}\n---\n{out}"
            counts["changed, with a warning"] = counts.get("changed, with a warning", 0) + 1
    return counts




@pytest.fixture(scope="module")
def debugmode_runs(tmp_path_factory) -> dict[str, Path]:
    """Two real DebugMode dumps of tests/test_traces_debugmode.py's workload (1 vs 4 threads)."""
    pytest.importorskip("torch.utils._debug_mode", reason="this torch has no DebugMode")
    from tests.test_traces_debugmode import _start

    base = tmp_path_factory.mktemp("dm")
    procs = {k: _start(t, base / k) for k, t in (("a", 1), ("b", 4))}
    for k, p in procs.items():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    return {k: base / k for k in procs}


def test_debugmode_dump_fields(debugmode_runs, tmp_path):
    """Header and call fields of a real dump (line 3: the forward GEMM, just before the intact diff's
    ORIGIN, the sum: a changed hash there moves the ORIGIN, a wrong type must not)."""
    a = debugmode_runs["a"] / "debugmode.rank0.jsonl"
    b = tmp_path / "b"
    b.mkdir()
    import shutil

    shutil.copy(debugmode_runs["b"] / "debugmode.rank0.jsonl", b)
    fields = [(0, [k]) for k in ("rank", "step", "hash_fn", "argv", "torch", "features")] + [(0, ["argv", 0])]
    fields += [(2, [k]) for k in ("i", "op", "type", "depth", "args", "out", "hash", "input_hash", "record")]
    fields += [(2, ["record", "phase"]), (2, ["record", "operands"]), (2, ["hash", 0]), (2, ["input_hash", 0, 0, 0])]
    counts = _diff_campaign(a, b, b / "debugmode.rank0.jsonl", fields, tmp_path / "w")
    CAMPAIGN["debugmode"] = counts
    assert counts.get("refused", 0) > 100, counts


@pytest.fixture(scope="module")
def native_runs(tmp_path_factory) -> dict[str, Path]:
    """Two real traces by `forensics trace` of a CPU loop at 1 and 2 threads (an ORIGIN at aten.sum)."""
    pytest.importorskip("torch")
    import os
    import subprocess
    import sys

    base = tmp_path_factory.mktemp("nt")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = str(REPO / "tests" / "data" / "scripts" / "optrace_threads.py")
    procs = {k: subprocess.Popen([sys.executable, "-m", "forensics", "trace", "--steps", "all", "--out", str(base / k),
                                  "--", sys.executable, script, "--threads", t, "--steps", "2"], cwd=REPO, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for k, t in (("a", "1"), ("b", "2"))}
    for p in procs.values():
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    return {k: base / k for k in procs}


def test_native_trace_fields(native_runs, tmp_path):
    """Header, one record (the intact diff's ORIGIN, aten.sum) and its tensor entries, the footer."""
    import shutil

    b = tmp_path / "b"
    shutil.copytree(native_runs["b"], b)
    target = b / "rank0" / "trace.jsonl"
    lines = target.read_text().splitlines()
    origin = next(i for i, x in enumerate(lines) if '"aten.sum.default:1"' in x)
    header = ("rank", "world_size", "argv", "script_argv", "versions", "env", "steps", "ranks", "max_records", "hash",
              "ordered", "compiled", "generators", "storage_events", "program", "packages", "chunked_ops")
    fields = [(0, [k]) for k in header] + [(0, ["argv", 0]), (0, ["versions", "torch"])]
    fields += [(origin, [k]) for k in ("seq", "id", "op", "kind", "step", "phase", "in", "out")]
    fields += [(origin, [side, 0, k]) for side in ("in", "out") for k in ("s", "t", "n", "o")]
    fields += [(len(lines) - 1, [k]) for k in ("records", "dropped", "last_step", "seeds", "stopped", "compiled_graphs")]
    counts = _diff_campaign(native_runs["a"], b, target, fields, tmp_path / "w")
    CAMPAIGN["native"] = counts
    assert counts.get("refused", 0) > 200, counts


# --------------------------------------------------------------------------- nsys SQLite: NULLs and types per column
NSYS = CORPUS / "nsys" / "extrap_concurrent_profile1.sqlite"  # kernels, runtime calls and NVTX ranges


def _unconstrained(src: Path, dst: Path, table: str, column: str, literal: str) -> None:
    """A copy of ``src`` whose ``table`` lost its NOT NULL constraints (CREATE TABLE AS), one value set."""
    import shutil
    import sqlite3

    shutil.copy(src, dst)
    con = sqlite3.connect(dst)
    for (view,) in con.execute("SELECT name FROM sqlite_master WHERE type='view'").fetchall():
        con.execute(f"DROP VIEW {view}")
    con.execute(f"CREATE TABLE _t AS SELECT * FROM {table}")
    con.execute(f"DROP TABLE {table}")
    con.execute(f"ALTER TABLE _t RENAME TO {table}")
    con.execute(f'UPDATE {table} SET "{column}" = {literal} WHERE rowid = (SELECT min(rowid) FROM {table})')
    con.commit()
    con.close()


@pytest.mark.parametrize("table", ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"])
def test_nsys_columns_null_and_wrong_types(table, tmp_path):
    """Every used column of a real export's kernel, runtime and NVTX tables set to NULL, a real, a
    text, a blob and a 20-digit number (stored as a real): refused naming the file, or read."""
    if not NSYS.is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    from parsers import nsys

    columns = {"CUPTI_ACTIVITY_KIND_KERNEL": nsys.KERNEL_REQUIRED, "CUPTI_ACTIVITY_KIND_RUNTIME": nsys.RUNTIME_REQUIRED,
               "NVTX_EVENTS": nsys.NVTX_REQUIRED}[table]
    counts: dict[str, int] = {}
    for column in columns:
        for literal in ("NULL", "1.5", "'x'", "x'00ff'", "99999999999999999999"):
            p = tmp_path / f"{column}.sqlite"
            _unconstrained(NSYS, p, table, column, literal)
            outcome, message = "read", ""
            try:
                nsys.read_kernels(p)
                nsys.read_ranges(p)
                nsys.read_runtime(p)
            except BadInput as e:
                message = str(e)
                assert "\n" not in message and str(p) in message, message
                outcome = "refused"
            if literal == "NULL" and column in nsys.NOT_NULL[table]:
                assert outcome == "refused" and column in message, (column, outcome, message)
            counts[outcome] = counts.get(outcome, 0) + 1
            p.unlink()
    CAMPAIGN[f"nsys {table}"] = counts


# --------------------------------------------------------------------------- capture files through analyze and compare
def _capture_campaign(base: Path, rel: str, fields: list[tuple[int, list]], commands: tuple[str, ...],
                      tmp_path: Path, values: dict[str, str]) -> dict[str, int]:
    """Mutate line ``i`` of JSONL file ``rel`` of a copy of capture ``base`` field by field, run each
    command: exit 3 with one line naming the file, or the intact result, or a result that names the
    file (a note, a missing or lost line); never a traceback or exit 70."""
    import shutil

    from tests.test_fuzz_commands import _argv, _refused, _result, _run

    want = {}
    for command in commands:
        work = tmp_path / f"intact-{command}"
        work.mkdir(parents=True)
        code, out, err = _run(_argv(command, base, work))
        assert code in (0, 1), err
        want[command] = _result(command, code, out, work)
    lines = (base / rel).read_text().splitlines()
    counts: dict[str, int] = {}
    n = 0
    for line_index, path in fields:
        obj = json.loads(lines[line_index])
        try:
            old = obj
            for p in path:
                old = old[p]
        except (KeyError, IndexError, TypeError):
            continue
        for name, literal in values.items():
            n += 1
            cap = tmp_path / f"c{n}"
            shutil.copytree(base, cap, ignore=shutil.ignore_patterns("analysis"))
            text = list(lines)
            text[line_index] = _put(obj, path, literal)
            (cap / rel).write_text("\n".join(text) + "\n")
            command = commands[n % len(commands)]
            out_dir = tmp_path / f"o{n}"
            out_dir.mkdir()
            code, out, err = _run(_argv(command, cap, out_dir))
            where = f"{rel} line {line_index + 1} {path} = {name} ({command})"
            if _refused(code, out, err, where):
                assert Path(rel).name in err, f"{where}: {err}"
                counts["refused"] = counts.get("refused", 0) + 1
            else:
                got = _result(command, code, out, out_dir)
                if got[:2] == want[command][:2]:
                    counts["same"] = counts.get("same", 0) + 1
                elif Path(rel).name in got[2] + out or _says_weaker(out, want[command][2]):
                    counts["changed, said so"] = counts.get("changed, said so", 0) + 1
                else:
                    assert not _wrong_type(name, old), f"{where}: the result changed and nothing says so\n{out}"
                    counts["changed: a valid value"] = counts.get("changed: a valid value", 0) + 1
            shutil.rmtree(cap)
            shutil.rmtree(out_dir)
    return counts


def _says_weaker(out: str, intact: str) -> bool:
    """A changed result that says its evidence is weaker than the intact one's (an optional digest
    tolerated: ``unproven``, an order-independent digest only, ``NO DIGEST``)."""
    words = ("unproven", "order-independent digest only", "NO DIGEST")
    return any(w in out for w in words) and not any(w in intact for w in words)


CAPTURE_VALUES = DIFF_VALUES
CPU_CAPTURE = REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads"


def test_cpu_capture_site_records(tmp_path):
    """The real CPU capture's site JSONL: header, the first site record, its input and output digests."""
    rel = "t1-omp_num_threads/rank0/sites.jsonl"
    lines = (CPU_CAPTURE / rel).read_text().splitlines()
    site = next(i for i, x in enumerate(lines) if '"event": "site"' in x)
    fields = [(0, [k]) for k in ("rank", "pid", "arm", "steps", "argv")]
    fields += [(site, [k]) for k in ("iteration", "site", "occurrence", "label", "external_id", "in", "out", "rank",
                                     "meta")]
    fields += [(site, [side, 0, k]) for side in ("in", "out") for k in ("shape", "dtype", "numel", "hash", "ohash")]
    counts = _capture_campaign(CPU_CAPTURE, rel, fields, ("analyze", "compare"), tmp_path, CAPTURE_VALUES)
    CAMPAIGN["cpu sites.jsonl"] = counts
    assert counts.get("refused", 0) > 100, counts


def test_megatron_trace_fields(tmp_path):
    """The SYNTHETIC Megatron fixture (tests/data/megatron): a tensor record's fields and its tensor's."""
    import shutil

    data = REPO / "tests" / "data" / "megatron"
    b = tmp_path / "b"
    shutil.copytree(data / "run_b_wgrad", b)
    target = b / "rank_000000.jsonl"
    lines = target.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if "wgrad" in x and '"tensor"' in x)
    fields = [(i, [k]) for k in ("iteration", "microbatch", "name", "occurrence", "phase", "rank", "sequence",
                                 "metadata", "tensor")]
    fields += [(i, ["tensor", k]) for k in ("captured_numel", "dtype", "mode", "numel", "sha256", "shape",
                                            "value_observed")]
    counts = _diff_campaign(data / "run_a", b, target, fields, tmp_path / "w")
    CAMPAIGN["megatron"] = counts
    assert counts.get("refused", 0) > 80, counts


def test_synthetic_capture_cupti_records(tmp_path):
    """A SYNTHETIC capture (tests/synthetic_captures.py: real formats, made-up values): a CUPTI kernel
    record's used fields through analyze and compare."""
    from tests.synthetic_captures import Arm, build_capture, wgrad_scenario

    base = build_capture(tmp_path / "base", wgrad_scenario()[2:6], [Arm("a1"), Arm("a2")])
    rel = "a2/rank0/cupti.jsonl"
    lines = (base / rel).read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if '"grid_x"' in x)
    fields = [(k, [f]) for f in ("correlation_id", "start", "end", "grid_x", "block_x", "name", "device_id",
                                 "stream_id", "kind")]
    counts = _capture_campaign(base, rel, fields, ("analyze", "compare"), tmp_path / "w", CAPTURE_VALUES)
    CAMPAIGN["synthetic cupti.jsonl"] = counts
    assert counts.get("refused", 0) > 50, counts


# --------------------------------------------------------------------------- ncu CSV
@pytest.mark.parametrize("page", ["raw", "details"])
def test_ncu_csv_id_columns(page, tmp_path):
    """Real ncu 2022.3 exports of Extra-P's ex-gpu: each id column of the first launch row (and the
    fixed columns before it) set to text, a real, a huge or a negative number, nothing: refused
    naming the file and the line, or read with the same launch count."""
    import csv
    import io

    src = CORPUS / "ncu" / f"ncu_extrap_ex-gpu.s10_{page}_by_ncu2022.3.csv"
    if not src.is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    from parsers.ncu import NCU_INT_COLUMNS, read_csv

    rows = list(csv.reader(io.StringIO(src.read_text())))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    di = next(i for i in range(hi + 1, len(rows)) if rows[i] and rows[i][0].strip().isdigit())
    header = rows[hi]
    intact = len(read_csv(src))
    counts: dict[str, int] = {}
    for col in [c for c in header[:12] if c] + ["launch__device_id"]:
        if col not in header:
            continue
        for value in ("x", "1.5", "1e400", "inf", "nan", "", "9" * 30, "-5"):
            changed = [list(r) for r in rows]
            changed[di][header.index(col)] = value
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL).writerows(changed)
            p = tmp_path / "x.csv"
            p.write_text(buf.getvalue())
            try:
                got = len(read_csv(p))
                outcome = "same count" if got == intact else "other count"
            except BadInput as e:
                assert "\n" not in str(e) and str(p) in str(e), str(e)
                outcome = "refused"
            if col in NCU_INT_COLUMNS and value in ("x", "1.5", "9" * 30, "1e400", "inf", "nan"):
                assert outcome == "refused", (col, value, outcome)
            counts[outcome] = counts.get(outcome, 0) + 1
    CAMPAIGN[f"ncu csv {page} (reader)"] = counts
