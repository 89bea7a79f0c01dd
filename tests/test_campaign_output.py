"""Verdicts and bundle on site records written by the real campaign writer (no GPU, no CUPTI).

``../shared/device/campaign.py workload --cpu-dry-run`` (the project's device campaign script, kept
outside the repository) runs the campaign's own ``Recorder``
on the CPU: its sites.jsonl is real writer output (no header line, flat arm folders, eight sites
per iteration incl. index_add, torch.hash_tensor digests), with no CUPTI or cuBLASLt files. Two
separate processes make two arms. Skipped when the shared reference tree is absent.
"""
from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from forensics.judge.arm_evidence import load_evidence
from forensics.evidence.bundle import write_bundle
from forensics.judge.verdicts import BITS_DIFFER_KERNEL_UNKNOWN, NO_DIFFERENCE_SEEN, compare_arms, discriminator_table

CAMPAIGN = Path(__file__).resolve().parents[2] / "shared" / "device" / "campaign.py"
pytestmark = [pytest.mark.slow, pytest.mark.skipif(not CAMPAIGN.exists(), reason=f"{CAMPAIGN} absent")]


@pytest.fixture(scope="module")
def campaign_capture(tmp_path_factory):
    root = tmp_path_factory.mktemp("campaign")
    procs = [subprocess.Popen([sys.executable, str(CAMPAIGN), "workload", "--arm", arm, "--out", str(root / arm),
                               "--cpu-dry-run"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for arm in ("a1", "a2")]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        if p.returncode != 0:
            pytest.skip(f"campaign workload failed on this machine: {out.decode()[-300:]}")
    return root


def test_arms_align_occurrence_by_occurrence(campaign_capture):
    pair = compare_arms(campaign_capture).pair("a2")
    assert pair.comparable
    occ = pair.occurrences
    assert len(occ) == 24  # 8 sites x 3 iterations, aligned by label
    # no kernel is ever guessed; the campaign's recorder writes torch.hash_tensor only (no ohash):
    # equal digests are NO DIFFERENCE SEEN, never IDENTICAL
    assert set(occ["classification"]) <= {NO_DIFFERENCE_SEEN, BITS_DIFFER_KERNEL_UNKNOWN}
    assert occ["kernel_baseline"].isna().all()
    assert "index_add:acc1:grad0#3" in set(occ["label"])
    assert list(occ["label"][:3]) == ["gemm:TN:acc0:grad0#1", "gemm:NN:acc0:grad1#1", "gemm:NT:acc0:grad1#1"]


def test_discriminator_axes_from_digests(campaign_capture):
    table = discriminator_table(load_evidence(campaign_capture))
    assert set(table.instances["site"]) == {"gemm:TN:acc0:grad0", "gemm:NN:acc0:grad1", "gemm:NT:acc0:grad1",
                                            "gemm:NT:acc1:grad1"}  # all GEMM sites, index_add left out
    acc = table.instances[table.instances["site"] == "gemm:NT:acc1:grad1"].iloc[0]
    assert acc["input dtypes"] == "float32,float32,float32" and acc["output dtype"] == "float32"
    assert acc["m/n/k"] == "out 256x256" and acc["kernel family"] == "unknown"


def test_bundle_of_the_wgrad_site(campaign_capture, tmp_path):
    out = write_bundle(campaign_capture, tmp_path / "b.tar.gz", site="gemm:NT:acc0:grad1#2")
    with tarfile.open(out) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode(errors="replace")
                 for m in tar.getmembers() if not m.name.endswith(".png")}
    report = files["report.md"]
    assert "No instrument attributed a kernel launch to this site" in report
    assert "No cuBLASLt call was attributed to this site" in report
    assert "**NOT NAMED**" in report
    assert "'m': 16," in files["repro.py"] and "'k': 4096," in files["repro.py"]  # the large-k wgrad
    assert "'source': 'site digests'" in files["repro.py"]
    assert sorted(f for f in files if f.startswith("raw/")) == ["raw/a1/sites.jsonl", "raw/a2/sites.jsonl"]  # flat arm folders
