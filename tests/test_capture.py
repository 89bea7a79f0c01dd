import json

import pytest
import yaml

from forensics.capture.directory import classify, fresh_dir, load_capture, new_manifest, write_manifest
from forensics.core.errors import BadInput


def test_classify_names():
    assert classify("sites.jsonl") == "sites"
    assert classify("cupti.jsonl") == "cupti"
    assert classify("cublaslt.1234.log") == "cublaslt"
    assert classify("cublas_legacy.log") == "cublas"
    assert classify("window.ncu-rep") == "ncu"
    assert classify("window.sqlite") == "nsys"
    assert classify("kineto_trace.json.gz") == "kineto"
    assert classify("run.log") is None


def test_discovery_of_rank_layout_and_missing(tmp_path):
    root = tmp_path / "cap"
    (root / "a1" / "rank0").mkdir(parents=True)
    (root / "a1" / "rank1").mkdir(parents=True)
    (root / "a1" / "rank0" / "sites.jsonl").write_text("")
    (root / "a1" / "rank1" / "cupti.jsonl").write_text("")
    (root / "a1" / "cublaslt.4242.log").write_text("")
    write_manifest(root, new_manifest(arms=[{"name": "a1", "role": "arm"}]))
    cap = load_capture(root)
    got = sorted((f.instrument, f.rank, f.pid) for f in cap.files)
    assert got == [("cublaslt", 0, 4242), ("cupti", 1, None), ("sites", 0, None)]
    assert cap.arms == ["a1"]
    assert any("Nsight Compute" in m for m in cap.missing)
    assert not any("cuBLASLt" in m for m in cap.missing)


def test_empty_capture_reports_missing_without_failing(tmp_path):
    write_manifest(tmp_path, new_manifest(arms=[]))
    cap = load_capture(tmp_path)
    assert cap.files == [] and cap.missing == ["no instrument files found (empty capture)"]


def test_a_directory_without_manifest_is_not_a_capture(tmp_path):
    with pytest.raises(BadInput, match="an empty directory, not a capture"):
        load_capture(tmp_path)
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "trace.jsonl").write_text("{}\n")
    with pytest.raises(BadInput, match="a trace directory written by `forensics trace`.*forensics diff"):
        load_capture(tmp_path)


def test_a_file_no_instrument_reads_is_bad_input(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("x")
    with pytest.raises(BadInput, match="x.txt: not recognised: text with no instrument's line form"):
        load_capture(f)
    with pytest.raises(BadInput, match="no such capture"):
        load_capture(tmp_path / "nope")


def test_foreign_manifest_schema_and_bad_yaml(tmp_path):
    (tmp_path / "manifest.yaml").write_text("schema: 99\n")
    with pytest.raises(BadInput, match="schema 99"):
        load_capture(tmp_path)
    (tmp_path / "manifest.yaml").write_text("arms: [\n  - {name: a1\n")
    with pytest.raises(BadInput) as e:
        load_capture(tmp_path)
    assert "manifest.yaml:" in str(e.value) and "YAML" in str(e.value)


def test_manifest_is_never_overwritten(tmp_path):
    write_manifest(tmp_path, new_manifest(command=["a"]))
    with pytest.raises(FileExistsError):
        write_manifest(tmp_path, new_manifest(command=["b"]))
    assert yaml.safe_load((tmp_path / "manifest.yaml").read_text())["command"] == ["a"]


def test_fresh_dir_never_reuses(tmp_path):
    a = fresh_dir(tmp_path / "cap")
    (a / "x").write_text("1")
    b = fresh_dir(tmp_path / "cap")
    assert a != b and b.name == "cap-2" and (a / "x").read_text() == "1"


def test_campaign_summary_becomes_manifest(tmp_path):
    summary = {"environment": {"torch": "2.9"}, "arms": [["a1", 0, 1.0, []], ["ncu", 0, 2.0, []],
                                                         ["ws0", 0, 1.0, []]]}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "ncu").mkdir()
    (tmp_path / "ncu" / "window.ncu-rep").write_bytes(b"")
    cap = load_capture(tmp_path)
    assert cap.arms == ["a1", "ws0"]
    assert cap.arm_of("ncu") == "a1"
    assert cap.manifest["arms"][2]["toggle"] == {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}


def test_manifest_file_list_reports_absent_files(tmp_path):
    write_manifest(tmp_path, new_manifest(files=[{"path": "nowhere.sqlite", "instrument": "nsys"}]))
    cap = load_capture(tmp_path)
    assert cap.files == [] and "nowhere.sqlite: listed in the manifest but not found" in cap.missing
