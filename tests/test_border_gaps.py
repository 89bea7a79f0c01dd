"""Issue 28's arm-name case and quieter gaps: names that become paths or keys (rank folders, log
names' process ids, arm names), compare naming what an arm lost, a disk-full `analyze --out`, a
directory named like an instrument file.

A toggle of a knob named like a secret (``--toggle NVTE_API_TOKEN=...``) once made an arm
``t1-nvte_api_token`` whose name the bundle's redaction took for a secret's name: ``bundle``
exited 70 and wrote nothing. A 30-digit rank folder died in analyze and compare (exit 70).
"""
from __future__ import annotations

import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

from forensics.capture.passes import toggle_arm_name
from forensics.cli import main
from forensics.core.redact import is_secret_key
from tests._helpers import assert_bad_input

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads"  # real CPU capture: a1, a2, t1-omp_num_threads
TRAIN = REPO / "examples" / "cpu-backend" / "train.py"
SECRET = "tok-7f3a9c2e51d04b8a"


def _copy(tmp_path: Path) -> Path:
    cap = tmp_path / "cap"
    shutil.copytree(FIXTURE, cap, ignore=shutil.ignore_patterns("analysis"))
    return cap


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, unfit(out), err  # piped lines are broken at 100 columns (docs/errors.md): read them whole


def test_a_secret_named_toggle_makes_an_arm_name_that_is_not_a_secret_name():
    assert toggle_arm_name(1, "NVTE_API_TOKEN") == "t1-redacted-knob"
    assert not is_secret_key(toggle_arm_name(1, "NVTE_API_TOKEN"))
    assert toggle_arm_name(2, "OMP_NUM_THREADS") == "t2-omp_num_threads"


def test_bundle_of_a_capture_whose_arm_name_holds_a_secret_word(tmp_path, capsys):
    """A capture made before the rename (its toggle arm is named after NVTE_API_TOKEN): the bundle is
    written, the toggled value is redacted, the arm is still there (it was exit 70, nothing written)."""
    cap = _copy(tmp_path)
    (cap / "t1-omp_num_threads").rename(cap / "t1-nvte_api_token")
    text = (cap / "manifest.yaml").read_text()
    text = text.replace("t1-omp_num_threads", "t1-nvte_api_token").replace("OMP_NUM_THREADS: '2'",
                                                                          f"NVTE_API_TOKEN: '{SECRET}'")
    (cap / "manifest.yaml").write_text(text)
    out = tmp_path / "b.tar.gz"
    code, stdout, err = _run(["bundle", str(cap), "-o", str(out)], capsys)
    assert code == 0, err
    with tarfile.open(out) as tar:
        data = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert SECRET.encode() not in data
    assert b"t1-nvte_api_token" in data  # the arm is reported, under its own name


@pytest.mark.slow
def test_kernel_toggle_of_a_secret_named_knob_then_bundle_for_real(tmp_path, capsys, monkeypatch):
    """`forensics kernel --toggle NVTE_API_TOKEN=...` on the CPU backend, then `forensics bundle`."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cap = tmp_path / "cap"
    code, out, err = _run(["kernel", "--device", "cpu", "--site", "aten.convolution.default", "--steps", "0",
                           "--arms", "1", "--toggle", f"NVTE_API_TOKEN={SECRET}", "--out", str(cap), "-q",
                           "--timeout", "300", "--", sys.executable, str(TRAIN), "--model", "conv1d", "--steps", "2"],
                          capsys)
    assert code in (0, 1), err
    assert (cap / "t1-redacted-knob").is_dir() and not any("token" in p.name for p in cap.iterdir())
    bundle = tmp_path / "b.tar.gz"
    code, out, err = _run(["bundle", str(cap), "-o", str(bundle)], capsys)
    assert code == 0, err
    with tarfile.open(bundle) as tar:
        names = [m.name for m in tar.getmembers()]
        data = b"".join(tar.extractfile(m).read() for m in tar.getmembers() if m.isfile())
    assert SECRET.encode() not in data and any(n.endswith("evidence.json") for n in names)
    assert b"t1-redacted-knob" in data


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_a_rank_folder_past_any_rank_is_one_line(command, tmp_path, capsys):
    cap = _copy(tmp_path)
    big = "rank" + "1" * 30
    (cap / "a2" / "rank0").rename(cap / "a2" / big)
    (cap / "manifest.yaml").write_text((cap / "manifest.yaml").read_text().replace("a2/rank0/", f"a2/{big}/"))
    code, out, err = _run([command, str(cap), "--out" if command == "analyze" else "--json",
                           str(tmp_path / ("an" if command == "analyze" else "c.json"))], capsys)
    assert_bad_input(code, err, needle=big, out=out)


# --------------------------------------------------------------------------- compare says what an arm lost
def test_compare_and_its_json_name_the_site_records_an_arm_dropped(tmp_path, capsys):
    """The real CPU capture, its a2 site probe's summary set to 3 dropped records: analyze and bundle
    said so; compare (text and --json) said nothing."""
    import json

    cap = _copy(tmp_path)
    sites = cap / "a2" / "rank0" / "sites.jsonl"
    sites.write_text(sites.read_text().replace('"dropped": 0', '"dropped": 3'))
    code, out, err = _run(["compare", str(cap), "--json", str(tmp_path / "c.json")], capsys)
    assert code in (0, 1), err
    lost = [x for x in out.splitlines() if x.startswith("lost: ")]
    assert len(lost) == 1 and "arm a2 rank 0" in lost[0] and "dropped 3" in lost[0] and str(sites) in lost[0], out
    doc = json.loads((tmp_path / "c.json").read_text())
    assert [(x["arm"], x["rank"], x["instrument"]) for x in doc["losses"]] == [("a2", 0, "sites")]
    code, out, err = _run(["compare", str(_copy(tmp_path / "intact"))], capsys)
    assert "lost: " not in out


# --------------------------------------------------------------------------- disk full
def test_disk_full_analyze_out_leaves_no_claimed_folder(tmp_path):
    """A real ENOSPC (a full 64 KiB tmpfs in a private mount namespace): the claim marker could not
    be written; it was left behind empty, the message named no file, and the rerun after freeing
    space wrote to ``an-2`` (the folder read as another run's)."""
    import subprocess

    from tests.test_trace_command import _can_mount_tmpfs

    if not _can_mount_tmpfs():
        pytest.skip("needs `unshare -Urm` and a tmpfs mount (user namespaces)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cli = f"{sys.executable} -m forensics analyze {FIXTURE} -q --out {mnt}/an"
    script = (f"mount -t tmpfs -o size=64k tmpfs {mnt} && head -c 70000 /dev/zero > {mnt}/filler 2>/dev/null; "
              f"{cli}; echo rc1=$?; ls -A {mnt}/an; rm {mnt}/filler; {cli}; echo rc2=$?; ls {mnt}")
    import os

    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    out, err = proc.stdout, proc.stderr
    assert "rc1=4" in out and "rc2=0" in out, out + err
    first = [x for x in err.splitlines() if "No space left on device" in x]
    assert len(first) == 1 and f"{mnt}/an/" in first[0], err  # names the file it could not write
    assert ".forensics-claim" not in out  # no claim left in the empty folder
    assert f"wrote {mnt}/an/analysis.json" in out and "an-2" not in out, out


# --------------------------------------------------------------------------- a directory named like an instrument file
@pytest.mark.parametrize("name", ["cupti.jsonl", "mkl.123.log"])
def test_a_directory_named_like_an_instrument_file_is_bad_input(name, tmp_path, capsys):
    """docs/errors.md: exit 3 for a directory that is not what the command reads (it was skipped
    silently: the real CPU capture analysed as if it were not there, exit 0 or 1)."""
    cap = _copy(tmp_path)
    (cap / "a2" / "rank0" / name).mkdir()
    code, out, err = _run(["analyze", str(cap), "-q", "--out", str(tmp_path / "an")], capsys)
    assert code == 3 and err.strip().splitlines() == [
        f"forensics: bad input: {cap / 'a2' / 'rank0' / name}: is a directory, not a "
        f"{'cupti' if name.startswith('cupti') else 'mkl'} file"], err
    assert not (tmp_path / "an").exists()


# --------------------------------------------------------------------------- knob JSON: a bundle section's typed border
@pytest.mark.parametrize("body", ['{"title": [1], "markdown": "x"}', '{"title": "t", "markdown": "x", "data": NaN}'])
def test_a_knob_section_of_wrong_types_is_one_line(body, tmp_path, capsys):
    section = tmp_path / "knob.section.json"
    section.write_text(body)
    code, out, err = _run(["bundle", str(FIXTURE), "-o", str(tmp_path / "b.tar.gz"), "--section", str(section)], capsys)
    lines = err.strip().splitlines()
    assert code == 3 and len(lines) == 1 and str(section) in lines[0], err
    assert not (tmp_path / "b.tar.gz").exists()
