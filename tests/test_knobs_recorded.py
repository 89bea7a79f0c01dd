"""Every knob the catalog knows is recorded (issue 27 item 2), and the comparability rules on run
info (issue 27 item 1). The run-info dicts below are SYNTHETIC, in the shape the tracer's header
writes (docs/trace-format.md); the real runs are in tests/test_diff_identity_real.py."""
from __future__ import annotations

from forensics.core.environment import RELEVANT_PREFIXES, relevant_env
from forensics.knobs.catalog import load_catalog
from forensics.tracediff.comparability import compare_runs, config_differences


def test_every_catalog_knob_is_recorded_by_name_or_prefix():
    names = sorted(load_catalog())
    assert len(names) > 40
    missing = [n for n in names if not n.startswith(RELEVANT_PREFIXES)]
    assert missing == []
    env = {n: "1" for n in names} | {"HOME": "/root", "EDITOR": "vi"}
    kept = relevant_env(env)
    assert set(kept) == set(names)


def test_the_prefixes_the_issue_names_are_recorded_and_secrets_redacted():
    env = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "DNNL_VERBOSE": "1",
           "MKLDNN_VERBOSE": "1", "KMP_AFFINITY": "compact", "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
           "CUDNN_LOGINFO_DBG": "1", "TORCH_HUB_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz012345"}
    kept = relevant_env(env)
    assert set(kept) == set(env)
    assert "hf_abcdefghijklmnopqrstuvwxyz012345" not in str(kept)


def _info(**program):
    return {"program": {"sha256": "aa", "modules": {"m.py": "11"}, "git": {"commit": "c1"}} | program,
            "env": {}, "switches": {"torch.backends.mkldnn.enabled": True}}


def test_the_commit_is_information_when_the_imported_files_are_recorded():
    a = _info(git={"commit": "c1", "dirty": False, "diff_sha256": None})
    b = _info(git={"commit": "c2", "dirty": True, "diff_sha256": "ff"})
    diffs = compare_runs(a, b)
    assert {d.field for d in diffs} == {"program.git.commit", "program.git.dirty", "program.git.diff_sha256"}
    assert {d.severity for d in diffs} == {"info"}
    # a trace that did not record the imported files (older): the git state still decides
    for x in (a, b):
        x["program"].pop("modules")
    assert {d.severity for d in compare_runs(a, b)} == {"not_comparable"}


def test_a_differing_file_package_or_interpreter_is_named():
    a = _info(modules={"m.py": "11", "pkg/util.py": "22"}, packages={"numpy": "2.4.6"},
              interpreter={"executable": "/v1/bin/python", "version": "3.11.7 (main)"})
    b = _info(modules={"m.py": "11", "pkg/util.py": "33"}, packages={"numpy": "2.3.0"},
              interpreter={"executable": "/v2/bin/python", "version": "3.11.9 (main)"})
    got = {d.field: (d.severity, d.what) for d in compare_runs(a, b)}
    assert got == {"program.modules.pkg/util.py": ("not_comparable", "file pkg/util.py"),
                   "program.packages.numpy": ("not_comparable", "package numpy"),
                   "program.interpreter.version": ("warning", "the interpreter"),
                   "program.interpreter.executable": ("warning", "the interpreter")}


def test_config_differences_name_catalogued_knobs_then_switches_then_other_knobs():
    a = _info() | {"env": {"ONEDNN_MAX_CPU_ISA": "SSE41", "TORCH_SOMETHING_NEW": "1"}}
    b = _info() | {"env": {}, "switches": {"torch.backends.mkldnn.enabled": False}}
    diffs = [d.to_json() for d in compare_runs(a, b)]
    got = [(c["kind"], c["name"], c["a"], c["b"], c["catalogued"]) for c in config_differences(diffs)]
    assert got == [("knob", "ONEDNN_MAX_CPU_ISA", "SSE41", None, True),
                   ("switch", "torch.backends.mkldnn.enabled", True, False, False),
                   ("knob", "TORCH_SOMETHING_NEW", "1", None, False)]


def test_switches_recorded_by_one_run_only_are_not_compared():
    a, b = _info(), _info()
    b.pop("switches")
    assert compare_runs(a, b) == []


def test_a_package_that_issued_ops_and_was_imported_is_named_once():
    a = _info(packages={"fakeops": "1.2.3"}) | {"packages": {"fakeops": "1.2.3"}}
    b = _info(packages={"fakeops": "1.2.4"}) | {"packages": {"fakeops": "1.2.4"}}
    assert [(d.field, d.severity) for d in compare_runs(a, b)] == [("program.packages.fakeops", "not_comparable")]
    a["program"].pop("packages")  # an older trace: the issuers' packages decide
    assert [(d.field, d.severity) for d in compare_runs(a, b)] == [("packages.fakeops", "not_comparable"),
                                                                   ("program.packages.fakeops", "info")]
