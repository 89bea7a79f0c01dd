"""The scanner on real shipped code: the installed torch wheel, checked against grep and strings.

For each knob the set of Python files and shared libraries that contain the literal must equal
what ``grep -rlw`` finds in the same tree; every library is confirmed with ``strings``; reads,
writers and mentions are classified (and checked against the source line they point at).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from forensics.knobs import scan
from forensics.knobs.catalog import lookup
from forensics.knobs.elf_scan import CONTAINS
from forensics.knobs.scope import CANNOT_TELL_STATICALLY, NOT_ON_PATH, ON_PATH, UNKNOWN, assess
from forensics.core.site import parse_site

KNOBS = ("TORCH_BLAS_PREFER_CUBLASLT", "CUBLAS_WORKSPACE_CONFIG")
_spec = importlib.util.find_spec("torch")
TORCH_DIR = Path(_spec.origin).parent if _spec and _spec.origin else None
pytestmark = [pytest.mark.slow, 
    pytest.mark.skipif(TORCH_DIR is None, reason="torch is not installed"),
    pytest.mark.skipif(shutil.which("grep") is None, reason="grep not available"),
]


def _grep(name: str) -> set[str]:
    """Every file under the torch tree that holds ``name`` as a whole word (grep -rlw)."""
    r = subprocess.run(["grep", "-rlw", "--", name, str(TORCH_DIR)], capture_output=True, text=True)
    assert r.returncode in (0, 1), r.stderr
    return {os.path.realpath(p) for p in r.stdout.split()}


def _is_shared_library(path: str) -> bool:
    base = os.path.basename(path)
    return base.endswith(".so") or ".so." in base


@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("FORENSICS_CACHE_DIR", str(tmp_path_factory.mktemp("knobcache")))
    try:
        yield {name: scan(name, [str(TORCH_DIR)]) for name in KNOBS}
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def grepped():
    return {name: _grep(name) for name in KNOBS}


@pytest.mark.parametrize("name", KNOBS)
def test_python_files_match_grep(scans, grepped, name):
    found = {os.path.realpath(r.file) for r in scans[name].python}
    assert found == {p for p in grepped[name] if p.endswith((".py", ".pyi"))}


@pytest.mark.parametrize("name", KNOBS)
def test_libraries_match_grep(scans, grepped, name):
    found = {os.path.realpath(lib.file) for lib in scans[name].libraries if lib.verdict == CONTAINS}
    grep_libs = {p for p in grepped[name] if _is_shared_library(p)}
    assert found == grep_libs



@pytest.mark.parametrize("name", KNOBS)
@pytest.mark.skipif(not (shutil.which("strings") and shutil.which("objcopy")), reason="binutils (strings, objcopy) not installed")
def test_reported_sections_hold_the_name_per_objcopy_and_strings(scans, name, tmp_path):
    """Each reported section, cut out by objcopy and read by strings, holds the name (independent tools).

    (strings over the whole 434 MB libtorch_cpu.so takes ~20 s on 2 cores; one section takes ~2 s.)
    """
    word = re.compile(rf"(?<![A-Za-z0-9_]){name}(?![A-Za-z0-9_])")
    for lib in (x for x in scans[name].libraries if x.verdict == CONTAINS):
        for section in lib.sections:
            out = tmp_path / f"{Path(lib.file).name}{section}.bin"
            subprocess.run(["objcopy", "-O", "binary", f"--only-section={section}", lib.file, str(out)], check=True, capture_output=True)
            text = subprocess.run(["strings", "-a", str(out)], capture_output=True, text=True).stdout
            assert word.search(text), (lib.file, section)


@pytest.mark.parametrize("name", KNOBS)
def test_every_finding_points_at_a_line_that_holds_the_name(scans, name):
    for r in scans[name].python:
        lines = Path(r.file).read_text(errors="replace").splitlines()
        for f in r.findings:
            text = lines[f.line - 1]
            if f.note and f.note.startswith("via constant"):
                ident = f.note.split()[2]
                assert ident in text, (f.where(), text)
            else:
                assert name in text, (f.where(), text)
            if f.kind == "read":
                assert re.search(r"environ|getenv", text) or f.form == "helper call", (f.where(), text)
            if f.form == "comment":
                assert "#" in text


def test_torch_blas_prefer_cublaslt_is_only_documented_in_python_and_a_string_in_libtorch(scans):
    s = scans["TORCH_BLAS_PREFER_CUBLASLT"]
    assert s.findings("read") == [] and s.findings("write") == []
    assert {f.form for f in s.findings("mention")} <= {"docstring", "comment", "string", "string (f-string)", "name constant"}
    libs = {Path(lib.file).name: lib for lib in s.libraries if lib.verdict == CONTAINS}
    for lib in libs.values():
        assert ".rodata" in lib.sections
        assert "getenv" in lib.env_imports or "secure_getenv" in lib.env_imports
    if "libtorch_cpu.so" in libs:  # ATen's global context: the neighbouring preference knobs
        near = {s for h in libs["libtorch_cpu.so"].hits for s in h.before + h.after}
        assert any(n.startswith(("TORCH_BLAS_PREFER_", "TORCH_LINALG_PREFER_")) for n in near)


def test_cublas_workspace_config_writers_and_reads_in_python(scans):
    s = scans["CUBLAS_WORKSPACE_CONFIG"]
    writers = s.findings("write")
    module_level = [f for f in writers if f.scope == "<module>"]
    numeric_utils = TORCH_DIR / "_inductor" / "fx_passes" / "numeric_utils.py"
    if numeric_utils.is_file() and 'os.environ["CUBLAS_WORKSPACE_CONFIG"]' in numeric_utils.read_text():
        assert any(Path(f.file) == numeric_utils.resolve() for f in module_level)
    for f in s.findings("read"):  # e.g. torch.testing's CuBLASConfigGuard, through a class constant
        assert f.form in ("os.environ.get", "os.getenv", "os.environ[...]", "in os.environ", "helper call")


def test_scope_verdicts_on_the_cpu_wheel(scans):
    blas = scans["TORCH_BLAS_PREFER_CUBLASLT"]
    ws = scans["CUBLAS_WORKSPACE_CONFIG"]
    has_cuda_lib = any("libtorch_cuda" in p for p in blas.all_libraries)
    mm = assess(blas, parse_site("aten.mm.default"), lookup("TORCH_BLAS_PREFER_CUBLASLT"))
    if blas.libraries:
        assert mm.verdict == ON_PATH  # the literal sits in ATen's context, documented for ATen GEMMs
    index_add = assess(blas, parse_site("index_add:acc1:grad0"), lookup("TORCH_BLAS_PREFER_CUBLASLT"))
    assert index_add.verdict in (UNKNOWN, NOT_ON_PATH) and index_add.verdict != ON_PATH
    wgrad = assess(ws, parse_site("gemm:NT:acc0:grad1"), lookup("CUBLAS_WORKSPACE_CONFIG"))
    if not has_cuda_lib:  # CPU build: the CUDA half of the path is not here, so no verdict either way
        assert wgrad.verdict in (UNKNOWN, CANNOT_TELL_STATICALLY) and wgrad.verdict not in (ON_PATH, NOT_ON_PATH)
        assert not wgrad.complete and "libtorch_cuda" in wgrad.reason
        assert {u.component for u in wgrad.unscanned} >= {"ATen CUDA (libtorch_cuda)", "cuBLAS", "cuBLASLt"}
        assert all("--path" in u.how for u in wgrad.unscanned)


@pytest.mark.parametrize("name", KNOBS)
def test_no_line_inside_a_string_is_reported_as_other(scans, name):
    """A line inside a docstring or any string literal is a documentation mention, never "other"."""
    import ast

    for r in scans[name].python:
        others = [f for f in r.findings if f.form.startswith("other")]
        if not others or r.parse_error:
            continue
        tree = ast.parse(Path(r.file).read_bytes())
        spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
                 if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        for f in others:
            assert not any(lo <= f.line <= hi for lo, hi in spans), (f.where(), f.feeds)
