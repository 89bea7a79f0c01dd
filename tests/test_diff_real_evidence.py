"""Issue 13's differ rules on real CPU runs (nothing synthetic): each workload in tests/data/scripts
runs in its own process under `forensics trace`, and the traces are diffed.

* optrace_untraced_perm.py: NumPy permutes a tensor's values outside the dispatcher, cumsum reads
  them. The whole-tensor XOR digest of cumsum's input is equal in both runs; its order-sensitive
  digest is not, so no ORIGIN is claimed (with XOR digests only, cumsum would look like one);
* optrace_backward.py: the first difference is a backward reduction; the record names its phase,
  its autograd node and the forward op that created that node;
* optrace_branch.py: one run takes a branch the other does not, then a value differs later;
* a copy of a script with one changed line: NOT COMPARABLE before any verdict.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("xxhash")
if not hasattr(torch, "hash_tensor"):
    pytest.skip("torch.hash_tensor missing (torch < 2.9)", allow_module_level=True)

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import (  # noqa: E402
    AFTER_CONTROL_FLOW,
    CONTROL_FLOW,
    ORIGIN,
    RECEIVER,
    diff_paths,
    format_report,
)

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("evidence")
    changed = base / "copy" / "optrace_backward.py"
    changed.parent.mkdir()
    shutil.copy(SCRIPTS / "optrace_backward.py", changed)
    with open(changed, "a") as f:
        f.write("# one more line: another program\n")
    jobs = {
        "perm1": ([SCRIPTS / "optrace_untraced_perm.py", "--seed", "1"], "auto"),
        "perm2": ([SCRIPTS / "optrace_untraced_perm.py", "--seed", "2"], "auto"),
        "xor1": ([SCRIPTS / "optrace_untraced_perm.py", "--seed", "1"], "off"),
        "xor2": ([SCRIPTS / "optrace_untraced_perm.py", "--seed", "2"], "off"),
        "bw1": ([SCRIPTS / "optrace_backward.py", "--threads", "1"], "auto"),
        "bw2": ([SCRIPTS / "optrace_backward.py", "--threads", "2"], "auto"),
        "bwcopy": ([changed, "--threads", "1"], "auto"),
        "br1": ([SCRIPTS / "optrace_branch.py", "--threads", "1"], "auto"),
        "br2": ([SCRIPTS / "optrace_branch.py", "--threads", "2", "--extra"], "auto"),
    }

    def run(name: str) -> tuple[str, int]:
        args, ordered = jobs[name]
        code, _ = trace_command([sys.executable, *map(str, args)], base / name, ordered_digests=ordered)
        return name, code

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = dict(pool.map(run, jobs))
    assert all(c == 0 for c in codes.values()), codes
    return {name: base / name for name in jobs} | {"copy": changed}


def header(run: Path) -> dict:
    return json.loads((run / "rank0" / "trace.jsonl").read_text().splitlines()[0])


def test_untraced_permutation_is_a_receiver_not_a_proven_origin(runs):
    rep = diff_paths(runs["perm1"], runs["perm2"])
    d = rep.ranks[0].first_divergence
    # the first record that reads the permuted tensor (torch.from_numpy's lift_fresh) already sees it
    assert d.verdict == RECEIVER and d.name == "aten.lift_fresh.default" and "reordered" in d.input_evidence
    assert rep.site is None and rep.pattern == "only_receivers"
    assert any("untraced" in w for w in d.warnings)
    # premise, on the raw files: the permuted input's XOR digests are equal, its ordered ones are not
    lines = [json.loads(x) for x in (runs["perm1"] / "rank0" / "trace.jsonl").read_text().splitlines()[1:-1]]
    other = {x["id"]: x for x in (json.loads(y) for y in (runs["perm2"] / "rank0" / "trace.jsonl").read_text().splitlines()[1:-1])}
    rec_a, rec_b = next(x for x in lines if x["id"] == d.identity), other[d.identity]
    assert rec_a["in"][0]["h"] == rec_b["in"][0]["h"] and rec_a["in"][0]["o"] != rec_b["in"][0]["o"]


def test_same_runs_with_xor_digests_only_give_an_unproven_origin(runs):
    """What issue 13 reported: with XOR input digests, cumsum looks like a proven ORIGIN. Now it
    is an ORIGIN whose evidence is unproven, and the report says what to enable."""
    rep = diff_paths(runs["xor1"], runs["xor2"])
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.identity == "aten.cumsum.default:1" and d.evidence == "unproven"
    assert d.input_evidence == "order-independent input digest"
    assert "unproven: order-independent input digest" in format_report(rep)
    assert rep.next_command.startswith("forensics trace --ordered-digests inputs")
    assert header(runs["xor1"])["ordered"]["mode"] == "off"


def test_backward_origin_names_phase_node_and_forward_op(runs):
    rep = diff_paths(runs["bw1"], runs["bw2"])
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "proven" and d.identity == "aten.sum.dim_IntList:1"
    assert (d.phase, d.autograd_node, d.forward_op) == ("backward", "MulBackward0", "aten.mul.Tensor:1")
    assert "phase=backward node=MulBackward0 (forward aten.mul.Tensor:1)" in format_report(rep)
    assert rep.comparable


def test_control_flow_region_realignment_and_later_difference(runs):
    rep = diff_paths(runs["br1"], runs["br2"])
    res = rep.ranks[0]
    d = res.first_divergence
    assert d.verdict == CONTROL_FLOW and d.side == "B" and d.identity == "aten.neg.default:1"
    cf = d.control_flow
    assert (cf["only_in_a"], cf["only_in_b"]) == (0, 4)  # neg, exp, mul, add: the branch B took
    assert cf["realigned_at"]["a"]["identity"] == "aten.mm.default:1"
    later = [x for x in res.after_control_flow if x.identity == "aten.sum.default:1"]
    assert later and later[0].verdict == AFTER_CONTROL_FLOW and later[0].inputs_matched and later[0].site is None
    assert rep.site is None


def test_program_fingerprint_and_not_comparable(runs):
    h = header(runs["bw1"])
    script = SCRIPTS / "optrace_backward.py"
    assert h["program"]["sha256"] == hashlib.sha256(script.read_bytes()).hexdigest()
    assert h["program"]["script"] == str(script)
    if shutil.which("git"):
        assert len(h["program"]["git"]["commit"]) == 40 and "diff_sha256" not in h["program"]["git"]
    assert h["program"]["interpreter"]["version"] == sys.version
    assert isinstance(h["program"]["modules"], dict) and "numpy" in h["program"]["packages"]  # torch imports numpy
    assert h["versions"]["torch"] == torch.__version__
    rep = diff_paths(runs["bw1"], runs["bwcopy"])
    assert not rep.comparable
    first = format_report(rep).splitlines()[0]
    assert first.startswith("NOT COMPARABLE: program.sha256 (the script ") and "optrace_backward.py" in first
