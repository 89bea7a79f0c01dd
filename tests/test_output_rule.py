"""The one output rule (forensics/runtime/output.py, docs/errors.md): refused unless --force, --force
replaces only an earlier forensics output and puts it back when the command fails, '-' is stdout."""
from __future__ import annotations

import json

import pytest

from forensics.runtime.atomic import OutputExists
from forensics.runtime.output import check_output, replacing, write_json


def test_existing_paths_are_refused_with_the_path_named(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("{}")
    with pytest.raises(OutputExists, match=r"r\.json exists \(a file\); not overwriting the --json report "
                                           r"\(--force replaces it, or choose another --json\)"):
        check_output(f, force=False, flag="--json", what="--json report")
    check_output(f, force=True, flag="--json", what="--json report")  # a file: --force may replace it
    empty = tmp_path / "empty"
    empty.mkdir()
    check_output(empty, force=False, flag="--out", what="capture", directory=True)  # an empty folder is free
    check_output("-", force=False, flag="--json", what="--json report")  # stdout
    check_output(None, force=False, flag="--json", what="--json report")


def test_force_never_replaces_a_folder_of_the_users_or_a_file_for_a_folder(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x")
    with pytest.raises(OutputExists, match="holds no earlier forensics output"):
        check_output(mine, force=True, flag="--out", what="capture", directory=True)
    note = tmp_path / "note.txt"
    note.write_text("x")
    with pytest.raises(OutputExists, match="is not a folder; --out takes a folder"):
        check_output(note, force=True, flag="--out", what="capture", directory=True)
    with pytest.raises(OutputExists, match="is a directory"):
        check_output(mine, force=True, flag="--json", what="--json report")


def test_replacing_puts_the_earlier_output_back_when_the_command_fails(tmp_path):
    out = tmp_path / "cap"
    out.mkdir()
    (out / "manifest.yaml").write_text("earlier\n")
    with pytest.raises(RuntimeError), replacing(out, force=True, flag="--out", what="capture"):
        assert not out.exists()  # set aside while the command runs
        raise RuntimeError("the run failed")
    assert (out / "manifest.yaml").read_text() == "earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]
    with replacing(out, force=True, flag="--out", what="capture"):
        out.mkdir()
        (out / "manifest.yaml").write_text("new\n")
    assert (out / "manifest.yaml").read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap"]  # the earlier one is gone


def test_write_json_dash_is_stdout_and_force_replaces(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert write_json("-", {"a": 1}, force=False) is None
    assert json.loads(capsys.readouterr().out) == {"a": 1} and not (tmp_path / "-").exists()
    f = tmp_path / "r.json"
    write_json(f, {"a": 1}, force=False)
    with pytest.raises(OutputExists):
        write_json(f, {"a": 2}, force=False)
    write_json(f, {"a": 2}, force=True)
    assert json.loads(f.read_text()) == {"a": 2}
