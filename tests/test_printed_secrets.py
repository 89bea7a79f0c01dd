"""Issue 44: a secret in a traced command line is never printed nor written by ``diff`` (its
``next:`` line, ``--json``'s ``next_command`` and comparability), ``kernel --from``'s line or a dry
run; the next step stays runnable as printed: ``--command-from TRACE`` reads the command from the
trace that recorded it. On main every one of the 8 forms below was printed as recorded.

The traces are SYNTHETIC (tests/test_diff.write_trace: the native format, hand-written).
"""
from __future__ import annotations

import json
import shlex

import pytest

from forensics.cli import main
from forensics.core.redact import argv_holds_secret
from forensics.tracediff.from_report import command_from_trace, site_from_report
from tests.test_diff import base_records, tensor, write_trace

SECRET = "S3cr3tValue123"
#: The argv forms of a secret the campaign tried (8 of 8 printed on main).
FORMS = {
    "flag-value": ["--api-key", SECRET],
    "flag-equals": [f"--token={SECRET}"],
    "header": ["--header", f"Authorization: Bearer {SECRET}"],
    "url": ["--url", f"https://user:{SECRET}@host/x"],
    "pem": ["--key", f"-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----"],
    "env-style": [f"HF_TOKEN={SECRET}"],
    "password": ["--password", SECRET],
    "token-shape": ["--x", f"hf_{SECRET}abcdefghijklmnop"],
}


def _origin_pair(tmp_path, argv_a, argv_b=None):
    recs_b = base_records()
    recs_b[1]["out"] = [tensor("m2")]
    recs_b[2]["in"], recs_b[2]["out"] = [tensor("m2")], [tensor("r2")]
    a = write_trace(tmp_path / "a", {0: base_records()}, argv=argv_a)
    b = write_trace(tmp_path / "b", {0: recs_b}, argv=argv_b or argv_a)
    return a, b


@pytest.mark.parametrize("form", sorted(FORMS))
def test_diff_prints_and_writes_no_secret_and_its_next_line_runs(form, tmp_path, capsys):
    argv = ["python", "train.py", *FORMS[form]]
    assert argv_holds_secret(argv)
    a, b = _origin_pair(tmp_path, argv)
    report = tmp_path / "r.json"
    code = main(["diff", str(a), str(b), "--json", str(report)])
    out, err = capsys.readouterr()
    written = report.read_text()
    assert code == 1
    assert SECRET not in out + err + written
    nxt = next(line for line in out.splitlines() if line.startswith("next: "))[len("next: "):]
    assert nxt == json.loads(written)["next_command"]
    words = shlex.split(nxt)
    assert words[words.index("--command-from") + 1] == str(a) and "--" not in words
    assert command_from_trace(a) == argv  # what the printed line runs: the traced command, whole
    found = site_from_report(report)  # `kernel --from REPORT` reads the command from the trace too
    assert found.ok and found.command[found.command.index("--") + 1:] == argv
    assert SECRET not in found.command_line()


def test_a_command_without_a_secret_is_printed_as_before(tmp_path):
    a, b = _origin_pair(tmp_path, ["python", "train.py", "--lr", "0.1"])
    from forensics.tracediff.diff import diff_paths

    assert diff_paths(a, b).next_command.endswith(" -- python train.py --lr 0.1")


def test_run_b_command_with_a_secret_is_no_arm_and_is_not_printed(tmp_path, capsys):
    a, b = _origin_pair(tmp_path, ["python", "train.py"], ["python", "train.py", "--api-key", SECRET])
    code = main(["diff", str(a), str(b), "--json", str(tmp_path / "r.json")])
    out, err = capsys.readouterr()
    assert code == 1 and SECRET not in out + err + (tmp_path / "r.json").read_text()
    nxt = next(line for line in out.splitlines() if line.startswith("next: "))
    assert "--arm-command" not in nxt and nxt.endswith("-- python train.py")
    found = site_from_report(tmp_path / "r.json")
    assert any("holds a secret" in w for w in found.warnings)


def test_kernel_command_from_a_trace_and_its_dry_run_print_no_secret(tmp_path, capsys):
    a, _ = _origin_pair(tmp_path, ["python", "train.py", "--api-key", SECRET])
    code = main(["kernel", "--device", "cpu", "--site", "aten.mm.default", "--command-from", str(a),
                 "--toggle", f"NVTE_API_TOKEN={SECRET}x", "--out", str(tmp_path / "cap"), "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "argv: python train.py --api-key <redacted>" in out + err
    assert SECRET not in out + err


def test_command_from_a_trace_without_a_command_is_bad_input(tmp_path, capsys):
    from tests._helpers import assert_bad_input

    code = main(["kernel", "--device", "cpu", "--site", "aten.mm.default", "--command-from",
                 str(tmp_path / "nowhere"), "--dry-run"])
    out, err = capsys.readouterr()
    assert_bad_input(code, err, needle="nowhere", out=out)
