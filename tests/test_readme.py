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
