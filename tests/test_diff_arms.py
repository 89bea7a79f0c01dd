"""forensics.tracediff.arms: what differs between two diffed runs, as arms of the kernel rerun.

The reports here are SYNTHETIC dicts in the shape `forensics diff --json` writes (its
`comparability` entries, docs/commands/diff.md); the real flow is tests/test_diff_arms_real.py.
"""
from __future__ import annotations

from forensics.tracediff.arms import differences_of


def _entry(field, a, b, severity="info"):
    return {"field": field, "a": a, "b": b, "severity": severity}


def test_knob_and_command_line_become_arms_and_what_cannot_is_said():
    rep = {"comparability": [_entry("env.OMP_NUM_THREADS", "1", "2"), _entry("env.HF_TOKEN", "<redacted>", "x<redacted>"),
                             _entry("env.MKL_CBWR", "AUTO", None), _entry("env.FORENSICS_CONFIG", "a", "b"),
                             _entry("argv", ["python", "t.py", "--threads", "1"], ["python", "t.py", "--threads", "2"],
                                    "warning")]}
    d = differences_of(rep)
    assert d.kernel_options() == ["--env", "OMP_NUM_THREADS=1", "--toggle", "OMP_NUM_THREADS=2",
                                  "--arm-command", "python t.py --threads 2"]
    notes = d.notes()
    assert any(n.startswith("HF_TOKEN differs, but a run recorded it redacted") for n in notes)
    assert any(n.startswith("MKL_CBWR is set in run A ('AUTO') and not in run B") for n in notes)
    assert any("no arm runs all of run B's setting at once" in n for n in notes)
    assert all("FORENSICS_CONFIG" not in n for n in notes)


def test_a_structured_knob_list_is_read_first():
    rep = {"config_differences": [{"kind": "knob", "name": "ONEDNN_MAX_CPU_ISA", "a": None, "b": "SSE41"},
                                  {"kind": "switch", "name": "torch.backends.mkldnn.enabled", "a": True, "b": False}],
           "comparability": [_entry("env.OMP_NUM_THREADS", "1", "2")]}
    d = differences_of(rep)
    assert d.kernel_options() == ["--toggle", "ONEDNN_MAX_CPU_ISA=SSE41"]  # A unset: no --env
    assert any("in-process setting torch.backends.mkldnn.enabled differs" in n for n in d.notes())


def test_nothing_differs_nothing_added():
    assert differences_of({"comparability": []}, ["python", "t.py"]).kernel_options() == []
