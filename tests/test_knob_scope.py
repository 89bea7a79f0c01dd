"""Scope verdicts, site-kind mapping, catalog, late-assignment check and dynamic arms.

The "installed trees" here are SYNTHETIC: tiny Python modules laid out like transformer_engine,
and small shared libraries compiled with gcc and named like the real ones (libtransformer_engine.so,
libcublasLt.so.12). They exercise the decision rules, not any real library's content.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from forensics.knobs import scan
from forensics.knobs.catalog import load_catalog, lookup
from forensics.knobs.dynamic import env_arms, late_assignments, script_of
from forensics.knobs.scope import CANNOT_TELL_STATICALLY, NOT_ON_PATH, ON_PATH, PATHS, UNKNOWN, assess, code_path_for
from forensics.core.site import parse_site, parse_site_or_occurrence

GCC = shutil.which("gcc")
KNOB = "NVTE_ALLOW_NONDETERMINISTIC_ALGO"
ATTN = "transformer_engine/pytorch/attention/dot_product_attention/dot_product_attention.py"
GEMM_PY = "transformer_engine/pytorch/cpp_extensions/gemm.py"


def _lib(path: Path, source: str) -> None:
    src = path.with_suffix(".c")
    src.write_text(source)
    subprocess.run([GCC, "-shared", "-fPIC", "-O1", "-o", str(path), str(src)], check=True, capture_output=True)
    src.unlink()


@pytest.fixture()
def te_tree(tmp_path, monkeypatch):
    """SYNTHETIC site-packages: TE attention reads the knob; the TE GEMM path does not."""
    if GCC is None:
        pytest.skip("gcc not installed: cannot build the synthetic libraries")
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "site-packages"
    attn = root / ATTN
    attn.parent.mkdir(parents=True)
    attn.write_text(
        "import os\nimport torch\n\nclass DotProductAttention:\n    def __init__(self):\n"
        f"        self.deterministic = not bool(int(os.getenv('{KNOB}', '1'))) or torch.are_deterministic_algorithms_enabled()\n")
    gemm = root / GEMM_PY
    gemm.parent.mkdir(parents=True)
    gemm.write_text("def general_gemm(a, b, workspace):\n    return a @ b\n")
    libdir = root / "transformer_engine"
    _lib(libdir / "libtransformer_engine.so", "int nvte_gemm(int a) { return a; }\n")
    cublas = root / "nvidia" / "cublas" / "lib"
    cublas.mkdir(parents=True)
    _lib(cublas / "libcublasLt.so.12", "int cublasLtMatmul(int a) { return a + 1; }\n")
    return root


def test_attention_knob_is_not_on_the_te_gemm_path(te_tree):
    result = scan(KNOB, [str(te_tree)])
    v = assess(result, parse_site("gemm:NT:acc0:grad1"), lookup(KNOB))
    assert v.path.kind == "te_gemm"
    assert v.verdict == NOT_ON_PATH, v.reason
    assert [Path(e.where.split(":")[0]).name for e in v.off_path] == ["dot_product_attention.py"]
    assert v.missing == []
    assert any("documented NOT to reach" in n for n in v.notes)


def test_attention_knob_is_on_the_attention_path(te_tree):
    v = assess(scan(KNOB, [str(te_tree)]), parse_site("fused_attn:grad1"), lookup(KNOB))
    assert v.path.kind == "attention" and v.verdict == ON_PATH
    assert "default='1'" in v.on_path[0].what and "DotProductAttention.__init__" in v.on_path[0].what


def test_missing_component_gives_unknown(te_tree):
    for lib in (te_tree / "nvidia").rglob("libcublasLt*"):
        lib.unlink()
    v = assess(scan(KNOB, [str(te_tree)]), parse_site("gemm:NT:acc0:grad1"), lookup(KNOB))
    assert v.verdict == UNKNOWN and v.missing == ["cuBLASLt"]


def test_component_building_names_cannot_tell_statically(te_tree):
    # SYNTHETIC: TE core assembles "NVTE_" + suffix at run time and calls getenv
    _lib(te_tree / "transformer_engine" / "libtransformer_engine.so", r'''
#include <stdio.h>
#include <stdlib.h>
int nvte_flag(const char *suffix) { char n[96]; snprintf(n, sizeof n, "%s_%s", "NVTE", suffix); return getenv(n) != 0; }
int nvte_det(void) { return nvte_flag("ALLOW_NONDETERMINISTIC_ALGO"); }
''')
    v = assess(scan(KNOB, [str(te_tree)]), parse_site("gemm:NT:acc0:grad1"), lookup(KNOB))
    assert v.verdict == CANNOT_TELL_STATICALLY == v.scanned_verdict and v.complete
    assert "read the environment without holding the name" in v.reason and "libtransformer_engine.so" in v.reason
    [ev] = v.cannot_tell
    assert "name pieces" in ev.what and "NVTE" in ev.what and "ALLOW_NONDETERMINISTIC_ALGO" in ev.what and "%s_%s" in ev.what
    assert any("documented NOT to reach" in n for n in v.notes)  # the catalog is still shown beside it


def test_no_reader_anywhere_is_unknown_not_not_on_path(te_tree):
    v = assess(scan("SOME_UNREAD_KNOB", [str(te_tree)]), parse_site("gemm:NT:acc0:grad1"), None)
    assert v.verdict == UNKNOWN and "no reader" in v.reason


def test_module_level_writer_is_flagged(te_tree):
    (te_tree / "transformer_engine" / "pytorch" / "setup_env.py").write_text(f"import os\nos.environ['{KNOB}'] = '1'\n")
    v = assess(scan(KNOB, [str(te_tree)]), parse_site("fused_attn:grad1"), lookup(KNOB))
    assert any("sets the knob at import time" in n for n in v.notes)
    assert [Path(e.where.split(":")[0]).name for e in v.writers] == ["setup_env.py"]


@pytest.mark.parametrize("site, te, kind", [
    ("gemm:NT:acc0:grad1", True, "te_gemm"),
    ("gemm:NT:acc0:grad1", False, "torch_gemm"),
    ("gemm:TN:acc0:grad0#2", True, "te_gemm"),
    ("aten.mm.default", True, "torch_gemm"),
    ("aten.addmm.default", False, "torch_gemm"),
    ("aten.addmm_.default", False, "torch_gemm"),  # an in-place wgrad into main_grad (read torch_other before)
    ("aten._addmm_activation.default", False, "torch_gemm"),  # addmm with a cuBLASLt epilogue (torch_other before)
    ("aten._scaled_dot_product_flash_attention.default", False, "attention"),
    ("index_add:acc1:grad0", True, "torch_other"),
    ("fused_attn:grad1", True, "attention"),
    ("all_reduce:acc1", False, "collective"),
])
def test_site_kind_maps_to_code_path(site, te, kind):
    path, note = code_path_for(parse_site_or_occurrence(site), te)
    assert path.kind == kind
    assert (note is not None) == (site.startswith("gemm") and not te)


@pytest.mark.parametrize("site", ["aten.mm.default", "aten.addmm_.default", "aten.baddbmm_.default",
                                  "aten._addmm_activation.default", "aten.linear.default"])
def test_every_aten_gemm_is_the_cpu_gemm_path(site):
    """The GEMM family of forensics.core.ops: the in-place variants read cpu_other before it."""
    path, _ = code_path_for(parse_site_or_occurrence(site), False, device="cpu")
    assert path.kind == "cpu_gemm"


def test_catalog_entries_are_cited_and_well_formed():
    cat = load_catalog()
    required = {"CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_LOG_LEVEL", "CUBLASLT_LOG_MASK", "CUBLASLT_LOG_FILE",
                "CUBLASLT_WORKSPACE_SIZE", "TORCH_BLAS_PREFER_CUBLASLT", "NVTE_ALLOW_NONDETERMINISTIC_ALGO",
                "NVTE_NVTX_ENABLED", "NVTE_EXT_MARGIN_SM", "NVTE_USE_CUTLASS_GROUPED_GEMM", "NCCL_ALGO",
                "NCCL_PROTO", "CUBLAS_LOGINFO_DBG", "NVTE_FUSED_ATTN", "NVTE_FLASH_ATTN"}
    assert required <= set(cat)
    for e in cat.values():
        assert e.source.strip() and e.certainty in ("doc", "real", "inferred", "uncertain")
        assert set(e.scope) | set(e.not_scope) | set(e.uncertain_scope) <= set(PATHS) | {"logging"}
    # the names libcublasLt.so.13 / libcublas.so.13 of cuBLAS 13.10 read, and the CPU knobs
    assert {"CUBLAS_BATCH_INVARIANCE_FLAGS", "NVIDIA_TF32_OVERRIDE", "CUBLAS_EMULATION_STRATEGY",
            "CUBLAS_EMULATE_SINGLE_PRECISION", "CUBLASLT_HEURISTICS_CACHE_CAPACITY", "CUBLAS_AUTOTUNING_CACHE_CAPACITY",
            "CUBLASLT_NVTX_LEVEL", "CUBLAS_NVTX_LEVEL", "MKL_CBWR", "MKL_NUM_THREADS", "OMP_NUM_THREADS",
            "ONEDNN_VERBOSE", "DNNL_VERBOSE", "ONEDNN_MAX_CPU_ISA", "ONEDNN_DEFAULT_FPMATH_MODE"} <= set(cat)
    assert cat["MKL_CBWR"].scope == ("cpu_gemm",) and "cpu_conv" in cat["OMP_NUM_THREADS"].scope
    nvte = cat["NVTE_ALLOW_NONDETERMINISTIC_ALGO"]
    assert nvte.scope == ("attention",) and "te_gemm" in nvte.not_scope and nvte.read_before_start
    assert cat["CUBLAS_WORKSPACE_CONFIG"].read_at == "handle"


def test_catalog_cites_only_public_sources():
    """Sources a user can open: URLs, public repositories' files, issue and PR numbers, shipped
    binaries named by package and version -- never our internal reference files or machine paths."""
    # "shared/reference/": our reference folder; ROCm's public pages live under ".../en/latest/reference/"
    internal = re.compile(r"/work/|\.\./shared|formats §|peers\.md|style\.md|seeds/|instrument-formats|"
                          r"shared/reference/|campaign\.py")
    text = (Path(__file__).parents[1] / "forensics" / "data" / "knobs.yaml").read_text()
    assert not internal.search(text), internal.search(text)
    # a " #" inside a plain YAML scalar starts a comment and silently cuts the value (issue numbers!)
    cut = [line for line in text.splitlines() if re.match(r"^\s+[a-z_]+: [^>\"'\[].* #", line)]
    assert cut == []
    for e in load_catalog().values():
        assert re.search(r"https://|#\d+|\.(cpp|hpp|h|py|rst)\b|\.so|wheel", e.source), (e.name, e.source)
        if e.certainty == "uncertain":
            assert e.note or "Name only" in e.governs or "name only" in e.governs, e.name


def test_bad_catalog_is_bad_input(tmp_path):
    bad = tmp_path / "knobs.yaml"
    bad.write_text("schema: 1\nknobs:\n  - name: X\n    governs: y\n    scope: [gpu]\n    read_at: import\n    source: s\n    certainty: doc\n")
    with pytest.raises(BadInput) as e:
        load_catalog(str(bad))
    assert "unknown path kind" in str(e.value) and str(bad) in str(e.value)
    bad.write_text("[1, 2")
    with pytest.raises(BadInput):
        load_catalog(str(bad))


# SYNTHETIC training scripts for the "set too late" check.
LATE_SCRIPT = '''import os
import torch

def main():
    x = torch.randn(8, 8, device="cuda")
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    return x @ x

if __name__ == "__main__":
    main()
'''
AFTER_IMPORT_SCRIPT = '''import os
import transformer_engine.pytorch as te
os.environ.setdefault("NVTE_ALLOW_NONDETERMINISTIC_ALGO", "0")
'''
EARLY_SCRIPT = '''import os
os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
import torch
y = torch.ones(2).cuda()
'''


def test_knob_set_after_cuda_use_is_too_late(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LATE_SCRIPT)
    late = late_assignments(script, "CUBLAS_WORKSPACE_CONFIG", lookup("CUBLAS_WORKSPACE_CONFIG"))
    assert [(x.line, x.severity) for x in late] == [(6, "too late")]
    assert "line 5" in late[0].message and "launching environment" in late[0].message


def test_knob_set_after_import_is_flagged_and_early_set_is_not(tmp_path):
    after = tmp_path / "after.py"
    after.write_text(AFTER_IMPORT_SCRIPT)
    late = late_assignments(after, KNOB, lookup(KNOB))
    assert [x.line for x in late] == [3] and late[0].severity == "risky"
    early = tmp_path / "early.py"
    early.write_text(EARLY_SCRIPT)
    assert late_assignments(early, "CUBLAS_WORKSPACE_CONFIG", lookup("CUBLAS_WORKSPACE_CONFIG")) == []


def test_script_of_and_bad_script(tmp_path):
    s = tmp_path / "x.py"
    s.write_text("print(1\n")
    assert script_of(["torchrun", "--nproc-per-node", "2", str(s), "--lr", "1"]) == s
    assert script_of(["bash", "-c", "true"]) is None
    with pytest.raises(BadInput):
        late_assignments(s, "X", None)


def test_env_arms_have_a_baseline_and_valid_folder_names():
    arms = env_arms("CUBLAS_WORKSPACE_CONFIG", [":0:0", ":4096:8"])
    assert list(arms)[:2] == ["a1", "a2"] and arms["a1"] == {} == arms["a2"]
    toggled = {k: v for k, v in arms.items() if v}
    assert list(toggled.values()) == [{"CUBLAS_WORKSPACE_CONFIG": ":0:0"}, {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"}]
    assert all(re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", k) for k in arms)


def test_docs_catalog_entries_are_generated_from_the_yaml():
    from forensics.knobs.catalog import catalog_markdown

    doc = (Path(__file__).parents[1] / "docs" / "knob-catalog.md").read_text()
    assert catalog_markdown() in doc, "regenerate: python -m forensics.knobs.catalog"


def test_a_bit_change_with_nothing_captured_does_not_claim_kernel_and_algo_unchanged():
    from types import SimpleNamespace

    from forensics.knobs.dynamic import reach_line

    r = SimpleNamespace(toggle={"OMP_NUM_THREADS": "1"}, kernel_changed=None, algo_changed=None, comparable=True,
                        bits_changed=True, baseline_run_to_run="bit-identical at 1 occurrence(s)")
    assert reach_line(r).startswith("OMP_NUM_THREADS=1: REACHES (bits only) at the site (bits changed while the "
                                    "replica arms are bit-identical; kernel and algo not both captured)")
    r.kernel_changed = r.algo_changed = False
    assert "kernel and algo unchanged)" in reach_line(r)


def test_reach_is_graded_with_its_evidence():
    """SYNTHETIC toggle results (the fields `toggle_report` fills), one per grade."""
    from types import SimpleNamespace

    import pandas as pd

    from forensics.knobs.dynamic import reach_line

    occ = pd.DataFrame([{"label": "aten.convolution.default#1", "kernel_changed": False, "algo_changed": True,
                         "bits_changed": False, "implementation_baseline": "aten::mkldnn_convolution -> oneDNN x",
                         "implementation_arm": "aten::mkldnn_convolution -> oneDNN x", "kernel_baseline": "k",
                         "kernel_arm": "k", "algo_baseline": "primitive=reorder | primitive=convolution attributes=a",
                         "algo_arm": "primitive=reorder | primitive=convolution attributes=a attr-fpmath:bf16"}])
    r = SimpleNamespace(toggle={"ONEDNN_DEFAULT_FPMATH_MODE": "BF16"}, kernel_changed=False, algo_changed=True,
                        bits_changed=False, comparable=True, baseline="a1", arm="k1-BF16", occurrences=occ,
                        baseline_run_to_run="replica arms (a2) are bit-identical to a1")
    assert reach_line(r) == ("ONEDNN_DEFAULT_FPMATH_MODE=BF16: REACHES (algo or attributes changed, bits unchanged) at "
                             "the site; evidence: a1 `primitive=convolution attributes=a`, k1-BF16 `primitive=convolution "
                             "attributes=a attr-fpmath:bf16` at aten.convolution.default#1 (1 of 1 occurrence(s))")
    occ.loc[0, ["kernel_changed", "implementation_arm"]] = [True, "aten::_slow_conv2d_forward -> oneMKL SGEMM"]
    r.kernel_changed = True
    assert reach_line(r).endswith("REACHES (kernel/implementation changed) at the site; evidence: a1 ran "
                                  "aten::mkldnn_convolution -> oneDNN x, k1-BF16 ran aten::_slow_conv2d_forward -> oneMKL "
                                  "SGEMM at aten.convolution.default#1 (1 of 1 occurrence(s))")
    occ.loc[0, ["kernel_changed", "algo_changed", "bits_changed"]] = [False, False, False]
    r.kernel_changed = r.algo_changed = False
    assert "change NOT SEEN at the site (kernel, algo descriptor and bits unchanged); evidence: a1 and k1-BF16 both " \
           "ran aten::mkldnn_convolution -> oneDNN x" in reach_line(r)
