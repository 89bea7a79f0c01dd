"""What differs between two runs is recorded and named (issue 27 items 1 and 2), on real runs of a
small CPU training script traced by the real CLI in a fresh git repository with no ignore rules.

* the README's flow (``forensics trace --out runA``, ``--out runB``, ``forensics diff``) reads
  comparable although ``runA/`` is an untracked file by the second run (it read NOT COMPARABLE:
  ``program.git.diff_sha256`` differs), and so does an untracked file the program never reads;
* an edit to a local module the script imports, or to the script, reads NOT COMPARABLE naming the file;
* a catalog knob set in one run only (``ONEDNN_MAX_CPU_ISA=SSE41``, ``ATEN_CPU_CAPABILITY=default``)
  is recorded and named by ``diff`` before any verdict, in the text and in ``config_differences``
  (the header dropped ``ONEDNN_*`` and ``ATEN_*``: the diff printed no line at all);
* ``torch.backends.mkldnn.enabled`` flipped by a script argument is named as a switch, and one
  flipped during the run reads ``"True -> False"`` (header and footer).
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xxhash")
if not hasattr(torch, "hash_tensor"):
    pytest.skip("torch.hash_tensor missing (torch < 2.9)", allow_module_level=True)

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

SCRIPT = """\
import sys
import torch
import helper

torch.manual_seed(0)
if "--no-mkldnn" in sys.argv:
    torch.backends.mkldnn.enabled = False
m = torch.nn.Conv1d(8, 16, 3)
x = torch.randn(4, 8, 32)
helper.loss(m(x)).backward()
if "--flip-late" in sys.argv:  # after the tracer's first write (1 s on): the header has read the switches
    import time
    time.sleep(1.2)
    torch.ones(2) + 1
    torch.backends.mkldnn.enabled = False
    m(x).sum()
"""
HELPER = "def loss(y):\n    return y.sum()\n"
_REPORTS = itertools.count()


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FORENSICS_", "ONEDNN_", "DNNL_", "ATEN_", "MKL_", "OMP_"))}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args], cwd=repo,
                   check=True, capture_output=True)


def _forensics(repo: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "forensics", *args], cwd=repo, env=env or _env(),
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    if not shutil.which("git"):
        pytest.skip("git is not installed")
    repo = tmp_path_factory.mktemp("fresh") / "proj"
    repo.mkdir()
    (repo / "s.py").write_text(SCRIPT)
    (repo / "helper.py").write_text(HELPER)
    _git(repo, "init", "-q", ".")
    _git(repo, "add", "s.py", "helper.py")
    _git(repo, "commit", "-qm", "s")
    assert not (repo / ".gitignore").exists()

    def trace(name: str, *args: str, **env: str) -> None:
        r = _forensics(repo, "trace", "--out", name, "--", "python", "s.py", *args, env=_env(**env))
        assert r.returncode == 0, r.stderr

    trace("runA")
    (repo / "notes.txt").write_text("an untracked file the program never reads\n")
    trace("runB")
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda job: trace(job[0], *job[1], **job[2]), [
            ("runIsa", (), {"ONEDNN_MAX_CPU_ISA": "SSE41"}),
            ("runCap", (), {"ATEN_CPU_CAPABILITY": "default"}),
            ("runNoDnn", ("--no-mkldnn",), {}),
            ("runSecret", (), {"TORCH_HUB_TOKEN": "hf_zzSecretValue0123456789abcdefgh"}),
            ("runLate", ("--flip-late",), {}),
        ]))
    (repo / "helper.py").write_text(HELPER.replace("y.sum()", "y.sum() * 1.0"))
    trace("runHelper")
    (repo / "helper.py").write_text(HELPER)
    (repo / "s.py").write_text(SCRIPT + "# edited\n")
    trace("runScript")
    (repo / "s.py").write_text(SCRIPT)
    return repo


def _diff(repo: Path, a: str, b: str) -> tuple[list[str], dict]:
    out = repo / f"{a}-{b}.{next(_REPORTS)}.json"  # never overwritten: a new name per call
    r = _forensics(repo, "diff", a, b, "--json", str(out))
    assert r.returncode in (0, 1), r.stderr
    return r.stdout.splitlines(), json.loads(out.read_text())


def _header(repo: Path, run: str) -> dict:
    return json.loads((repo / run / "rank0" / "trace.jsonl").read_text().splitlines()[0])


def test_readme_flow_in_a_repository_without_ignore_rules_is_comparable(runs):
    lines, rep = _diff(runs, "runA", "runB")
    assert rep["comparable"] is True and not any(x.startswith("NOT COMPARABLE") for x in lines), lines
    assert rep["config_differences"] == []
    program = _header(runs, "runA")["program"]
    assert set(program["modules"]) == {"helper.py"}  # what the program imported; the script has its own hash
    assert not any(k.startswith("runA") for k in program["modules"])


def test_an_edited_module_or_script_is_named(runs):
    lines, rep = _diff(runs, "runA", "runHelper")
    assert rep["comparable"] is False
    assert lines[0].startswith("NOT COMPARABLE: program.modules.helper.py (file helper.py) differs"), lines[0]
    assert [d["what"] for d in rep["comparability"] if d["severity"] == "not_comparable"] == ["file helper.py"]
    lines, rep = _diff(runs, "runA", "runScript")
    assert rep["comparable"] is False
    assert lines[0].startswith("NOT COMPARABLE: program.sha256 (the script s.py) differs"), lines[0]


@pytest.mark.parametrize("run,name,a,b", [
    ("runIsa", "ONEDNN_MAX_CPU_ISA", None, "SSE41"),
    ("runCap", "ATEN_CPU_CAPABILITY", None, "default"),
])
def test_a_catalog_knob_is_recorded_and_named_first(runs, run, name, a, b):
    assert _header(runs, run)["env"][name] == b
    lines, rep = _diff(runs, "runA", run)
    assert rep["comparable"] is True
    first = rep["config_differences"][0]
    assert (first["kind"], first["name"], first["a"], first["b"], first["catalogued"]) == ("knob", name, a, b, True)
    assert lines[1].startswith(f"  knob differs: {name} A=<unset> B='{b}'"), lines[:3]
    verdict = next(i for i, x in enumerate(lines) if x.startswith("rank 0:"))
    assert verdict > 1  # named before any op verdict


def test_aten_capability_is_also_read_in_process(runs):
    """What ATEN_CPU_CAPABILITY selects, as ATen reports it in the traced process."""
    _, rep = _diff(runs, "runA", "runCap")
    switch = [c for c in rep["config_differences"] if c["name"] == "torch.backends.cpu.get_cpu_capability"]
    assert len(switch) == 1 and switch[0]["kind"] == "switch" and switch[0]["b"] == "DEFAULT"


def test_a_switch_flipped_by_a_script_argument_is_named(runs):
    assert _header(runs, "runNoDnn")["switches"]["torch.backends.mkldnn.enabled"] is False
    lines, rep = _diff(runs, "runA", "runNoDnn")
    assert lines[1] == "  switch differs: torch.backends.mkldnn.enabled A=True B=False", lines[:3]
    assert [(c["kind"], c["name"]) for c in rep["config_differences"]] == [("switch", "torch.backends.mkldnn.enabled")]


def test_a_secret_among_the_knobs_stays_redacted(runs):
    text = (runs / "runSecret" / "rank0" / "trace.jsonl").read_text()
    assert "zzSecretValue" not in text
    assert "TORCH_HUB_TOKEN" in _header(runs, "runSecret")["env"]
    _, rep = _diff(runs, "runA", "runSecret")
    assert "zzSecretValue" not in json.dumps(rep)


def test_a_switch_flipped_during_the_run_reads_first_and_last(runs):
    """The header reads the switches at the tracer's first write, the footer at the end."""
    lines = (runs / "runLate" / "rank0" / "trace.jsonl").read_text().splitlines()
    head, foot = json.loads(lines[0]), json.loads(lines[-1])
    assert head["switches"]["torch.backends.mkldnn.enabled"] is True
    assert foot["type"] == "footer" and foot["switches"]["torch.backends.mkldnn.enabled"] is False
    text, rep = _diff(runs, "runA", "runLate")
    assert [(c["name"], c["a"], c["b"]) for c in rep["config_differences"]] == [
        ("torch.backends.mkldnn.enabled", True, "True -> False")]
    assert text[1] == "  switch differs: torch.backends.mkldnn.enabled A=True B='True -> False'", text[:3]
