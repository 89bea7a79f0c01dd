"""A newcomer's first hour: the README's main command works from a plain clone (no ../shared)."""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "corpus-ex-gpu"


def _sha256(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_shipped_pair_is_byte_identical_to_the_corpus(corpus):
    assert _sha256(EXAMPLE / "a1" / "ex-gpu.s10.sqlite") == _sha256(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite")
    assert _sha256(EXAMPLE / "a1" / "ex-gpu.s10.ncu-rep") == _sha256(corpus / "ncu" / "extrap_ex-gpu.s10.ncu-rep")


def test_shipped_example_reads_nothing_outside_the_repository():
    text = (EXAMPLE / "manifest.yaml").read_text()
    assert "../" not in text and "/shared/" not in text


@pytest.mark.slow
def test_plain_clone_runs_the_readme_main_command(tmp_path):
    """`git clone` into a folder with no ../shared beside it, then the README's main command."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: nothing to clone")
    clone = tmp_path / "fresh" / "forensics"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    assert not (clone.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env["PYTHONPATH"] = str(clone)

    def forensics(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=clone, env=env, capture_output=True,
                              text=True, timeout=300)

    # the README's main command, exactly as written there: our own real CPU capture, analysed offline
    r = forensics("analyze", "tests/fixtures/cpu/conv1d-threads")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: 2 implementation(s) NAMED" in r.stdout
    assert "aten::_slow_conv2d_forward -> oneMKL SGEMM" in r.stdout
    assert "aten::mkldnn_convolution -> oneDNN convolution jit_1x1:avx512_core" in r.stdout
    assert (clone / "tests" / "fixtures" / "cpu" / "conv1d-threads" / "analysis" / "report.md").exists()
    assert "Traceback" not in r.stderr
    # and the public GPU pair the README shows next
    r = forensics("analyze", "examples/corpus-ex-gpu", "--out", str(tmp_path / "analysis"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: 5 kernel(s) NAMED" in r.stdout
    for kernel in ("init_array", "vector_add", "vector_add1", "vector_mul", "vector_dot"):
        assert kernel in r.stdout
    assert "Traceback" not in r.stderr
