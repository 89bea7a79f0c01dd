"""Seeded mutation fuzzing of whole commands (analyze, compare, bundle, diff) over captures,
manifests, site and CUPTI files, traces, and real corpus files.

Every case copies a base capture, damages one file in one seeded way and runs the command
in-process under a watchdog. Whatever the damage, the command must end with:

* exit 3 and exactly one line on stderr (``forensics: bad input: FILE[:LINE]: ...``), or
* a result (exit 0/1) -- and for a *strict* mutation (a value of another JSON type, NaN or
  Infinity, nesting 1,000 deep, invalid UTF-8, a garbage line) that result must equal the
  undamaged capture's, or disclose the damage (a note or missing line naming the file);

never a traceback, an internal error (exit 70), another exit code or a hang. Other mutations
(byte flips, truncation) may legitimately change a result: a flipped digit is another valid
value, a file cut at a line boundary is a shorter valid file.

Traces: a real trace of a CPU training loop written by ``forensics trace`` (tests/data/scripts/
optrace_threads.py) and the SYNTHETIC Megatron fixture, damaged the same way and diffed against
the undamaged run with ``forensics diff``: exit 3 and one line, or the undamaged diff (no
divergence), or a result that says it is partial.

Bounded for CI: 59 command cases + 34 trace cases, about 40 s of CPU on 2 cores. ``FORENSICS_FUZZ_SEED`` and
``FORENSICS_FUZZ_SCALE`` (a multiplier) explore further; every case id names its seed, file
and mutation, so a failure reproduces with ``pytest -k <id>``.

Inputs: a SYNTHETIC capture (tests/synthetic_captures.py: real formats, made-up values), a real
CPU-backend capture of ours (tests/fixtures/cpu/example: site records, CPU probe records, an
oneMKL verbose log, a torch.profiler trace), the real nsys + ncu pair shipped in
examples/corpus-ex-gpu, and (when ../shared/corpus is present)
real Kineto, Nsight Compute CSV, cuBLASLt and legacy cuBLAS files.
"""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from forensics.capture.directory import new_manifest, write_manifest
from forensics.cli import main
from tests.conftest import CORPUS
from tests.synthetic_captures import Arm, build_capture, wgrad_scenario

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
SEED = int(os.environ.get("FORENSICS_FUZZ_SEED", "15"))
SCALE = float(os.environ.get("FORENSICS_FUZZ_SCALE", "1"))
#: ``FORENSICS_FUZZ_TALLY=FILE``: each case appends one JSON line, its id and how it ended
#: (``refused``: exit 3 and one line; ``same``: the undamaged result; ``disclosed``: another result
#: that names the damaged file; ``result``: a result of a non-strict mutation), for a campaign's
#: figures (benchmarks/fuzz_tally.py). A failing case writes no line: pytest reports it.
TALLY = os.environ.get("FORENSICS_FUZZ_TALLY")


def _tally(case_id: str, outcome: str, code: object = None) -> None:
    if TALLY:
        with open(TALLY, "a", encoding="utf-8") as f:
            f.write(json.dumps({"case": case_id, "outcome": outcome, "exit": code}) + "\n")
WATCHDOG_S = 60
STRICT_OPS = ("type", "utf8", "garbage")

#: Real files (path under ../shared/corpus, instrument) fuzzed when the corpus is present.
CORPUS_SETS = {
    "kineto": [("kineto/kineto_v100_resnet50_2021_worker0.pt.trace.json.gz", "kineto")],
    "ncu_csv": [("ncu/ncu_zsl98_a100_ampere_sgemm_x11_raw.csv", "ncu_csv"),
                ("ncu/ncu_zsl98_a100_ampere_sgemm_x11.ncu-rep", "ncu")],
    "cublas_logs": [("cublaslt/cublaslt_l5_torch_matmul_aarch64_stdout.log", "cublaslt"),
                    ("cublas_legacy/cublas_legacy_gopeft_lora.log", "cublas")],
}
SHIPPED = [("a1/ex-gpu.s10.sqlite", "nsys"), ("a1/ex-gpu.s10.ncu-rep", "ncu")]
#: A real CPU-backend capture of ours (tests/fixtures/cpu/PROVENANCE.md) and the files fuzzed in it.
CPU_CAPTURE = REPO / "tests" / "fixtures" / "cpu" / "example"
CPU_FILES = ["manifest.yaml", "a1/rank0/sites.jsonl", "a2/rank0/cpuprobe.jsonl", "a1/rank0/MKL",
             "a2/rank0/TORCHPROF"]


@dataclass(frozen=True)
class Case:
    base: str  # "synthetic", "shipped" or a CORPUS_SETS key
    command: str  # analyze | compare | bundle
    file: str  # relative to the capture
    op: str  # type | utf8 | garbage | flip | truncate | manifest
    seed: int

    @property
    def id(self) -> str:
        return f"{self.base}-{self.command}-{self.file.replace('/', '_')}-{self.op}-{self.seed}"

    @property
    def strict(self) -> bool:
        return self.op in STRICT_OPS or self.op == "manifest"


SYNTHETIC_FILES = ["manifest.yaml", "a1/rank0/sites.jsonl", "a2/rank0/sites.jsonl", "a1/rank0/cupti.jsonl",
                   "a2/rank0/cupti.jsonl", "a1/rank0/environment.json", "ws0/rank0/sites.jsonl",
                   "a2/rank0/cublaslt.LOG"]


def _cases() -> list[Case]:
    rng = random.Random(SEED)
    out: list[Case] = []

    def n(count: int) -> int:
        return max(1, int(count * SCALE))

    for command, count in (("analyze", 24), ("compare", 8), ("bundle", 3)):
        for _ in range(n(count)):
            file = rng.choice(SYNTHETIC_FILES)
            if file == "manifest.yaml":
                op = rng.choice(["manifest", "manifest", "utf8", "garbage", "flip", "truncate"])
            elif file.endswith(".LOG"):
                op = rng.choice(["utf8", "garbage", "flip", "truncate"])
            else:
                op = rng.choice(["type", "type", "type", "utf8", "garbage", "flip", "truncate"])
            out.append(Case("synthetic", command, file, op, rng.randrange(1 << 30)))
    for _ in range(n(8)):
        file = rng.choice(CPU_FILES)
        if file == "manifest.yaml":
            op = rng.choice(["manifest", "utf8", "flip"])
        elif file.endswith("MKL"):
            op = rng.choice(["utf8", "garbage", "flip", "truncate"])
        else:
            op = rng.choice(["type", "type", "utf8", "garbage", "flip", "truncate"])
        out.append(Case("cpu", rng.choice(["analyze", "analyze", "compare"]), file, op, rng.randrange(1 << 30)))
    for _ in range(n(6)):
        file, _inst = rng.choice(SHIPPED)
        out.append(Case("shipped", "analyze", file, rng.choice(["flip", "flip", "truncate"]), rng.randrange(1 << 30)))
    for _ in range(n(10)):
        name = rng.choice(sorted(CORPUS_SETS))
        rel, _inst = rng.choice(CORPUS_SETS[name])
        text = not rel.endswith((".ncu-rep",))
        op = rng.choice((["type", "utf8", "garbage"] if rel.endswith(".json.gz") else
                         ["utf8", "garbage"] if text else []) + ["flip", "truncate"])
        out.append(Case(name, "analyze", "a1/" + Path(rel).name, op, rng.randrange(1 << 30)))
    return out


CASES = _cases()


# --------------------------------------------------------------------------- mutations
_OTHER_TYPES = ["x", 1.5, [1], {"a": 1}, True, "__INF__", "__NAN__", "__DEEP__"]


def _kind(v: object) -> str:
    return "number" if isinstance(v, (int, float)) and not isinstance(v, bool) else type(v).__name__


def _json_with_type_change(obj: object, rng: random.Random, allowed: dict | None = None) -> tuple[str, str] | None:
    """Replace one value somewhere in ``obj`` by a value of another JSON type (or NaN/Infinity/deep nesting).

    ``allowed``: top-level key -> the types the format allows there (a version may be text or a
    number): the new value is then of none of them.
    """
    paths: list[list] = []

    def walk(o: object, p: list) -> None:
        if isinstance(o, dict):
            for k, v in o.items():
                paths.append([*p, k])
                walk(v, [*p, k])
        elif isinstance(o, list):
            for i, v in enumerate(o):
                paths.append([*p, i])
                walk(v, [*p, i])

    walk(obj, [])
    paths = [p for p in paths if _value_at(obj, p) is not None]
    if not paths:
        return None
    path = rng.choice(paths)
    old = _value_at(obj, path)
    choices = [v for v in _OTHER_TYPES if _kind(v) != _kind(old) or (isinstance(v, float) and isinstance(old, int)
                                                                        and not isinstance(old, bool))]
    if allowed and len(path) == 1 and path[0] in allowed:
        choices = [v for v in choices if v in ("__INF__", "__NAN__", "__DEEP__") or not isinstance(v, allowed[path[0]])]
    new = rng.choice(choices)
    holder = _value_at(obj, path[:-1])
    holder[path[-1]] = "__MUTATED__"
    literal = {"__INF__": "Infinity", "__NAN__": "NaN", "__DEEP__": "[" * 1000 + "]" * 1000}.get(new) \
        if isinstance(new, str) else None
    text = json.dumps(obj).replace('"__MUTATED__"', literal or json.dumps(new))
    return text, f"{path}: {old!r} -> {literal[:12] if literal else new!r}"


def _value_at(obj: object, path: list) -> object:
    for p in path:
        obj = obj[p]  # type: ignore[index]
    return obj


def _mutate(path: Path, op: str, rng: random.Random) -> str:
    """Damage ``path`` in place; returns what was done."""
    data = path.read_bytes()
    gz = path.name.endswith(".gz")
    if gz and op in ("type", "utf8", "garbage"):
        data = gzip.decompress(data)
    if op == "flip":
        buf = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(buf))
            buf[i] ^= rng.randint(1, 255)
        path.write_bytes(bytes(buf))
        return "byte flips"
    if op == "truncate":
        cut = rng.randrange(len(data))
        path.write_bytes(data[:cut])
        return f"truncated at byte {cut}"
    if op == "utf8":
        i = rng.randrange(len(data))
        new, what = data[:i] + b"\xff\xfe" + data[i:], f"invalid UTF-8 at byte {i}"
    elif op == "garbage":
        lines = data.split(b"\n")
        i = rng.randrange(len(lines))
        lines.insert(i, b"}{ garbage \x01 line")
        new, what = b"\n".join(lines), f"garbage line inserted at line {i + 1}"
    elif op == "type":
        if path.suffix == ".jsonl":
            lines = data.decode().split("\n")
            candidates = [i for i, x in enumerate(lines) if x.strip()]
            i = rng.choice(candidates)
            changed = _json_with_type_change(json.loads(lines[i]), rng)
            if changed is None:
                return "unchanged"
            lines[i], what = changed[0], f"line {i + 1} {changed[1]}"
            new = "\n".join(lines).encode()
        else:  # one JSON document (environment.json, a Kineto trace)
            doc = json.loads(data)
            if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list) and doc["traceEvents"]:
                j = rng.randrange(len(doc["traceEvents"]))
                changed = _json_with_type_change(doc["traceEvents"][j], rng)
                if changed is None:
                    return "unchanged"
                doc["traceEvents"][j] = "__EVENT__"
                new = json.dumps(doc).replace('"__EVENT__"', changed[0]).encode()
                what = f"traceEvents[{j}] {changed[1]}"
            else:
                from forensics.capture.environment import VERSION_FIELDS

                changed = _json_with_type_change(doc, rng, VERSION_FIELDS if path.name == "environment.json" else None)
                if changed is None:
                    return "unchanged"
                new, what = changed[0].encode(), changed[1]
    else:
        raise AssertionError(op)
    path.write_bytes(gzip.compress(new) if gz else new)
    return what


def _mutate_manifest(path: Path, rng: random.Random) -> str:
    m = yaml.safe_load(path.read_text())
    arm = rng.randrange(len(m["arms"]))
    key = rng.choice(["name", "role", "env", "toggle", "versions", "command", "world_size", "of"])
    new = rng.choice([5, 1.5, [1, 2], {"a": [1]}, "", None, True, "x"])
    if key == "name" and new is None:
        m["arms"][arm].pop("name")
    else:
        m["arms"][arm][key] = new
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    return f"arms[{arm}].{key} = {new!r}"


_PID_NAMED = {"cublaslt.LOG": "cublaslt.*.log", "MKL": "mkl.*.log", "TORCHPROF": "torchprof.*.json.gz"}


# --------------------------------------------------------------------------- running
class _Hang(BaseException):
    """Raised by the watchdog: not an Exception, so the CLI cannot mistake it for a crash of its own."""


def _run(argv: list[str]) -> tuple[object, str, str]:
    out, err = io.StringIO(), io.StringIO()

    def hang(*_: object) -> None:
        raise _Hang

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(WATCHDOG_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: object = main(argv)
    except _Hang:
        code = "HANG"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()



def _refused(code: object, stdout: str, stderr: str, where: str) -> bool:
    """Never a hang, a traceback or another exit code; True when refused as bad input (exit 3, one line)."""
    assert code != "HANG", f"{where}: still running after {WATCHDOG_S} s"
    assert "Traceback" not in stdout + stderr, f"{where}: traceback\n{stderr}"
    assert code in (0, 1, 3), f"{where}: exit {code}\n{stderr}"
    if code != 3:
        return False
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("forensics: bad input: "), f"{where}: {stderr}"
    return True

def _argv(command: str, cap: Path, out: Path) -> list[str]:
    return {"analyze": ["analyze", str(cap), "-q", "--out", str(out / "analysis")],
            "compare": ["compare", str(cap), "--json", str(out / "compare.json")],
            "bundle": ["bundle", str(cap), "-o", str(out / "bundle.tar.gz")]}[command]


def _result(command: str, code: object, stdout: str, out: Path) -> tuple[object, str, str]:
    """(exit code, what the command concluded, what it disclosed) -- comparable across runs."""
    if command == "analyze":
        doc = json.loads((out / "analysis" / "analysis.json").read_text())
        verdicts = sorted(json.dumps({k: v for k, v in r.items() if k in ("arm", "rank", "scope", "kernel", "verdict",
                                                                          "counts")}, sort_keys=True)
                          for r in doc["verdicts"])
        return code, "\n".join(verdicts), "\n".join(doc["missing"] + doc["notes"])
    if command == "compare":
        doc = json.loads((out / "compare.json").read_text())
        # "wrote", "next:" and "then:" lines name the capture's own path (the copy's differs from the base's)
        lines = [x for x in stdout.splitlines() if not x.startswith(("wrote ", "next: ", "then: "))]
        return code, json.dumps(doc["comparison"], sort_keys=True, default=str) + "\n".join(lines), stdout
    import tarfile

    with tarfile.open(out / "bundle.tar.gz") as tar:
        ev = next(json.loads(tar.extractfile(m).read()) for m in tar.getmembers() if m.name.endswith("evidence.json"))
    summary = {k: ev[k] for k in ("site", "focus", "verdicts", "comparison", "toggles")}
    return code, json.dumps(summary, sort_keys=True, default=str), "\n".join(ev["missing"] + ev["notes"])


# --------------------------------------------------------------------------- bases
@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fuzzbase")
    made = {"synthetic": build_capture(root / "synthetic", wgrad_scenario()[2:6],
                                       [Arm("a1"), Arm("a2"), Arm("ws0", toggle={"CUBLAS_WORKSPACE_CONFIG": ":0:0"})])}
    shipped = root / "shipped"
    (shipped / "a1").mkdir(parents=True)
    for rel, _ in SHIPPED:
        shutil.copy(REPO / "examples" / "corpus-ex-gpu" / rel, shipped / rel)
    write_manifest(shipped, new_manifest(files=[{"path": rel, "instrument": inst, "arm": "a1", "rank": 0}
                                                for rel, inst in SHIPPED]))
    made["shipped"] = shipped
    made["cpu"] = CPU_CAPTURE
    if CORPUS.is_dir():
        for name, files in CORPUS_SETS.items():
            d = root / name
            (d / "a1").mkdir(parents=True)
            for rel, _ in files:
                shutil.copy(CORPUS / rel, d / "a1" / Path(rel).name)
            write_manifest(d, new_manifest(files=[{"path": "a1/" + Path(rel).name, "instrument": inst, "arm": "a1",
                                                   "rank": 0} for rel, inst in files]))
            made[name] = d
    return made


@pytest.fixture(scope="module")
def baselines(bases, tmp_path_factory) -> dict[tuple[str, str], tuple[object, str, str]]:
    out: dict[tuple[str, str], tuple[object, str, str]] = {}
    for name, cap in bases.items():
        commands = {"synthetic": ("analyze", "compare", "bundle"), "cpu": ("analyze", "compare")}.get(name, ("analyze",))
        for command in commands:
            work = tmp_path_factory.mktemp("fuzzbaseline")
            code, stdout, stderr = _run(_argv(command, cap, work))
            assert code in (0, 1), (name, command, stderr)
            out[(name, command)] = _result(command, code, stdout, work)
    return out


@pytest.fixture(autouse=True)
def _crash_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CRASH_DIR", str(tmp_path / "crashes"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_damaged_input_is_one_line_or_a_correct_result(case: Case, bases, baselines, tmp_path):
    if case.base not in bases:
        pytest.skip(f"real corpus not found at {CORPUS}")
    cap = tmp_path / "cap"
    shutil.copytree(bases[case.base], cap, symlinks=True)
    target = cap / case.file
    if target.name in _PID_NAMED:  # log names carry a pid
        target = next(cap.glob(str(Path(case.file).parent / _PID_NAMED[target.name])))
    rng = random.Random(case.seed)
    what = _mutate_manifest(target, rng) if case.op == "manifest" else _mutate(target, case.op, rng)
    if what == "unchanged":
        pytest.skip("nothing to mutate in the chosen record")
    out = tmp_path / "out"
    out.mkdir()
    code, stdout, stderr = _run(_argv(case.command, cap, out))
    where = f"{case.id}: {target.relative_to(cap)}: {what}"
    if _refused(code, stdout, stderr, where):
        _tally(case.id, "refused", code)
        return
    assert stderr.strip() == "", f"{where}: a result with stderr output: {stderr}"
    if not case.strict:
        _tally(case.id, "result", code)
        return
    got = _result(case.command, code, stdout, out)
    want = baselines[(case.base, case.command)]
    if got[:2] == want[:2]:
        _tally(case.id, "same", code)
        return
    name = target.name
    disclosed = name in got[2] and name not in want[2]
    assert disclosed, (f"{where}: the result changed and nothing says so\n--- undamaged\n{want[1][:2000]}\n"
                       f"--- damaged\n{got[1][:2000]}")
    _tally(case.id, "disclosed", code)


# --------------------------------------------------------------------------- traces through `forensics diff`
TRACE_FILES = {"native": "rank0/trace.jsonl", "megatron": "rank_000000.jsonl"}


def _trace_cases() -> list[Case]:
    rng = random.Random(SEED + 1)
    out = []
    for base, count in (("native", 24), ("megatron", 10)):
        for _ in range(max(1, int(count * SCALE))):
            op = rng.choice(["type", "type", "type", "utf8", "garbage", "flip", "truncate"])
            out.append(Case(base, "diff", TRACE_FILES[base], op, rng.randrange(1 << 30)))
    return out


TRACE_CASES = _trace_cases()


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    """A real trace of a CPU training loop (forensics trace) and the SYNTHETIC Megatron fixture."""
    made = {"megatron": REPO / "tests" / "data" / "megatron" / "run_a"}
    torch = pytest.importorskip("torch")
    if hasattr(torch, "hash_tensor"):
        import sys

        from forensics.commands.trace import trace_command

        out = tmp_path_factory.mktemp("fuzztrace") / "run"
        code, _ = trace_command([sys.executable, str(REPO / "tests" / "data" / "scripts" / "optrace_threads.py"),
                                 "--threads", "1", "--steps", "2"], out, steps="all")
        assert code == 0
        made["native"] = out
    return made


def _diff_result(code: object, stdout: str, work: Path) -> tuple[object, str]:
    return code, stdout.replace(str(work), "<B>")


@pytest.mark.parametrize("case", TRACE_CASES, ids=[c.id for c in TRACE_CASES])
def test_damaged_trace_is_one_line_or_a_correct_diff(case: Case, traces, tmp_path):
    if case.base not in traces:
        pytest.skip("torch without hash_tensor: no native trace to fuzz")
    base = traces[case.base]
    work = tmp_path / "b"
    shutil.copytree(base, work)
    code0, out0, err0 = _run(["diff", str(base), str(work)])
    assert code0 == 0, err0
    want = _diff_result(code0, out0, work)
    target = work / case.file
    what = _mutate(target, case.op, random.Random(case.seed))
    if what == "unchanged":
        pytest.skip("nothing to mutate in the chosen record")
    code, stdout, stderr = _run(["diff", str(base), str(work)])
    where = f"{case.id}: {what}"
    if _refused(code, stdout, stderr, where):
        _tally(case.id, "refused", code)
        return
    if not case.strict:
        _tally(case.id, "result", code)
        return
    got = _diff_result(code, stdout, work)
    disclosed = any(word in stdout for word in ("partial", "truncated", target.name))
    assert got == want or disclosed, f"{where}: the diff changed and nothing says so\n{want[1]}\n---\n{got[1]}"
    _tally(case.id, "same" if got == want else "disclosed", code)
