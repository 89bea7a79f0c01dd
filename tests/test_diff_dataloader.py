"""A DataLoader with worker processes, traced for real. The training process rebuilds each batch
from the worker's shared memory when it arrives (``aten.set_.source_Storage_storage_offset``),
in the order the workers finish, while the loop consumes the batches in order. Before the differ
knew this, two runs that trained identically (batches arriving in another order) read as
"ORIGIN (proven) aten.set_...:1, inputs MATCH": a false origin, since the storage's bytes are an
input the record does not hold. Now such records are listed as outside data and not judged, and
the ops that read the data are compared as usual: a real data difference shows at its first
reader (a RECEIVER), never hidden. The received batches' ops are counted apart
(``...@received:N``): how many arrive before a given op differs from run to run, and one shifted
count of ``empty`` misaligned the program's own ``empty``s after it (false divergences where
their uninitialised memory was read, as in DDP's gradient buckets)."""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import diff_paths, format_report  # noqa: E402
from forensics.tracediff.divergence import ORIGIN, RECEIVER  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "optrace_dataloader.py"
RUNS = {"slow0": ["--slow-worker", "0"], "slow1": ["--slow-worker", "1"],
        "noisy": ["--slow-worker", "0", "--noisy-sample", "50"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("dataloader")

    def run(name: str) -> int:
        code, _ = trace_command([sys.executable, str(SCRIPT), *RUNS[name]], base / name, steps="all")
        return code

    with ThreadPoolExecutor(max_workers=3) as pool:
        codes = list(pool.map(run, RUNS))
    assert codes == [0, 0, 0]
    return {name: base / name for name in RUNS}


def _records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rank0" / "trace.jsonl").read_text().splitlines()[1:-1]]


def _set_records(run: Path) -> list[dict]:
    return [r for r in _records(run) if r.get("op", "").startswith("aten.set_.source_Storage")]


def test_batches_arriving_in_another_order_are_no_divergence(runs):
    a, b = _set_records(runs["slow0"]), _set_records(runs["slow1"])
    assert len(a) == len(b) >= 16  # x and y of eight batches, rebuilt from shared memory
    assert [r["out"][0]["o"] for r in a[:4]] != [r["out"][0]["o"] for r in b[:4]]  # the arrival order differs
    rep = diff_paths(runs["slow0"], runs["slow1"])
    res = rep.ranks[0]
    assert not rep.diverged and res.first_divergence is None, res.first_divergence
    assert res.external_total >= 2 and all(e.name.startswith("aten.set_.source_Storage") for e in res.external)
    # received batches are counted apart, so the program's own empty()s align in both runs
    assert all(r["id"].startswith("aten.set_.source_Storage_storage_offset@received:") and r["meta"]["received"]
               for r in a)
    ids_a = [r["id"] for r in _records(runs["slow0"]) if r["op"] == "aten.empty.memory_format"]
    ids_b = [r["id"] for r in _records(runs["slow1"]) if r["op"] == "aten.empty.memory_format"]
    assert sorted(ids_a) == sorted(ids_b) and any("@received" in i for i in ids_a)
    assert res.records_compared >= 300  # the training ops that read the batches were compared, and matched
    text = format_report(rep)
    assert "record(s) of outside data not judged; no divergence" in text
    assert "ORIGIN" not in text


def test_data_that_really_differ_show_at_their_first_reader(runs):
    rep = diff_paths(runs["slow0"], runs["noisy"])
    d = rep.ranks[0].first_divergence
    assert d is not None and d.verdict == RECEIVER and d.verdict != ORIGIN
    assert d.name == "aten.addmm.default" and d.step == 3  # sample 50 is in batch 3 (16 per batch)
    assert not d.inputs_matched
    assert not d.name.startswith("aten.set_")
    # where the differing input came from: the received batch, in both runs (outside data)
    (src,) = d.input_sources
    assert src["writer_a"]["identity"].startswith("aten.set_.source_Storage") and "@received:" in src["writer_a"]["identity"]
    assert src["writer_b"]["identity"] == src["writer_a"]["identity"]
    assert "which differs between the runs: the walk passed over it as a tensor set onto a storage" in src["reading"]


@pytest.mark.parametrize("differ", [False, True])
def test_a_tensor_read_from_a_file_is_outside_data(tmp_path, differ):
    """``torch.from_file``: the file's bytes are no input of the record. Different files make the
    record differ with "inputs MATCH"; that is no origin. The reader of the data is the first
    divergence (a RECEIVER) when it reads different data."""
    paths = {}
    f = tmp_path / "data.bin"  # one path (an argument of the record): only its bytes change
    for run in ("a", "b"):
        values = torch.arange(8.0) + (1.0 if differ and run == "b" else 0.0)
        f.write_bytes(values.numpy().tobytes())
        paths[run] = trace_in_process(tmp_path / run, lambda: torch.from_file(str(f), size=8).mul(2.0))
    rep = diff_paths(paths["a"], paths["b"])
    res = rep.ranks[0]
    d = res.first_divergence
    if differ:
        assert d is not None and d.verdict == RECEIVER and d.name == "aten.mul.Tensor", d
        assert res.external_total == 1 and res.external[0].name == "aten.from_file.default"
    else:
        assert d is None and res.external_total == 0
