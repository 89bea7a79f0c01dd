"""CPU knobs and their real readers in the installed torch CPU wheel (issue 14, knob part).

In the PyPI CPU wheel of torch 2.13, oneMKL and oneDNN are linked into ``lib/libtorch_cpu.so`` and
the OpenMP runtime ships as ``lib/libgomp.so.1``. The scan must find:

* MKL_CBWR, MKL_NUM_THREADS as strings in libtorch_cpu (oneMKL and ATen read them by name);
* OMP_NUM_THREADS as a string in libgomp (beside the other OMP_* names) and in libtorch_cpu (ATen's
  get_env_num_threads);
* ONEDNN_VERBOSE / DNNL_VERBOSE *not* as strings -- oneDNN builds "ONEDNN_" / "DNNL_" + "VERBOSE" at run
  time -- so "cannot tell statically" with those pieces as evidence, and the full name only inside
  messages ("Run workload with environment variable ONEDNN_VERBOSE=all ...").

Each expectation is also checked against the bytes of the library (an independent look).
"""
from __future__ import annotations

import importlib.util
import mmap
from pathlib import Path

import pytest

from forensics.knobs import scan
from forensics.knobs.catalog import lookup
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS
from forensics.knobs.scope import CANNOT_TELL_STATICALLY, ON_PATH, assess, choose_device
from forensics.core.site import parse_site

_spec = importlib.util.find_spec("torch")
TORCH_DIR = Path(_spec.origin).parent if _spec and _spec.origin else None
LIB = TORCH_DIR / "lib" if TORCH_DIR else None
KNOBS = ("MKL_CBWR", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "ONEDNN_VERBOSE", "DNNL_VERBOSE", "ONEDNN_MAX_CPU_ISA")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    LIB is None or not (LIB / "libtorch_cpu.so").is_file() or any(LIB.glob("libtorch_cuda*.so")),
    reason="needs the torch CPU wheel (lib/libtorch_cpu.so without libtorch_cuda)")]


def _holds_string(lib: Path, text: str) -> bool:
    """Independent check: ``text`` as a whole NUL-delimited string anywhere in the file."""
    with open(lib, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        return buf.find(b"\0" + text.encode() + b"\0") >= 0


@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("FORENSICS_CACHE_DIR", str(tmp_path_factory.mktemp("knobcache")))
    try:
        yield {name: scan(name, [str(LIB)]) for name in KNOBS}
    finally:
        mp.undo()


def _libs(result):
    return {Path(lib.file).name: lib for lib in result.libraries}


def test_onemkl_knobs_are_strings_in_libtorch_cpu(scans):
    for name in ("MKL_CBWR", "MKL_NUM_THREADS"):
        lib = _libs(scans[name])["libtorch_cpu.so"]
        assert lib.verdict == CONTAINS and ".rodata" in lib.sections, name
        assert _holds_string(LIB / "libtorch_cpu.so", name)
    cbwr = _libs(scans["MKL_CBWR"])["libtorch_cpu.so"].names[0]
    assert {"STRICT", "BRANCH="} & set(cbwr.after)  # oneMKL's own parser of the value sits beside it


def test_omp_num_threads_is_read_by_libgomp_and_aten(scans):
    libs = _libs(scans["OMP_NUM_THREADS"])
    gomp = libs["libgomp.so.1"]
    assert gomp.verdict == CONTAINS and "secure_getenv" in gomp.env_imports
    assert any(n.startswith("OMP_") for n in gomp.names[0].before + gomp.names[0].after)
    aten = libs["libtorch_cpu.so"]
    assert aten.verdict == CONTAINS and "MKL_NUM_THREADS" in aten.names[0].after


@pytest.mark.parametrize("name, prefix", [("ONEDNN_VERBOSE", "ONEDNN_"), ("DNNL_VERBOSE", "DNNL_"), ("ONEDNN_MAX_CPU_ISA", "ONEDNN_")])
def test_onednn_builds_its_names_so_the_scan_cannot_tell(scans, name, prefix):
    assert not _holds_string(LIB / "libtorch_cpu.so", name)  # independent: no string of the full name
    assert _holds_string(LIB / "libtorch_cpu.so", prefix)
    lib = _libs(scans[name])["libtorch_cpu.so"]
    assert lib.verdict == CANNOT_TELL and lib.names == []
    assert prefix in lib.fragments and name[len(prefix):] in lib.fragments


def test_onednn_verbose_appears_only_inside_messages(scans):
    lib = _libs(scans["ONEDNN_VERBOSE"])["libtorch_cpu.so"]
    assert lib.messages and all(not h.terminal for h in lib.hits)
    assert any("ONEDNN_VERBOSE=" in h.string for h in lib.messages)


def test_scope_on_the_cpu_paths(scans):
    site_mm, site_conv = parse_site("aten.mm.default"), parse_site("aten.convolution.default")
    device, why = choose_device(site_mm, scans["MKL_CBWR"], None)
    assert device == "cpu" and "CPU build" in why
    cbwr = assess(scans["MKL_CBWR"], site_mm, lookup("MKL_CBWR"), device="cpu")
    assert cbwr.path.kind == "cpu_gemm" and cbwr.verdict == ON_PATH and cbwr.complete
    omp = assess(scans["OMP_NUM_THREADS"], site_conv, lookup("OMP_NUM_THREADS"), device="cpu")
    assert omp.path.kind == "cpu_conv" and omp.verdict == ON_PATH
    assert any(Path(e.where).name == "libgomp.so.1" for e in omp.on_path)
    verbose = assess(scans["ONEDNN_VERBOSE"], site_conv, lookup("ONEDNN_VERBOSE"), device="cpu")
    assert verbose.verdict == CANNOT_TELL_STATICALLY
    assert any(Path(e.where).name == "libtorch_cpu.so" and "name pieces" in e.what for e in verbose.cannot_tell)
    assert any("the catalog says libtorch_cpu reads ONEDNN_VERBOSE" in n for n in verbose.notes)


def test_an_undocumented_literal_in_libtorch_cpu_is_not_on_path_evidence(scans):
    # MKL_CBWR at an ATen CPU kernel that is not a GEMM: the catalog does not document cpu_other,
    # and libtorch_cpu holds everything, so its literal proves nothing for this path
    v = assess(scans["MKL_CBWR"], parse_site("index_add:acc1:grad0"), lookup("MKL_CBWR"), device="cpu")
    assert v.path.kind == "cpu_other" and v.verdict != ON_PATH and v.shared_only
