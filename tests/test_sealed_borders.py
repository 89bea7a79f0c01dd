"""Issue 44's border cases, each failing on the main it was filed against: a damaged nsys export's
schema (an internal error in recognition), ``--rows`` past the site's rows (a verdict over sizes
never tried) and ``--dry-run`` ignoring ``--rows``, wrong types that changed a verdict silently
(DebugMode ``input_hash`` as an object), a missing optional field refusing a whole native trace,
the Python API's borders (``keep_going='no'``, ``knob(paths='dir')``, ``site=['x']``), and
``forensics PATH`` (a path where the command goes).

Hand-written traces here are SYNTHETIC (tests/test_diff.write_trace: the native format).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import forensics
from forensics.cli import main
from forensics.core.errors import BadArgument, BadInput
from forensics.runtime.console import unfit
from tests._helpers import assert_bad_input
from tests.conftest import CORPUS, REPO
from tests.test_diff import base_records, tensor, write_trace

NSYS = CORPUS / "nsys" / "extrap_con_kernel.sqlite"
CAPTURE = REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads"


# --------------------------------------------------------------------------- nsys: a damaged schema
def test_a_schema_that_does_not_decode_is_recognised_as_damaged_not_an_internal_error(tmp_path, monkeypatch):
    """The UnicodeDecodeError the campaign met in recognise._sqlite (an exit 70): now a reason."""
    from forensics.instruments import recognise

    class _Conn:
        text_factory = None

        def execute(self, *_a):
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

        def close(self):
            pass

    f = tmp_path / "report.sqlite"
    f.write_bytes(b"SQLite format 3\x00" + b"\x00" * 200)
    monkeypatch.setattr(recognise.sqlite3, "connect", lambda *a, **k: _Conn())
    seen = recognise.recognise(f)
    assert seen.instrument is None and "does not open" in seen.why and "UnicodeDecodeError" in seen.why


def test_a_flipped_byte_in_a_table_name_is_one_line(tmp_path, capsys):
    if not NSYS.is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    f = tmp_path / "report.sqlite"
    f.write_bytes(NSYS.read_bytes().replace(b"StringIds", b"Str\xffngIds"))
    code = main(["analyze", str(f)])
    out, err = capsys.readouterr()
    assert_bad_input(code, err, file=f, out=out)


# --------------------------------------------------------------------------- --rows at the CLI border
def test_dry_run_honours_rows(tmp_path, capsys):
    code = main(["kernel", "--device", "cpu", "--site", "aten.mm.default", "--rows", "0,x", "--dry-run", "--",
                 "python", "x.py"])
    _, err = capsys.readouterr()
    assert code == 2 and "--rows: '0' is not a row count >= 1" in err
    code = main(["kernel", "--device", "cpu", "--site", "aten.mm.default", "--rows", "1,2", "--dry-run", "--",
                 "python", "x.py", "--api-key", "abcdefgh12"])
    out, err = capsys.readouterr()
    assert code == 0 and "dry run of --rows 1,2" in out and "one replay process per row count" in out
    assert "abcdefgh12" not in out + err and "pass a1" not in out  # the sweep's plan, not the arms'


MM = "import torch\na = torch.randn(8, 16)\nb = torch.randn(16, 4)\nc = torch.mm(a, b)\n"


@pytest.mark.slow
def test_rows_beyond_the_site_rows_are_refused_not_a_verdict(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "mm.py"
    script.write_text(MM)
    proc = subprocess.run([sys.executable, "-m", "forensics", "kernel", "--device", "cpu", "--site", "aten.mm.default",
                           "--steps", "0", "--rows", "1000000000", "--out", str(tmp_path / "o"), "-q", "--",
                           sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "BATCH-INVARIANT" not in proc.stdout
    assert "no row count asked (1000000000) is below the site's 8 rows" in proc.stderr


# --------------------------------------------------------------------------- wrong types that change a verdict
def _dump(path: Path, input_hash) -> Path:
    """SYNTHETIC DebugMode dump (forensics.tracediff.traces.debugmode.dump's format)."""
    header = {"forensics_debugmode": 1, "torch": "2.13", "rank": 0, "step": 0, "hash_fn": "hash_tensor",
              "argv": ["python", "x.py"]}
    call = {"i": 0, "type": "_OpCall", "depth": 1, "op": "aten::mm", "args": "t: f32[2, 2], t: f32[2, 2]",
            "out": "t: f32[2, 2]", "input_hash": input_hash, "hash": 7}
    path.mkdir(parents=True, exist_ok=True)
    f = path / "debugmode.rank0.jsonl"
    f.write_text(json.dumps(header) + "\n" + json.dumps(call) + "\n")
    return f


def test_debugmode_input_hash_as_an_object_is_bad_input(tmp_path):
    from forensics.tracediff.traces.debugmode import read_structured

    read_structured(_dump(tmp_path / "ok", [[1, 2], {}]))  # the real shape: (args, kwargs)
    f = _dump(tmp_path / "bad", {"a": 1})
    with pytest.raises(BadInput) as e:
        read_structured(f)
    assert e.value.line == 2 and "input_hash" in e.value.message


def _origin_pair(tmp_path: Path, drop_dtype_of):
    recs_b = base_records()
    recs_b[1]["out"] = [tensor("m2")]
    recs_b[2]["in"], recs_b[2]["out"] = [tensor("m2")], [tensor("r2")]
    drop_dtype_of(recs_b)
    return write_trace(tmp_path / "a", {0: base_records()}), write_trace(tmp_path / "b", {0: recs_b})


def test_a_native_entry_without_its_dtype_lowers_that_record_not_the_file(tmp_path, capsys):
    """On main: 'tensor entry: dtype 't' must be a string, got null', exit 3, every rank dropped."""
    a, b = _origin_pair(tmp_path, lambda recs: recs[1]["in"][0].pop("t"))
    code = main(["diff", str(a), str(b)])
    out, err = capsys.readouterr()
    out = unfit(out)  # piped lines are broken at 100 columns: read them whole
    assert code == 1, err
    assert "ORIGIN (unproven: dtype not recorded) aten.mm.default:1" in out
    assert "next: forensics trace" in out  # an unproven ORIGIN is not handed to kernel


def test_a_native_entry_without_its_dtype_still_shows_a_difference(tmp_path, capsys):
    a, b = _origin_pair(tmp_path, lambda recs: recs[2]["out"][0].pop("t"))
    code = main(["diff", str(a), str(b)])
    out = unfit(capsys.readouterr()[0])
    assert code == 1 and "ORIGIN (proven) aten.mm.default:1" in out


def test_a_wrong_typed_dtype_is_still_refused(tmp_path, capsys):
    def wrong(recs):
        recs[1]["in"][0]["t"] = 5
    a, b = _origin_pair(tmp_path, wrong)
    code = main(["diff", str(a), str(b)])
    out, err = capsys.readouterr()
    assert_bad_input(code, err, needle="dtype 't' must be a string", out=out)


# --------------------------------------------------------------------------- the Python API's borders
@pytest.mark.parametrize("call, argument", [
    (lambda: forensics.analyze(CAPTURE, site=["x"]), "site"),
    (lambda: forensics.analyze(CAPTURE, keep_going="no"), "keep_going"),
    (lambda: forensics.load_capture(CAPTURE, keep_going="no"), "keep_going"),
    (lambda: forensics.knob("OMP_NUM_THREADS", paths="dir"), "paths"),
    (lambda: forensics.analyze(123), "path"),
    (lambda: forensics.analyze(CAPTURE, jobs="2"), "jobs"),
    (lambda: forensics.compare(CAPTURE, force="yes"), "force"),
    (lambda: forensics.diff(CAPTURE, None), "b"),
    (lambda: forensics.diff(CAPTURE, CAPTURE, rank="0"), "rank"),
    (lambda: forensics.load_trace([CAPTURE]), "path"),
    (lambda: forensics.knob(["OMP_NUM_THREADS"]), "name"),
])
def test_a_wrong_typed_api_argument_is_refused_at_the_border(call, argument):
    with pytest.raises(BadArgument) as e:
        call()
    assert str(e.value).startswith(f"{argument}: expected ")
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError) and e.value.exit_code == 2


def test_the_api_exception_is_documented():
    assert "forensics.core.errors.BadArgument" in (REPO / "docs" / "api.md").read_text()


# --------------------------------------------------------------------------- forensics PATH
def test_an_unreadable_top_level_path_is_one_line_exit_3(tmp_path, capsys):
    missing = tmp_path / "no-such-capture"
    code = main([str(missing)])
    out, err = capsys.readouterr()
    assert_bad_input(code, err, file=missing, out=out)
    shutil.copytree(CAPTURE, tmp_path / "cap")
    code = main([str(tmp_path / "cap")])
    _, err = capsys.readouterr()
    assert code == 2 and len(err.strip().splitlines()) == 1 and "forensics analyze" in err



def test_nsys_string_ids_holding_numbers_is_said_not_a_silent_no_kernel_named(tmp_path, capsys):
    """The README's real GPU pair (5 kernels NAMED) with StringIds' values replaced by numbers (the
    column's text affinity keeps them as '1925'): on main 'no kernel NAMED', exit 1, no note."""
    import sqlite3

    cap = tmp_path / "cap"
    shutil.copytree(REPO / "examples" / "corpus-ex-gpu", cap)
    with sqlite3.connect(cap / "a1" / "ex-gpu.s10.sqlite") as con:
        con.execute("UPDATE StringIds SET value = id")
    code = main(["analyze", str(cap), "--out", str(tmp_path / "an")])
    out, err = capsys.readouterr()
    assert_bad_input(code, err, file="ex-gpu.s10.sqlite", needle="a number, not a kernel symbol", out=out)
