"""The README is true: its commands run and print what its sample blocks show (tests/readme_blocks.py)."""
from __future__ import annotations

import re

import pytest

from tests import readme_blocks as rb

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

SAMPLES = rb.parse(rb.README.read_text())


def test_the_readme_has_samples_and_shows_two_commands():
    text = rb.README.read_text()
    assert len(SAMPLES) >= 4
    block = text.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert [c.split("#")[0].strip() for c in commands] == [
        "forensics analyze tests/fixtures/cpu/conv1d-threads", "python -m pytest -q"]
    # the main command is the first sample, shown with its real output
    assert SAMPLES[0].command == "forensics analyze tests/fixtures/cpu/conv1d-threads"
    assert all(s.expected.strip() for s in SAMPLES), "a sample block is empty: run python -m tests.readme_blocks --update"


def test_the_shipped_default_is_a_capture_of_ours_not_synthetic():
    prov = (rb.REPO / "tests" / "fixtures" / "cpu" / "PROVENANCE.md").read_text()
    assert "conv1d-threads" in prov and not re.search(r"conv1d-threads[^\n]*synthetic", prov, re.I)


def test_comparable_forgets_only_what_varies():
    a = "rank 0: 28 records compared, 4 probe artifact(s) passed over; first\n    artifact passed over: x\n  pass a1: ok 0:00:05"
    b = "rank 0: 28 records compared, 3 probe artifact(s) passed over; first\n  pass a1: ok 0:00:03"
    assert rb.comparable(a) == rb.comparable(b)
    assert rb.comparable(a) != rb.comparable(a.replace("28 records", "29 records"))


@pytest.mark.slow
@pytest.mark.parametrize("sample", SAMPLES, ids=[s.command[:60] for s in SAMPLES])
def test_each_sample_is_what_the_command_prints(sample):
    code, out = rb.run(sample)
    assert code == sample.exit_code, out[-3000:]
    assert rb.comparable(out) == rb.comparable(sample.expected), (
        "README.md's block differs from the command's output; if the change is intended, run "
        "`python -m tests.readme_blocks --update`\n" + out[-3000:])


def test_machine_figures_are_masked_only_within_their_documented_set():
    amx = ("rank 0: 38 records compared, 4 probe artifact(s) passed over; first divergence: ORIGIN (proven)\n"
           "      aten.mm.default:3 seq=37 step=0 phase=backward node=AddmmBackward0 (forward\n"
           "      aten.addmm.default:1) inputs MATCH; output differs by order-sensitive digest; site\n"
           "      gemm:NT:acc0:grad1#2\n"
           "next: forensics kernel --site 'gemm:NT:acc0:grad1#2' --ranks 0 --steps 0 -- python t.py")
    avx2 = (amx.replace("38 records", "28 records").replace("mm.default:3 seq=37", "mm.default:2 seq=27")
            .replace("addmm.default:1)", "addmm.default:2)").replace("grad1#2", "grad1#1"))
    assert rb.comparable(amx) == rb.comparable(avx2)  # the two outcomes seen: the same sample
    # what must hold on any CPU is still compared: the verdict, the site's op family, the next command
    assert rb.comparable(amx) != rb.comparable(avx2.replace("ORIGIN (proven)", "RECEIVER"))
    assert rb.comparable(amx) != rb.comparable(avx2.replace("gemm:NT:acc0:grad1#1", "gemm:TN:acc0:grad0#1"))
    assert rb.comparable(amx) != rb.comparable(avx2.replace(" -- python t.py", ""))
    # a value no CPU we ran on gave is not waved through: it is recorded in readme_blocks first
    assert rb.comparable(amx) != rb.comparable(avx2.replace("grad1#1", "grad1#3"))
    assert rb.comparable(amx) != rb.comparable(avx2.replace("28 records", "29 records"))


#: The samples whose figures depend on the CPU: rerun with the libraries' AVX-512 paths switched off.
_CPU_SAMPLES = [s for s in SAMPLES if "forensics diff runA runB" in s.command]


@pytest.mark.slow
@pytest.mark.parametrize("sample", _CPU_SAMPLES, ids=[s.command[:60] for s in _CPU_SAMPLES])
def test_the_cpu_dependent_samples_hold_under_avx2(sample):
    """What an AVX2 CPU gives (emulated: benchmarks/isa.py's switches) matches the README as recorded."""
    import sys

    sys.path.insert(0, str(rb.REPO / "benchmarks"))
    from isa import AVX2_ENV

    code, out = rb.run(sample, extra_env=AVX2_ENV)
    assert code == sample.exit_code, out[-3000:]
    assert rb.comparable(out) == rb.comparable(sample.expected), out[-3000:]
    if sample.command.startswith("forensics diff"):
        assert "first divergence: ORIGIN (proven)" in out and "site: gemm:NT:acc0:grad1#" in out
        assert [line for line in out.splitlines() if line.startswith("next: forensics kernel --site 'gemm:NT:")]
