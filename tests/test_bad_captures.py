"""Hostile captures through analyze, compare and bundle: one line and exit 3 (or a correct result),
never a traceback, a hang, a partial output or an internal error.

Captures are SYNTHETIC (tests/synthetic_captures.py: real formats, made-up values), then broken
the way issue 15 found them broken: manifest.yaml (invalid UTF-8, impossible dates, wrong types,
missing keys, a directory in its place, an alias bomb, deep nesting), wrong-typed JSON values
(Infinity, unhashable ids, nesting depth 1,000), a FIFO, a symbolic-link loop, a backslash in
an arm folder name.
"""
from __future__ import annotations

import json
import os
import signal
import tarfile
import time
from pathlib import Path

import pytest
import yaml

from forensics.cli import main
from tests._helpers import assert_bad_input
from tests.synthetic_captures import Arm, Gemm, build_capture

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

COMMANDS = ("analyze", "compare", "bundle")


@pytest.fixture(autouse=True)
def _crash_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CRASH_DIR", str(tmp_path / "crashes"))


@pytest.fixture
def cap(tmp_path):
    gemms = [Gemm("gemm:NT:acc0:grad1", 256, 256, 512, diverge_in=("a2",))]  # SYNTHETIC
    return build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a2")])


class _Hang(BaseException):
    pass


def _run(argv: list[str], capsys, seconds: int = 60) -> tuple[int, str, str]:
    def hang(*_):
        raise _Hang(f"{argv[0]} still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        code = main(argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    out, err = capsys.readouterr()
    return code, out, err


def _argv(command: str, cap: Path, tmp_path: Path) -> list[str]:
    return {"analyze": ["analyze", str(cap), "-q", "--out", str(tmp_path / "an")],
            "compare": ["compare", str(cap)],
            "bundle": ["bundle", str(cap), "-o", str(tmp_path / "b.tar.gz")]}[command]


def _assert_bad_input(command: str, cap: Path, tmp_path: Path, capsys, needle: str) -> str:
    code, out, err = _run(_argv(command, cap, tmp_path), capsys)
    line = assert_bad_input(code, err, needle=needle, out=out)
    assert not (tmp_path / "b.tar.gz").exists() and not (tmp_path / "an").exists()
    return line


def _set_manifest(cap: Path, text: str | bytes) -> None:
    path = cap / "manifest.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())


def _manifest(cap: Path) -> dict:
    return yaml.safe_load((cap / "manifest.yaml").read_text())


# --------------------------------------------------------------------------- manifest.yaml
@pytest.mark.parametrize("command", COMMANDS)
def test_manifest_invalid_utf8_names_the_line(cap, tmp_path, capsys, command):
    text = (cap / "manifest.yaml").read_bytes()
    lines = text.split(b"\n")
    lines[3] = lines[3] + b" \xff\xfe"
    _set_manifest(cap, b"\n".join(lines))
    line = _assert_bad_input(command, cap, tmp_path, capsys, "manifest.yaml:4: not UTF-8 text")


MUTATIONS = {  # name -> (change to the manifest, what the one line must say)
    "arms is a number": (lambda m: m.update(arms=5), "arms must be a list"),
    "arm without a name": (lambda m: m["arms"][1].pop("name"), "arms[1] has no name"),
    "arm name is a list": (lambda m: m["arms"][0].update(name=["a1"]), "arms[0].name must be non-empty text"),
    "arm entry is text": (lambda m: m["arms"].append("a3"), "arms[2] must be a mapping"),
    "env is a list": (lambda m: m["arms"][0].update(env=["X=1"]), "arms[0].env must be a mapping"),
    "env value is a mapping": (lambda m: m["arms"][0]["env"].update(CUBLAS_WORKSPACE_CONFIG={"a": 1}),
                               "arms[0].env.CUBLAS_WORKSPACE_CONFIG must be a plain value"),
    "toggle is text": (lambda m: m["arms"][1].update(toggle="X=1"), "arms[1].toggle must be a mapping"),
    "role unknown": (lambda m: m["arms"][1].update(role="sideways"), "arms[1].role must be arm or pass"),
    "duplicate arm": (lambda m: m["arms"][1].update(name="a1"), "arms[1].name 'a1' appears twice"),
    "schema is text": (lambda m: m.update(schema="1"), "manifest schema '1' is not supported"),
    "schema is a list": (lambda m: m.update(schema=[1]), "manifest schema [1] is not supported"),
    "files is text": (lambda m: m.update(files="a1/cupti.jsonl"), "files must be a list"),
    "file without path": (lambda m: m.update(files=[{"arm": "a1"}]), "files[0] has no path"),
    "file rank is text": (lambda m: m.update(files=[{"path": "a1/rank0/cupti.jsonl", "rank": "zero"}]),
                          "files[0].rank must be a rank"),
    "command is a mapping": (lambda m: m.update(command={"a": 1}), "command must be text or a list"),
    "world_size is text": (lambda m: m.update(world_size="two"), "world_size must be an integer"),
    "versions is a list": (lambda m: m["arms"][0].update(versions=[1]), "arms[0].versions must be a mapping"),
    "the manifest is a list": (lambda m: m.clear() or m.update(_list=True), "manifest must be a mapping"),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_manifest_wrong_types_and_missing_keys_are_one_line(cap, tmp_path, capsys, name):
    change, needle = MUTATIONS[name]
    m = _manifest(cap)
    change(m)
    _set_manifest(cap, yaml.safe_dump([1, 2] if m.get("_list") else m, sort_keys=False))
    for command in COMMANDS:
        line = _assert_bad_input(command, cap, tmp_path, capsys, needle)
        assert "manifest.yaml" in line


def test_wrong_type_line_number_points_at_the_key(cap, tmp_path, capsys):
    m = _manifest(cap)
    m["arms"][1]["env"] = ["X=1"]
    text = yaml.safe_dump(m, sort_keys=False)
    _set_manifest(cap, text)
    want = next(i for i, line in enumerate(text.splitlines(), 1) if line.strip() == "- X=1")
    line = _assert_bad_input("analyze", cap, tmp_path, capsys, "arms[1].env must be a mapping")
    assert f"manifest.yaml:{want}:" in line


@pytest.mark.parametrize("date", ["2024-13-45", "2024-02-30T25:61:00Z", "0000-00-00"])
def test_impossible_dates_are_kept_as_text(cap, tmp_path, capsys, date):
    text = (cap / "manifest.yaml").read_text()
    _set_manifest(cap, f"created: {date}\n" + "\n".join(x for x in text.splitlines() if not x.startswith("created")))
    code, out, err = _run(_argv("analyze", cap, tmp_path), capsys)
    assert code in (0, 1) and err == "", err
    code, out, err = _run(_argv("bundle", cap, tmp_path), capsys)
    assert code == 0, err
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("manifest.yaml"))
        assert str(yaml.safe_load(tar.extractfile(member).read())["created"]) == date


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_in_place_of_the_manifest(cap, tmp_path, capsys, command):
    (cap / "manifest.yaml").unlink()
    (cap / "manifest.yaml").mkdir()
    _assert_bad_input(command, cap, tmp_path, capsys, "manifest.yaml: is a directory, not a manifest")


def test_a_fifo_in_place_of_the_manifest_does_not_hang(cap, tmp_path, capsys):
    (cap / "manifest.yaml").unlink()
    os.mkfifo(cap / "manifest.yaml")
    _assert_bad_input("analyze", cap, tmp_path, capsys, "is a FIFO (named pipe)")


def test_a_600_byte_alias_bomb_is_refused_at_once(cap, tmp_path, capsys):
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghij"):
        prev = "abcdefghij"[i]
        lines.append(f"{name}: &{name} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]")
    bomb = "\n".join(lines) + "\n"
    assert len(bomb.encode()) <= 700  # 9**10 (3.5e9) strings once expanded
    m = _manifest(cap)
    _set_manifest(cap, yaml.safe_dump(m, sort_keys=False) + "bomb:\n" + "".join("  " + x + "\n" for x in lines))
    for command in COMMANDS:
        t0 = time.monotonic()
        _assert_bad_input(command, cap, tmp_path, capsys, "alias bomb")
        assert time.monotonic() - t0 < 10


def test_yaml_nested_1000_deep_is_refused(cap, tmp_path, capsys):
    _set_manifest(cap, "schema: 1\ndeep: " + "[" * 1000 + "]" * 1000 + "\n")
    _assert_bad_input("analyze", cap, tmp_path, capsys, "manifest.yaml")


def test_a_written_manifest_never_holds_aliases(tmp_path):
    from forensics.capture.directory import dump_manifest

    shared = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    assert "&" not in dump_manifest({"arms": [{"name": "a1", "env": shared}, {"name": "a2", "env": shared}]})


# --------------------------------------------------------------------------- JSON values
def _edit_first_site(cap: Path, arm: str, change) -> int:
    """Change the first site record; returns its line number."""
    path = cap / arm / "rank0" / "sites.jsonl"
    lines = path.read_text().splitlines()
    i = next(i for i, x in enumerate(lines) if '"event": "site"' in x)
    before = lines[i]
    lines[i] = change(lines[i])
    assert lines[i] != before
    path.write_text("\n".join(lines) + "\n")
    return i + 1


JSON_CASES = {
    "Infinity": (lambda line: line.replace('"occurrence": 1', '"occurrence": Infinity'), "Infinity is not a JSON value"),
    "NaN": (lambda line: line.replace('"external_id": 1', '"external_id": NaN'), "NaN is not a JSON value"),
    "unhashable id": (lambda line: line.replace('"external_id": 1', '"external_id": [1]'),
                      "external_id must be an integer, not a list"),
    "float id": (lambda line: line.replace('"external_id": 1', '"external_id": 1.5'),
                 "external_id must be an integer, not the number 1.5"),
    "nested 1000 deep": (lambda line: line.replace('"external_id": 1', '"external_id": ' + "[" * 1000 + "]" * 1000),
                         "nested too deeply"),
    "numel 1.5": (lambda line: line.replace('"numel": ', '"numel": 1.5, "x": ', 1), "numel must be an integer"),
    "shape of text": (lambda line: line.replace('"shape": [', '"shape": ["a", ', 1), "shape must be a list"),
    "trailing data": (lambda line: line + " {}", "trailing data after the JSON object"),
}


@pytest.mark.parametrize("name", sorted(JSON_CASES))
def test_wrong_typed_json_values_are_one_line(cap, tmp_path, capsys, name):
    change, needle = JSON_CASES[name]
    number = _edit_first_site(cap, "a2", change)
    for command in COMMANDS:
        line = _assert_bad_input(command, cap, tmp_path, capsys, needle)
        assert f"a2/rank0/sites.jsonl:{number}:" in line


@pytest.mark.parametrize("value", ["Infinity", "[1]", '{"a": 1}', "1.5", '"x"'])
def test_wrong_typed_cupti_values_are_one_line(cap, tmp_path, capsys, value):
    path = cap / "a1" / "rank0" / "cupti.jsonl"
    text = path.read_text().replace('"correlation_id": 901,', f'"correlation_id": {value},', 1)
    path.write_text(text)
    _assert_bad_input("analyze", cap, tmp_path, capsys, "a1/rank0/cupti.jsonl:1:")


@pytest.mark.parametrize("value", ["[1]", '{"v": 1}', "NaN"])
def test_wrong_typed_environment_json_is_one_line(cap, tmp_path, capsys, value):
    path = cap / "a2" / "rank0" / "environment.json"
    data = json.loads(path.read_text())
    text = json.dumps(data).replace(f'"driver": "{data["driver"]}"', f'"driver": {value}')
    path.write_text(text)
    for command in ("compare", "bundle"):
        _assert_bad_input(command, cap, tmp_path, capsys, "environment.json")


# --------------------------------------------------------------------------- hostile trees
@pytest.mark.parametrize("command", COMMANDS)
def test_a_fifo_among_capture_files_does_not_hang(cap, tmp_path, capsys, command):
    path = cap / "a2" / "rank0" / "cupti.jsonl"
    path.unlink()
    os.mkfifo(path)
    _assert_bad_input(command, cap, tmp_path, capsys, "a2/rank0/cupti.jsonl: is a FIFO (named pipe)")


@pytest.mark.parametrize("command", COMMANDS)
def test_a_symlink_self_loop_is_one_line(cap, tmp_path, capsys, command):
    path = cap / "a2" / "rank0" / "cupti.jsonl"
    path.unlink()
    path.symlink_to("cupti.jsonl")
    _assert_bad_input(command, cap, tmp_path, capsys, "symbolic link loop")


def test_a_listed_file_that_is_a_link_loop_is_one_line(cap, tmp_path, capsys):
    (cap / "loop.sqlite").symlink_to("loop.sqlite")
    m = _manifest(cap)
    m["files"] = [{"path": "loop.sqlite", "instrument": "nsys", "arm": "a1", "rank": 0}]
    _set_manifest(cap, yaml.safe_dump(m, sort_keys=False))
    _assert_bad_input("analyze", cap, tmp_path, capsys, "loop.sqlite: symbolic link loop")


def test_a_backslash_in_an_arm_folder_name_makes_a_whole_safe_bundle(tmp_path, capsys):
    gemms = [Gemm("gemm:NT:acc0:grad1", 256, 256, 512, diverge_in=("a\\2",))]  # SYNTHETIC
    cap = build_capture(tmp_path / "cap", gemms, [Arm("a1"), Arm("a\\2")])
    code, out, err = _run(["bundle", str(cap), "-o", str(tmp_path / "b.tar.gz")], capsys)
    assert code == 0, err
    with tarfile.open(tmp_path / "b.tar.gz") as tar:
        names = tar.getnames()
    assert all("\\" not in n and not n.startswith("/") and ".." not in n.split("/") for n in names)
    assert any("/raw/a_2/rank0/" in n for n in names)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary leftovers


# --------------------------------------------------------------------------- kernel --config (issue 15 item 12)
CONFIG_CASES = {
    "arms: two": "arms must be a whole number",
    "arms: 1.5": "arms must be a whole number",
    "timeout_s: [1]": "timeout_s must be a number of seconds",
    "timeout_s: .inf": "timeout_s must be a number of seconds",
    "max_records: {a: 1}": "max_records must be a whole number",
    "instruments: {cupti: 1}": "instruments must be a list of names",
    "toggles: [5]": "toggles must be a list of NAME=VALUE",
    "env_arms: {a3: [1]}": "env_arms.a3 must map NAME: VALUE",
    "site: [gemm]": "site must be text",
    "command: {python: x}": "command must be a command line",
}


@pytest.mark.parametrize("line", sorted(CONFIG_CASES))
def test_kernel_config_wrong_types_are_one_line(tmp_path, capsys, line):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("site: gemm:NT:acc0:grad1\nsteps: 1-2\n" + line + "\n")
    code, out, err = _run(["kernel", "--config", str(cfg), "--dry-run", "--", "python", "train.py"], capsys)
    text = assert_bad_input(code, err, file=cfg, needle=CONFIG_CASES[line], out=out)
    assert text.startswith(f"forensics: bad input: {cfg}: ")


def test_kernel_config_not_utf8_is_one_line(tmp_path, capsys):
    cfg = tmp_path / "run.yaml"
    cfg.write_bytes(b"site: gemm:NT:acc0:grad1\nsteps: \xff\n")
    code, out, err = _run(["kernel", "--config", str(cfg), "--dry-run", "--", "python", "train.py"], capsys)
    assert assert_bad_input(code, err, file=cfg, line=2, out=out) == (f"forensics: bad input: {cfg}:2: not UTF-8 text "
                                                                     "(byte 0xff at offset 32)")


@pytest.mark.parametrize("body,want", [
    (b"site: gemm:NT:acc0:grad1\ncommand: python tr\x00ain.py\n",
     ":2: not valid YAML: character U+0000 is not allowed in YAML"),  # was two stderr lines
    (b'site: gemm:NT:acc0:grad1\ncommand: python "train.py --steps 2\n',
     ": command: No closing quotation"),  # was exit 70 (shlex's ValueError)
])
def test_kernel_config_nul_byte_or_unbalanced_quote_is_one_line(tmp_path, capsys, body, want):
    cfg = tmp_path / "run.yaml"
    cfg.write_bytes(body)
    code, out, err = _run(["kernel", "--config", str(cfg), "--dry-run", "--", "python", "train.py"], capsys)
    assert assert_bad_input(code, err, file=cfg, out=out).startswith(f"forensics: bad input: {cfg}{want}")


@pytest.mark.parametrize("kind", ["fifo", "missing", "not json", "a list"])
def test_bad_section_files_are_one_line(cap, tmp_path, capsys, kind):
    section = tmp_path / "knob.section.json"
    if kind == "fifo":
        os.mkfifo(section)
    elif kind == "not json":
        section.write_text('{"title": "x", "markdown": ')
    elif kind == "a list":
        section.write_text("[1, 2]")
    code, out, err = _run(["bundle", str(cap), "-o", str(tmp_path / "b.tar.gz"), "--section", str(section)], capsys)
    assert str(section) in assert_bad_input(code, err, file=section, out=out)
    assert not (tmp_path / "b.tar.gz").exists()
