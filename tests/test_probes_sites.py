"""The site probe in-process and through the bootstrap: window, occurrences, digests, filters, files."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from probes.config import ProbeConfig, bootstrap_env
from probes.sites import SiteProbe, install, open_exclusive
from probes.window import StepWindow, parse_steps

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def te_step(x, w, main_grad, dy):
    """One TE-style step by hand: fprop TN, dgrad NN, wgrad NT, wgrad into main_grad NT acc1."""
    torch.mm(x, w.t())
    torch.mm(dy, w)
    torch.mm(dy.t(), x)
    main_grad.addmm_(dy.t(), x)


def run_probe(tmp_path: Path, steps="1-2", site=None, n_steps=4, **cfg_kw) -> tuple[Path, SiteProbe]:
    cfg = ProbeConfig(out_dir=str(tmp_path), site=site, steps=steps, **cfg_kw)
    window = StepWindow(parse_steps(steps))
    probe = install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    g = torch.Generator().manual_seed(0)
    x, w, dy = torch.randn(8, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(8, 6, generator=g)
    main_grad = torch.zeros(6, 4)
    for _ in range(n_steps):
        te_step(x, w, main_grad, dy)
        window.advance()  # the explicit probes.step() path
    window.close()
    probe.close()
    return tmp_path / "rank0" / "sites.jsonl", probe


def test_records_only_inside_window_with_per_site_occurrences(tmp_path):
    path, probe = run_probe(tmp_path, steps="1-2")
    recs = lines(path)
    assert recs[0]["event"] == "header" and recs[0]["schema"] == "forensics.sites" and recs[0]["version"] == 1
    assert recs[0]["rank"] == 0 and recs[0]["pid"] == os.getpid() and recs[0]["site_filter"] is None
    sites = [r for r in recs if r["event"] == "site"]
    assert {r["iteration"] for r in sites} == {1, 2}  # steps 0 and 3 are outside the window
    assert [r["iteration"] for r in recs if r["event"] == "iteration"] == [1, 2]
    labels = [r["label"] for r in sites]
    assert labels == [
        "gemm:TN:acc0:grad0#1", "gemm:NN:acc0:grad0#1", "gemm:NT:acc0:grad0#1", "gemm:NT:acc1:grad0#1",
        "gemm:TN:acc0:grad0#2", "gemm:NN:acc0:grad0#2", "gemm:NT:acc0:grad0#2", "gemm:NT:acc1:grad0#2",
    ]
    assert [r["external_id"] for r in sites] == list(range(1, 9))
    assert recs[-1] == {"event": "summary", "records": 8, "dropped": 0,
                        "occurrences": {"gemm:TN:acc0:grad0": 2, "gemm:NN:acc0:grad0": 2,
                                        "gemm:NT:acc0:grad0": 2, "gemm:NT:acc1:grad0": 2}}
    assert probe.mode is None  # the dispatch mode is gone after the window


def test_digests_are_hash_tensor_values_in_cublas_order(tmp_path):
    path, _ = run_probe(tmp_path, steps="1")
    g = torch.Generator().manual_seed(0)
    x, w, _dy = torch.randn(8, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(8, 6, generator=g)
    fprop = next(r for r in lines(path) if r.get("label") == "gemm:TN:acc0:grad0#1")
    h = lambda t: torch.hash_tensor(t).item() % (1 << 64)  # noqa: E731
    assert [d["hash"] for d in fprop["in"]] == [h(w.t()), h(x)]  # cuBLAS A = W^T, B = x
    # hash_tensor XORs the bits: W and W^T get the same hash; the order-sensitive ohash tells them apart
    from probes.digests import ordered_device

    o = lambda t: int(ordered_device(t).item()) % (1 << 64)  # noqa: E731
    assert fprop["in"][0] == {"shape": [4, 6], "dtype": "float32", "numel": 24, "hash": h(w), "ohash": o(w.t())}
    assert o(w.t()) != o(w) and h(w.t()) == h(w)
    assert fprop["out"][0]["ohash"] == o(torch.mm(x, w.t()))
    assert fprop["out"][0]["hash"] == h(torch.mm(x, w.t())) and fprop["out"][0]["shape"] == [8, 6]
    assert fprop["op"] == "aten.mm.default" and fprop["meta"]["layout"] == "TN"
    assert (fprop["meta"]["m"], fprop["meta"]["n"], fprop["meta"]["k"]) == (6, 8, 4)


def test_accumulating_gemm_digests_c_before_the_call(tmp_path):
    path, _ = run_probe(tmp_path, steps="1")
    acc = next(r for r in lines(path) if r.get("site") == "gemm:NT:acc1:grad0")
    g = torch.Generator().manual_seed(0)
    x, _w, dy = torch.randn(8, 4, generator=g), torch.randn(6, 4, generator=g), torch.randn(8, 6, generator=g)
    before = torch.zeros(6, 4).addmm_(dy.t(), x)  # main_grad after step 0 (outside the window)
    after = before.clone().addmm_(dy.t(), x)
    assert acc["in"][2]["hash"] == torch.hash_tensor(before).item() % (1 << 64)
    assert acc["out"][0]["hash"] == torch.hash_tensor(after).item() % (1 << 64)
    assert acc["meta"]["accumulate"] is True and acc["meta"]["beta"] == 1.0


def test_two_identical_runs_give_identical_digests(tmp_path):
    p1, _ = run_probe(tmp_path / "a1")
    p2, _ = run_probe(tmp_path / "a2")
    strip = lambda r: (r["label"], json.dumps(r["in"]), json.dumps(r["out"]))  # noqa: E731
    s1 = [strip(r) for r in lines(p1) if r["event"] == "site"]
    s2 = [strip(r) for r in lines(p2) if r["event"] == "site"]
    assert s1 == s2 and len(s1) == 8


def test_site_filter_keeps_counting_other_occurrences(tmp_path):
    path, _ = run_probe(tmp_path, site="gemm:NT:acc0:grad0#2")
    sites = [r for r in lines(path) if r["event"] == "site"]
    assert [r["label"] for r in sites] == ["gemm:NT:acc0:grad0#2"]
    assert lines(path)[0]["site_filter"] == "gemm:NT:acc0:grad0#2"


def test_instrument_passes_record_ranges_without_digests(tmp_path):
    path, _ = run_probe(tmp_path, extra={"digests": False})
    rec = next(r for r in lines(path) if r["event"] == "site")
    assert all("hash" not in d and d["hash_error"] == "digests off in this pass" for d in rec["in"] + rec["out"])
    assert rec["in"][0]["shape"] == [4, 6] and rec["external_id"] == 1


def test_record_budget_counts_dropped(tmp_path):
    path, probe = run_probe(tmp_path, max_site_records=3)
    recs = lines(path)
    assert sum(r["event"] == "site" for r in recs) == 3
    assert recs[-1]["dropped"] == 5 and recs[-1]["records"] == 3


def test_window_that_never_opens_writes_nothing(tmp_path):
    path, _ = run_probe(tmp_path, steps="10-12")
    assert not path.exists()


def test_launcher_in_a_step0_window_writes_nothing(tmp_path):
    """A process that enters a window containing step 0 but never steps nor runs a GEMM (torchrun's agent)."""
    path, _ = run_probe(tmp_path, steps="0-2", n_steps=0)
    assert not path.exists()


def test_existing_file_is_never_overwritten(tmp_path):
    (tmp_path / "rank0").mkdir()
    (tmp_path / "rank0" / "sites.jsonl").write_text("precious\n")
    run_probe(tmp_path)
    assert (tmp_path / "rank0" / "sites.jsonl").read_text() == "precious\n"
    assert (tmp_path / "rank0" / f"sites.{os.getpid()}.jsonl").exists()
    f = open_exclusive(tmp_path / "rank0", "sites", ".jsonl")  # a third writer gets its own name too
    f.close()
    assert Path(f.name).name.startswith(f"sites.{os.getpid()}-")


def test_parser_reads_what_the_probe_writes(tmp_path):
    from parsers import sites_jsonl

    path, _ = run_probe(tmp_path)
    df = sites_jsonl.read_sites(path)
    assert len(df) == 8 and set(df["rank"]) == {0} and df["in_key"].notna().all()
    assert list(df["label"])[:2] == ["gemm:TN:acc0:grad0#1", "gemm:NN:acc0:grad0#1"]


def _bootstrap(tmp_path: Path, **kw) -> dict[str, str]:
    cfg = ProbeConfig(out_dir=str(tmp_path / "arm"), **kw)
    cfg.write(tmp_path / "probe.json")
    env = bootstrap_env(tmp_path / "probe.json")
    env.pop("RANK", None)
    return env


def test_filtered_rank_costs_nothing(tmp_path):
    """ranks="0" and RANK=3: activation stops at the filter: no folder, no torch import."""
    env = dict(_bootstrap(tmp_path, steps="1-2", ranks="0"), RANK="3")
    code = "import sys; print('torch' in sys.modules, 'probes.sites' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.split() == ["False", "False"], r.stderr
    assert not (tmp_path / "arm" / "rank3").exists()
    code = "import sys, probes, probes.sites, probes.cupti, probes.gemm_naming; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.stdout.strip() == "False"  # importing the probes imports no torch, installs nothing


SLEEPER = """
import sys, time, torch
w = torch.nn.Parameter(torch.randn(4, 4))
opt = torch.optim.SGD([w], lr=0.1)
for step in range(2):
    (torch.mm(torch.randn(3, 4), w.t()) ** 2).sum().backward()
    opt.step()
print("in-window", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_sigterm_flushes_the_window(tmp_path):
    env = _bootstrap(tmp_path, steps="1-3")
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    p = subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "in-window"
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == -signal.SIGTERM  # default SIGTERM behaviour kept after the flush
    recs = lines(tmp_path / "arm" / "rank0" / "sites.jsonl")
    assert recs[-1]["event"] == "summary" and recs[-1]["records"] == 2  # step 1: fprop TN, wgrad NT (the input needs no dgrad)
    assert {x["iteration"] for x in recs if x["event"] == "site"} == {1}


def test_transformer_engine_entry_point_is_wrapped_and_named_from_te_args(tmp_path, monkeypatch):
    """SYNTHETIC stand-in for TE's ``general_gemm`` (TE is not installed here): the signature
    follows transformer_engine.pytorch.cpp_extensions.general_gemm (A, B, workspace, ...,
    accumulate, layout, out, ..., grad); it computes D = op(B) op(A) the way cuBLAS would."""
    import types

    def general_gemm(A, B, workspace, out_dtype=None, quantization_params=None, gelu=False, gelu_in=None,
                     accumulate=False, layout="TN", out=None, bias=None, use_split_accumulator=False, grad=False):
        a = A.t() if layout[0] == "T" else A
        b = B.t() if layout[1] == "T" else B
        d = torch.mm(b, a)
        if bias is not None and not grad:
            d = d + bias
        if accumulate and out is not None:
            out.add_(d)
            return out
        return d

    ext = types.ModuleType("transformer_engine.pytorch.cpp_extensions")
    ext.general_gemm = general_gemm
    linear = types.ModuleType("transformer_engine.pytorch.module.linear")
    linear.general_gemm = general_gemm  # TE modules import the function by name
    monkeypatch.setitem(sys.modules, ext.__name__, ext)
    monkeypatch.setitem(sys.modules, linear.__name__, linear)
    cfg = ProbeConfig(out_dir=str(tmp_path), steps="0")
    window = StepWindow(parse_steps("0"))
    probe = install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    assert ext.general_gemm is not general_gemm and linear.general_gemm is ext.general_gemm
    x, dy = torch.randn(8, 4), torch.randn(8, 6)
    main_grad = torch.zeros(6, 4)
    assert torch.equal(linear.general_gemm(x, dy, None, layout="NT", grad=True), dy.t() @ x)  # wgrad
    linear.general_gemm(x, dy, None, layout="NT", grad=True, accumulate=True, out=main_grad)
    w, bias = torch.randn(6, 4), torch.randn(6)
    linear.general_gemm(w, x, None, layout="TN", bias=bias)  # fprop with a bias: an input too
    window.advance()
    probe.close()
    recs = [r for r in lines(tmp_path / "rank0" / "sites.jsonl") if r["event"] == "site"]
    labels = [r["label"] for r in recs]
    # the aten mm inside the stand-in is named too (a real TE GEMM would not reach aten)
    assert "gemm:NT:acc0:grad1#1" in labels and "gemm:NT:acc1:grad1#1" in labels
    te = [r for r in recs if r["op"] == "transformer_engine.general_gemm"]
    assert [r["site"] for r in te] == ["gemm:NT:acc0:grad1", "gemm:NT:acc1:grad1", "gemm:TN:acc0:grad0"]
    assert len(te[1]["in"]) == 3 and te[1]["meta"]["te"] is True
    assert [i["shape"] for i in te[2]["in"]] == [[6, 4], [8, 4], [6]]  # A, B, then the bias fprop adds


def test_ordered_digest_is_chunked_with_the_same_value(monkeypatch):
    """The order-sensitive digest is computed in bounded chunks (a probe's memory stays small on big
    tensors); the chunk size never changes the value, and any permutation changes it."""
    from probes import digests

    x = torch.randn(10_007)
    whole = digests.ordered_device(x).item()
    monkeypatch.setattr(digests, "CHUNK", 1000)
    assert digests.ordered_device(x).item() == whole
    assert digests.ordered_device(x[torch.randperm(x.numel())]).item() != whole
    assert torch.hash_tensor(x[torch.randperm(x.numel())]).item() == torch.hash_tensor(x).item()


def test_a_site_with_several_outputs_records_them_all(tmp_path):
    """Layer norm's backward returns grad_input, grad_weight and grad_bias; with more threads only
    the last two change (their reductions split differently). The probe recorded the first output
    only, so `forensics knob OMP_NUM_THREADS` said "bits unchanged" at a site whose bits changed."""
    site = "aten.native_layer_norm_backward.default"
    cfg = ProbeConfig(out_dir=str(tmp_path), site=site, steps="0")
    window = StepWindow(parse_steps("0"))
    probe = install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    ln = torch.nn.LayerNorm(16)
    x = torch.randn(8, 16, requires_grad=True)
    ln(x).pow(2).sum().backward()
    window.close()
    probe.close()
    rec = next(r for r in lines(tmp_path / "rank0" / "sites.jsonl") if r.get("event") == "site")
    assert rec["label"] == f"{site}#1"
    assert [o["shape"] for o in rec["out"]] == [[8, 16], [16], [16]]
    o = lambda t: int(__import__("probes.digests", fromlist=["x"]).ordered_device(t).item()) % (1 << 64)  # noqa: E731
    assert [d["ohash"] for d in rec["out"][1:]] == [o(ln.weight.grad), o(ln.bias.grad)]


def test_a_scaled_gemm_site_records_its_scales_as_inputs(tmp_path):
    """``torch._scaled_mm`` (FP8): the result depends on scale_a and scale_b too. The probe recorded
    A and B only, so two runs whose scales differed read as "inputs matched, output differs": an
    origin at the GEMM that was not one."""
    cfg = ProbeConfig(out_dir=str(tmp_path), steps="0")
    window = StepWindow(parse_steps("0"))
    probe = install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
    sa, sb = torch.tensor(0.5), torch.tensor(2.0)
    torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    window.close()
    probe.close()
    rec = next(r for r in lines(tmp_path / "rank0" / "sites.jsonl") if r.get("event") == "site")
    assert rec["op"] == "aten._scaled_mm.default"
    assert [i["shape"] for i in rec["in"]] == [[32, 16], [16, 32], [], []]  # cuBLAS A, B, then the two scales
    assert [i["dtype"] for i in rec["in"][2:]] == ["float32", "float32"]
