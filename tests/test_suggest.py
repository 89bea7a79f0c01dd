"""Typos are errors, not findings: an unknown op site or knob exits 2 with a did-you-mean before
anything runs (the command after '--' is a real program that would leave a file had it run)."""
from __future__ import annotations

import sys

import pytest

from forensics.commands import suggest
from forensics.cli import main
from forensics.core.errors import BadSite

pytest.importorskip("torch")

PROBE = [sys.executable, "-c", "open('ran', 'w').write('yes')"]


@pytest.mark.parametrize("site, words", [
    ("aten.convolution.defualt", "has no overload 'defualt' (it has default, out); did you mean aten.convolution.default"),
    ("aten.convolutoin.default#2", "torch has no op aten.convolutoin; did you mean aten.convolution.default"),
    ("aten.mm.defualt", "did you mean aten.mm.default"),
])
def test_kernel_with_a_misspelt_op_site_exits_2_before_running(tmp_path, monkeypatch, capsys, site, words):
    monkeypatch.chdir(tmp_path)
    assert main(["kernel", "--site", site, "--", *PROBE]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == [], "something ran or was written"


def test_knob_with_a_misspelt_catalogued_name_exits_2(tmp_path, capsys):
    assert main(["knob", "CUBLAS_WORKSPACE_CONFG", "--path", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "did you mean CUBLAS_WORKSPACE_CONFIG?" in err and "--uncatalogued" in err


def test_knob_uncatalogued_scans_the_exact_name(tmp_path, capsys):
    (tmp_path / "m.py").write_text("import os\nos.environ.get('CUBLAS_WORKSPACE_CONFG')\n")
    assert main(["knob", "CUBLAS_WORKSPACE_CONFG", "--uncatalogued", "--path", str(tmp_path), "--no-cache"]) == 0
    assert "m.py" in capsys.readouterr().out


def test_knob_with_a_misspelt_site_exits_2(tmp_path, capsys):
    assert main(["knob", "OMP_NUM_THREADS", "--site", "aten.addmm.defalt", "--path", str(tmp_path)]) == 2
    assert "did you mean aten.addmm.default" in capsys.readouterr().err


def test_real_sites_pass_and_without_torch_only_the_grammar_is_checked(monkeypatch):
    for ok in ("aten.mm.default", "aten.add.Tensor", "aten.mm", "gemm:NT:acc0:grad1#3", "index_add:acc1:grad0",
               "torchvision.nms.default"):  # torchvision not loaded here: its ops cannot be checked
        suggest.check_site_text(ok)
    with pytest.raises(BadSite):
        suggest.check_site_text("aten.mm.defualt")
    monkeypatch.setattr(suggest, "registered_ops", lambda: None)
    suggest.check_site_text("aten.mm.defualt")  # no torch: nothing to look the op up in


def test_analyze_and_compare_refuse_a_site_the_capture_never_recorded(tmp_path, capsys):
    cap = "tests/fixtures/cpu/conv1d-threads"
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for cmd in (["analyze", str(root / cap), "--out", str(tmp_path / "an"), "-q"], ["compare", str(root / cap)]):
        assert main([*cmd, "--site", "aten.convolution.defualt"]) == 2
        assert "did you mean aten.convolution.default" in capsys.readouterr().err
    assert not (tmp_path / "an").exists()
    assert main(["analyze", str(root / cap), "--out", str(tmp_path / "ok"), "-q", "--site",
                 "aten.convolution.default#2"]) == 0
