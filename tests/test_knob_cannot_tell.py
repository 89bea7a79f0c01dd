"""A library that reads a name it never holds as a string: "cannot tell statically", never "does not read".

The situation of cuBLAS 13.10: neither libcublas.so.13 nor libcublasLt.so.13 contains the string
CUBLAS_WORKSPACE_CONFIG, yet cuBLAS reads it. Reproduced with SYNTHETIC C sources compiled here
(real ELF): the name is decoded at run time from XOR-ed bytes, so no string and no piece of it is in
the library. The test proves by calling the library (ctypes) that it really reads the variable,
then checks that the static scan does not claim otherwise, and that the scope verdict for the
scanned components comes with what stays unscanned and how to close it.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import EXIT_OK
from forensics.knobs import scan
from forensics.knobs.catalog import lookup
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS, scan_elf_file
from forensics.knobs.scope import CANNOT_TELL_STATICALLY, NOT_ON_PATH, UNKNOWN, assess
from forensics.core.site import parse_site

GCC = shutil.which("gcc")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(GCC is None, reason="gcc not installed: cannot build the test libraries")]
NAME = "CUBLAS_WORKSPACE_CONFIG"
KEY = 0x5A


def _decoder_source(name: str, extra: str = "") -> str:
    """SYNTHETIC C: getenv of a name decoded from XOR-ed bytes at run time (no string of it)."""
    enc = ", ".join(str(ord(c) ^ KEY) for c in name)
    return f"""
#include <stdlib.h>
#include <stdio.h>
static const unsigned char enc[] = {{{enc}}};
int knob_is_set(void) {{
    char name[{len(name) + 1}];
    for (unsigned i = 0; i < sizeof enc; ++i) name[i] = (char)(enc[i] ^ {KEY});
    name[sizeof enc] = 0;
    const char *v = getenv(name);
    return v != 0 && v[0] != 0;
}}
{extra}
"""


def _build(out: Path, source: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.parent / (out.name.replace(".", "_") + ".c")
    src.write_text(source)
    subprocess.run([GCC, "-shared", "-fPIC", "-O1", "-o", str(out), str(src)], check=True, capture_output=True)
    src.unlink()
    return out


@pytest.fixture()
def cublas_like(tmp_path, monkeypatch):
    """SYNTHETIC unpacked wheel: nvidia/cu13/lib/libcublas.so.13 and libcublasLt.so.13 read the knob
    by a decoded name; libcublas also reads a sibling knob by literal (as the real one does)."""
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    lib = tmp_path / "wheel" / "nvidia" / "cu13" / "lib"
    sibling = 'int logging_on(void) { const char *v = getenv("CUBLAS_LOGINFO_DBG"); return v && v[0] == \'1\'; }'
    _build(lib / "libcublas.so.13", _decoder_source(NAME, sibling))
    _build(lib / "libcublasLt.so.13", _decoder_source(NAME))
    return tmp_path / "wheel"


def test_the_library_really_reads_the_name_it_does_not_hold(cublas_like, monkeypatch):
    path = cublas_like / "nvidia" / "cu13" / "lib" / "libcublas.so.13"
    assert NAME.encode() not in path.read_bytes()  # no string of it anywhere in the file
    lib = ctypes.CDLL(str(path))
    monkeypatch.delenv(NAME, raising=False)
    assert lib.knob_is_set() == 0
    monkeypatch.setenv(NAME, ":4096:8")  # os.environ -> putenv: the C library sees it
    assert lib.knob_is_set() == 1


def test_such_a_library_is_cannot_tell_with_its_evidence(cublas_like):
    result, _ = scan_elf_file(str(cublas_like / "nvidia" / "cu13" / "lib" / "libcublas.so.13"), NAME)
    assert result.verdict == CANNOT_TELL and result.hits == [] and result.fragments == []
    assert result.env_imports == ["getenv"]
    assert result.family == ["CUBLAS_LOGINFO_DBG"]
    text = result.evidence({"CUBLAS_LOGINFO_DBG"})
    assert "imports getenv but holds no string of the name" in text and "CUBLAS_LOGINFO_DBG*" in text


def test_scope_says_cannot_tell_statically_and_what_stays_unscanned(cublas_like):
    s = scan(NAME, [str(cublas_like)])
    assert [lib.verdict for lib in s.libraries] == [CANNOT_TELL, CANNOT_TELL]
    v = assess(s, parse_site("gemm:NT:acc0:grad1"), lookup(NAME))
    assert v.path.kind == "torch_gemm" and v.present == ["cuBLAS", "cuBLASLt"]
    assert v.verdict == v.scanned_verdict == CANNOT_TELL_STATICALLY
    assert sorted(Path(e.where).name for e in v.cannot_tell) == ["libcublas.so.13", "libcublasLt.so.13"]
    assert not v.complete and [u.component for u in v.unscanned] == ["ATen CUDA (libtorch_cuda)"]
    assert "--path" in v.unscanned[0].how and "libtorch_cuda" in v.unscanned[0].how
    assert any("the catalog says libcublas reads" in n for n in v.notes)


def test_cli_never_says_no_library_contains_the_name(cublas_like, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")
    code = main(["knob", NAME, "--site", "gemm:NT:acc0:grad1", "--path", str(cublas_like)])
    assert code == EXIT_OK
    out = capsys.readouterr().out
    assert "contains the name" not in out
    assert "scope gemm:NT:acc0:grad1: CANNOT TELL STATICALLY" in out
    assert "cannot tell: nvidia/cu13/lib/libcublas.so.13" in out and "cannot tell: nvidia/cu13/lib/libcublasLt.so.13" in out
    assert "not scanned: ATen CUDA (libtorch_cuda)" in out and "to close: add --path" in out
    assert "to decide: the dynamic check" in out
    assert "a static scan cannot tell whether the name is read" in out


def test_json_carries_scanned_verdict_and_unscanned(cublas_like, capsys):
    assert main(["knob", NAME, "--site", "gemm:NT:acc0:grad1", "--path", str(cublas_like), "--json", "-"]) == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    sc = data["scope"]
    assert sc["verdict"] == sc["scanned_verdict"] == "CANNOT TELL STATICALLY" and sc["complete"] is False
    assert [u["component"] for u in sc["unscanned"]] == ["ATen CUDA (libtorch_cuda)"]
    assert {Path(lib["file"]).name: lib["verdict"] for lib in data["libraries"]} == {
        "libcublas.so.13": CANNOT_TELL, "libcublasLt.so.13": CANNOT_TELL}


def test_readers_all_off_path_with_a_component_missing_gives_the_scanned_verdict_then_the_gap(tmp_path, monkeypatch, capsys):
    """SYNTHETIC tree: the only reader is off the torch_gemm path, cuBLAS/cuBLASLt are present and
    cannot read the environment, libtorch_cuda is missing: NOT ON PATH for what was scanned,
    UNKNOWN overall, and how to close the gap."""
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "site"
    _build(root / "nvidia" / "cublas" / "lib" / "libcublas.so.12", "int f(int a) { return a; }\n")
    _build(root / "nvidia" / "cublas" / "lib" / "libcublasLt.so.12", "int g(int a) { return a + 1; }\n")
    _build(root / "other" / "libreader.so", '#include <stdlib.h>\nint r(void) { return getenv("MY_OFFPATH_KNOB") != 0; }\n')
    v = assess(scan("MY_OFFPATH_KNOB", [str(root)]), parse_site("aten.mm.default"), None, device="cuda")
    assert v.scanned_verdict == NOT_ON_PATH and v.verdict == UNKNOWN
    assert [Path(e.where).name for e in v.off_path] == ["libreader.so"]
    assert [u.component for u in v.unscanned] == ["ATen CUDA (libtorch_cuda)"]
    monkeypatch.setenv("COLUMNS", "400")
    main(["knob", "MY_OFFPATH_KNOB", "--site", "aten.mm.default", "--device", "cuda", "--path", str(root)])
    out = capsys.readouterr().out
    assert "UNKNOWN -- in the scanned components: NOT ON PATH" in out
    assert "not scanned: ATen CUDA (libtorch_cuda): not installed under the scanned paths; to close: add --path" in out


@pytest.mark.skipif(not os.environ.get("FORENSICS_TEST_CUBLAS_DIR"),
                    reason="set FORENSICS_TEST_CUBLAS_DIR to an unpacked nvidia-cublas wheel (~450 MB) to run this on the real libraries")
def test_real_cublas_wheel_is_cannot_tell(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    s = scan(NAME, [os.environ["FORENSICS_TEST_CUBLAS_DIR"]])
    verdicts = {Path(lib.file).name: lib.verdict for lib in s.libraries}
    assert verdicts.get("libcublas.so.13") == verdicts.get("libcublasLt.so.13") == CANNOT_TELL
    assert CONTAINS not in verdicts.values()
    v = assess(s, parse_site("gemm:NT:acc0:grad1"), lookup(NAME))
    assert v.verdict == CANNOT_TELL_STATICALLY
