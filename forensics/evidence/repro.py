"""The standalone ``repro.py`` of an evidence bundle: one GEMM problem, run twice, digests compared.

:func:`gemm_problem` rebuilds the problem descriptor of one site occurrence from what was
captured (the cuBLASLt call when attributed, else the site's digests and layout letters);
:func:`render_repro` writes a script that needs torch only, sets the captured knobs as
environment variables *before* importing torch, draws random inputs of the captured shapes and
dtypes, runs the GEMM twice and compares the output digests. It runs on a CPU too and then says
that the device differs from the captured one (a CPU run cannot show a GPU kernel's behaviour).
"""
from __future__ import annotations

import json
import pprint
from dataclasses import asdict, dataclass, field
from typing import Any

from forensics import __version__, instruments
from forensics.core.ops import GEMM
from forensics.core.site import parse_site, split_label
from forensics.instruments.cublaslt import ALGO_COLUMNS

#: cuBLASLt type tokens -> torch dtype names.
LT_TO_TORCH = {"R_32F": "float32", "R_16F": "float16", "R_16BF": "bfloat16", "R_64F": "float64",
               "R_8F_E4M3": "float8_e4m3fn", "R_8F_E5M2": "float8_e5m2", "R_8I": "int8", "R_32I": "int32",
               # the CPU libraries' type names (oneMKL precision letters, oneDNN data types)
               "f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "c64": "complex64",
               "c128": "complex128", "s8": "int8", "u8": "uint8", "s32": "int32",
               # hipBLASLt/rocBLAS type names (HIP's R_* share the cuBLASLt tokens above); their 8-bit floats
               # are FNUZ or OCP by GPU, which the name does not say: left out
               "f32_r": "float32", "f64_r": "float64", "f16_r": "float16", "bf16_r": "bfloat16", "i8_r": "int8",
               "i32_r": "int32"}
ALGO_KEYS = ALGO_COLUMNS  # the cuBLASLt algo descriptor the repro records (forensics.instruments.cublaslt)
#: Instrument settings that never belong in a repro (they configure logging, not the computation).
NOT_KNOBS = ("CUBLASLT_LOG_", "CUBLAS_LOGINFO_DBG", "CUBLAS_LOGDEST_DBG", "NVTX_INJECTION", "FORENSICS_",
             "ONEDNN_VERBOSE", "DNNL_VERBOSE", "MKL_VERBOSE",
             "CUPTI_", "LD_LIBRARY_PATH", "LD_PRELOAD", "TORCHELASTIC_", "RANK", "LOCAL_RANK", "WORLD_SIZE",
             "LOCAL_WORLD_SIZE", "MASTER_", "HIPBLASLT_LOG_", "ROCBLAS_LAYER", "ROCBLAS_LOG_")


@dataclass
class GemmProblem:
    """cuBLAS column-major problem ``D(m x n) = op(A) op(B) [+ C]`` of one site occurrence."""

    label: str
    m: int
    n: int
    k: int
    transa: str  # "N" | "T"
    transb: str
    a_dtype: str  # torch dtype names
    b_dtype: str
    out_dtype: str
    accumulate: bool
    compute_type: str | None = None
    source: str = "site digests"  # or "cuBLASLt log"
    captured_device: str | None = None
    captured_in: list[dict[str, Any]] = field(default_factory=list)
    captured_out: list[dict[str, Any]] = field(default_factory=list)
    algo: dict[str, Any] = field(default_factory=dict)
    threads: int | None = None  # the intra-op thread count the arm ran with (repro_threads)
    threads_source: str | None = None
    #: The library's own replay of the call (a hipBLASLt log's ``hipblaslt-bench ... --solution_index N``
    #: line, HIPBLASLT_LOG_MASK=32; rocBLAS's rocblas-bench line): the site's repro on AMD.
    bench: str | None = None

    @property
    def a_shape(self) -> list[int]:
        """Row-major (torch) shape of A as stored: (k, m) for N, (m, k) for T."""
        return [self.k, self.m] if self.transa == "N" else [self.m, self.k]

    @property
    def b_shape(self) -> list[int]:
        return [self.n, self.k] if self.transb == "N" else [self.k, self.n]

    @property
    def out_shape(self) -> list[int]:
        return [self.n, self.m]


def _dtype(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    text = str(value)
    return LT_TO_TORCH.get(text, text if not text.startswith("R_") else None)


def gemm_problem(label: str, site_row: dict[str, Any], call: dict[str, Any] | None = None,
                 device: str | None = None) -> GemmProblem | None:
    """The problem descriptor of a GEMM occurrence; None for a site that is not a GEMM."""
    site_text, _ = split_label(label)
    site = parse_site(site_text)
    ins, outs = list(site_row.get("in_digests") or []), list(site_row.get("out_digests") or [])
    acc = bool(site.acc) if site.acc is not None else False
    gemm_op = site.is_gemm or (site.is_aten and site.name.split(".")[1] in GEMM)
    if not gemm_op:
        call = None  # a library GEMM under another op (the thnn convolution's SGEMMs) is not the site's problem
    if call is not None and call.get("m") is not None and _dtype(call.get("a_type")):
        inst = instruments.get(str(call.get("instrument")))
        source = inst.label if inst is not None and call.get("instrument") != "cublaslt" else "cuBLASLt log"
        return GemmProblem(label, int(call["m"]), int(call["n"]), int(call["k"]), str(call.get("transa") or "N"),
                           str(call.get("transb") or "N"), _dtype(call.get("a_type")),
                           _dtype(call.get("b_type")) or _dtype(call.get("a_type")),
                           _dtype(call.get("d_type")) or _dtype(call.get("c_type")) or _dtype(call.get("a_type")),
                           acc or str(call.get("beta")) == "1", _str(call.get("compute_type")), source,
                           device, ins, outs, {k: _str(call.get(k)) for k in ALGO_KEYS if _str(call.get(k)) is not None},
                           bench=_str(call.get("bench")))
    if not site.is_gemm or not outs or len(outs[0].get("shape") or []) != 2 or len(ins) < 2:
        return None
    n, m = (int(x) for x in outs[0]["shape"])
    transa, transb = site.layout[0], site.layout[1]
    a = [int(x) for x in ins[0].get("shape") or []]
    k = a[0] if transa == "N" else (a[1] if len(a) == 2 else None)
    if k is None:
        return None
    return GemmProblem(label, m, n, k, transa, transb, str(ins[0].get("dtype")), str(ins[1].get("dtype")),
                       str(outs[0].get("dtype")), acc, None, "site digests", device, ins, outs)


@dataclass
class ConvProblem:
    """An ``aten.convolution`` occurrence: operand shapes, dtypes and strides as the site recorded
    them; stride, padding and dilation are not recorded and are solved from the shapes."""

    label: str
    input: dict[str, Any]
    weight: dict[str, Any]
    bias: dict[str, Any] | None
    out_shape: list[int]
    stride: list[int]
    padding: list[int]
    dilation: list[int]
    groups: int
    assumed: str
    captured_device: str | None = None
    threads: int | None = None
    threads_source: str | None = None


def _solve_conv(size: int, kernel: int, out: int) -> tuple[int, int, int] | None:
    """(stride, padding, dilation), the smallest, for which a convolution maps ``size`` to ``out``."""
    for stride in range(1, max(size, 1) + 1):
        for dilation in range(1, 4):
            for padding in range(0, kernel * dilation + 1):
                if (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1 == out:
                    return stride, padding, dilation
    return None


def conv_problem(label: str, site_row: dict[str, Any], device: str | None = None) -> ConvProblem | None:
    """The problem of an ``aten.convolution`` occurrence (input, weight, bias as recorded); None when
    the site is not a convolution or its shapes do not say enough (a transposed one is not solved)."""
    site_text, _ = split_label(label)
    if not site_text.startswith(("aten.convolution", "aten.conv")):
        return None
    ins, outs = list(site_row.get("in_digests") or []), list(site_row.get("out_digests") or [])
    meta = site_row.get("meta") if isinstance(site_row.get("meta"), dict) else {}
    ops = [o for o in (meta.get("operands") or []) if isinstance(o, dict)]
    shapes = [list(d.get("shape") or []) for d in ins]
    if len(shapes) < 2 or not outs:
        return None
    x, w, out = shapes[0], shapes[1], [int(v) for v in outs[0].get("shape") or []]
    nd = len(x) - 2
    if nd < 1 or len(w) != len(x) or len(out) != len(x) or not w[1] or x[1] % w[1]:
        return None
    solved = [_solve_conv(int(x[2 + i]), int(w[2 + i]), int(out[2 + i])) for i in range(nd)]
    if any(v is None for v in solved) or out[1] != w[0]:
        return None  # transposed, or shapes no plain convolution gives

    def operand(i: int) -> dict[str, Any]:
        d = {"shape": shapes[i], "dtype": str(ins[i].get("dtype") or "float32")}
        if i < len(ops) and ops[i].get("strides"):
            d["strides"] = list(ops[i]["strides"])
        return d

    bias = operand(2) if len(shapes) > 2 and len(shapes[2]) == 1 else None
    return ConvProblem(label, operand(0), operand(1), bias, out, [v[0] for v in solved], [v[1] for v in solved],
                       [v[2] for v in solved], int(x[1]) // int(w[1]),
                       "stride, padding and dilation are not recorded at the site: the smallest that give the "
                       "captured output shape; groups from the channel counts", device)


def repro_threads(calls: list[dict[str, Any]], knobs: dict[str, str]) -> tuple[int | None, str | None]:
    """The intra-op thread count the arm ran the occurrence with: oneMKL's ``NThr`` on its calls
    (what the library used), else the arm's ``OMP_NUM_THREADS``; (None, None) when neither says."""
    nthr = {int(c["nthr"]) for c in calls if str(c.get("instrument")) == "mkl" and _str(c.get("nthr")) is not None}
    if len(nthr) == 1:
        return nthr.pop(), "oneMKL verbose log (NThr)"
    omp = knobs.get("OMP_NUM_THREADS", "")
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "the arm's OMP_NUM_THREADS"
    return None, None


def _str(v: Any) -> str | None:
    if v is None or (isinstance(v, float) and v != v) or str(v) in ("<NA>", "nan"):
        return None
    return str(v)


def repro_knobs(env: dict[str, str]) -> dict[str, str]:
    """The knobs a repro sets: determinism-relevant variables, no instrument settings, no secrets."""
    from forensics.core.environment import REDACTED, is_secret_name, relevant_env  # noqa: PLC0415

    kept = relevant_env(env)
    return {k: v for k, v in kept.items()
            if not k.startswith(NOT_KNOBS) and not is_secret_name(k) and REDACTED not in v}


def render_repro(problem: GemmProblem | ConvProblem | None, knobs: dict[str, str], arm: str, capture_name: str,
                 site_label: str, calls_seen: str | None = None) -> str:
    """Source of the standalone repro script (torch only).

    ``calls_seen``: the library calls the capture attributed to a site that is not a GEMM (what the
    report's descriptor table shows): named, so that "no problem descriptor" is never said of them."""
    if problem is None and calls_seen:
        return _NOT_GEMM.format(label=site_label, version=__version__, calls=calls_seen.replace('"', "'"))
    if problem is None:
        return _NO_PROBLEM.format(label=site_label, version=__version__)
    desc = asdict(problem)
    threads = (pprint.pformat(problem.threads), pprint.pformat(problem.threads_source))
    if isinstance(problem, ConvProblem):
        return (_PRELUDE + _CONV_BODY + _RUN).format(
            digest=_DIGEST,
            calls=(calls_seen or "none attributed").replace('"', "'"), label=problem.label, version=__version__, capture=capture_name, arm=arm, threads=threads[0],
            threads_source=threads[1], knobs=pprint.pformat(dict(sorted(knobs.items())), width=100),
            problem=pprint.pformat(json.loads(json.dumps(desc, default=str)), sort_dicts=False, width=110))
    desc.update(a_shape=problem.a_shape, b_shape=problem.b_shape, out_shape=problem.out_shape)
    return _TEMPLATE.format(
        digest=_DIGEST,
        label=problem.label, version=__version__, capture=capture_name, arm=arm, source=problem.source,
        knobs=pprint.pformat(dict(sorted(knobs.items())), width=100), threads=threads[0],
        threads_source=threads[1],
        problem=pprint.pformat(json.loads(json.dumps(desc, default=str)), sort_dicts=False, width=110),
    )


#: the output digest both repro scripts define (no braces: it goes into the templates by ``format``)
_DIGEST = '''def digest(t):
    """sha256 of the output's bytes in row-major order: equal digests mean equal bits, in order
    (torch.hash_tensor, an XOR of the bits, cannot show that: a permutation leaves it unchanged)."""
    raw = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8)
    try:
        data = raw.numpy().tobytes()
    except Exception:  # noqa: BLE001 - torch without numpy
        data = bytes(raw.tolist())
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]
'''

_NO_PROBLEM = '''#!/usr/bin/env python3
"""repro.py for {label} (forensics {version}).

This site is not a GEMM with a captured problem descriptor (no library GEMM call attributed to it
as its own problem, no GEMM layout or GEMM op in its name), so no standalone reproduction could be
generated. See report.md.
"""
import sys

print("repro: no problem descriptor was captured for {label}; nothing to run")
sys.exit(2)
'''

_NOT_GEMM = '''#!/usr/bin/env python3
"""repro.py for {label} (forensics {version}).

This site is not a GEMM: the problem descriptors report.md shows are the library calls the op issued
({calls}), not the op's own GEMM problem, and repro.py reproduces GEMM sites only. Rerun the op
itself with the shapes of the site records (raw/) to reproduce it. See report.md.
"""
import sys

print("repro: {label} is not a GEMM site; the library calls captured under it ({calls}) are in report.md; "
      "repro.py reproduces GEMM sites only: nothing to run")
sys.exit(2)
'''

_TEMPLATE = '''#!/usr/bin/env python3
"""Standalone repro of {label} (forensics {version}; capture {capture}, arm {arm}).

Rebuilds the captured GEMM problem (source: {source}): shapes, dtypes, layouts/strides, output
dtype and accumulate flag, with the arm's knobs set as environment variables BEFORE torch is
imported. Inputs are random with the captured digests' shapes and dtypes (not the captured
values), so compare the two runs with each other, not with the captured digests.

    python repro.py [--device cuda|cpu] [--runs N] [--seed S] [--bench]

When the library's log printed its own replay of the call (hipBLASLt's hipblaslt-bench line with
the solution index the run chose, rocBLAS's rocblas-bench line), it is PROBLEM["bench"], printed
here; --bench runs it (the tool must be on PATH: a ROCm machine) instead of the torch GEMM.

Exit status: 0 when every run gave bit-identical output, 1 when the runs differ.
Needs torch only. On a CPU (or another GPU) it runs and says the device differs from the
captured one: that run cannot show the captured kernel's behaviour.
"""
import os

KNOBS = {knobs}
THREADS = {threads}  # intra-op threads the arm ran with (from {threads_source})
for _name, _value in KNOBS.items():  # before torch: cuBLAS reads these at handle creation
    os.environ[_name] = _value
if THREADS and "OMP_NUM_THREADS" not in KNOBS:  # libgomp reads it at import
    os.environ["OMP_NUM_THREADS"] = str(THREADS)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

if THREADS:  # the thread count splits the reduction: a repro at another count computes another sum
    torch.set_num_threads(THREADS)
PROBLEM = {problem}


{digest}

def dtype(name):
    return getattr(torch, name)


def operands(device, seed):
    """A and B as stored (captured shapes), viewed as torch's (k, m) and (n, k) operands."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    a = torch.randn(PROBLEM["a_shape"], generator=gen).to(dtype(PROBLEM["a_dtype"])).to(device)
    b = torch.randn(PROBLEM["b_shape"], generator=gen).to(dtype(PROBLEM["b_dtype"])).to(device)
    c = torch.randn(PROBLEM["out_shape"], generator=gen).to(dtype(PROBLEM["out_dtype"])).to(device)
    am = a if PROBLEM["transa"] == "N" else a.t()  # (k, m)
    bm = b if PROBLEM["transb"] == "N" else b.t()  # (n, k)
    return am, bm, c


def gemm(am, bm, c):
    """D (n, m) = B @ A (+ C): cuBLAS sees the captured column-major problem and layout letters."""
    out = dtype(PROBLEM["out_dtype"])
    notes = []
    if am.dtype == out:
        d = c.clone().addmm_(bm, am) if PROBLEM["accumulate"] else torch.matmul(bm, am)
        return d, notes
    try:  # mixed precision output (e.g. bf16 x bf16 -> fp32): torch >= 2.8 on CUDA
        d = torch.mm(bm, am, out_dtype=out)
    except Exception:  # noqa: BLE001
        d = torch.matmul(bm.to(out), am.to(out))
        notes.append("output dtype %s emulated by upcasting the inputs (not the captured kernel path)"
                     % PROBLEM["out_dtype"])
    if PROBLEM["accumulate"]:
        d = c + d
        notes.append("accumulate done as a separate add (not the fused beta=1 epilogue)")
    return d, notes


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--bench", action="store_true", help="run the library's own bench line (PROBLEM['bench'])")
    args = p.parse_args()
    bench = PROBLEM.get("bench")
    if bench:
        print("library replay (the log's bench line): " + bench)
    if args.bench:
        import shlex  # noqa: PLC0415
        import shutil  # noqa: PLC0415
        import subprocess  # noqa: PLC0415

        argv = shlex.split(bench or "")
        if not argv or shutil.which(argv[0]) is None:
            print("repro: " + ("no bench line was captured for this site" if not argv
                               else "%s not found on PATH: run the bench line on a machine with the library" % argv[0]))
            return 2
        return subprocess.call(argv)
    device = torch.device(args.device)
    here = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    captured = PROBLEM.get("captured_device")
    print("problem: %s m=%d n=%d k=%d trans=%s%s %s x %s -> %s accumulate=%s (from %s)" % (
        PROBLEM["label"], PROBLEM["m"], PROBLEM["n"], PROBLEM["k"], PROBLEM["transa"], PROBLEM["transb"],
        PROBLEM["a_dtype"], PROBLEM["b_dtype"], PROBLEM["out_dtype"], PROBLEM["accumulate"], PROBLEM["source"]))
    print("knobs: " + (" ".join("%s=%s" % kv for kv in sorted(KNOBS.items())) or "none"))
    print("threads: %s" % ("%d (captured: %s)" % (torch.get_num_threads(), {threads_source}) if THREADS
                           else "%d (the captured count is not recorded: this machine's default)"
                           % torch.get_num_threads()))
    if captured is None:
        print("device: %s; the captured device is not recorded: compare devices before reading the result" % here)
    elif here != captured:
        print("device: %s; captured on %s: the device differs, this run cannot reproduce the captured kernel"
              % (here, captured))
    else:
        print("device: %s (same as captured)" % here)
    shapes = [d.get("shape") for d in PROBLEM.get("captured_in") or []]
    if shapes and [PROBLEM["a_shape"], PROBLEM["b_shape"]] != shapes[:2]:
        print("note: captured input shapes %s; this problem stores A %s and B %s" % (
            shapes, PROBLEM["a_shape"], PROBLEM["b_shape"]))
    am, bm, c = operands(device, args.seed)
    digests = []
    for i in range(args.runs):
        d, notes = gemm(am, bm, c)
        if device.type == "cuda":
            torch.cuda.synchronize()
        digests.append(digest(d))
        print("run %d: out %s %s digest %s" % (i + 1, list(d.shape), str(d.dtype).replace("torch.", ""), digests[-1]))
    for note in notes:
        print("note: " + note)
    same = len(set(digests)) == 1
    print("result: %s across %d runs" % ("IDENTICAL" if same else "DIFFERENT", args.runs))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
'''


_PRELUDE = '''#!/usr/bin/env python3
"""Standalone repro of {label} (forensics {version}; capture {capture}, arm {arm}).

Reruns the captured convolution (aten.convolution.default) with the operands' shapes, dtypes and
strides the site recorded, with the arm's knobs set as environment variables BEFORE torch is
imported and the arm's intra-op thread count (which decides how ATen runs it: the thnn path's
oneMKL GEMMs or oneDNN's kernel, and how a reduction is split). Inputs are random with the
captured shapes (not the captured values), so compare the runs with each other. The library
calls the capture attributed to this occurrence ({calls}) are in report.md.

    python repro.py [--device cpu|cuda] [--runs N] [--seed S] [--threads T]

Exit status: 0 when every run gave bit-identical output, 1 when the runs differ.
"""
import os

KNOBS = {knobs}
THREADS = {threads}  # intra-op threads the arm ran with
THREADS_SOURCE = {threads_source}
for _name, _value in KNOBS.items():
    os.environ[_name] = _value
if THREADS and "OMP_NUM_THREADS" not in KNOBS:  # libgomp reads it at import
    os.environ["OMP_NUM_THREADS"] = str(THREADS)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402

PROBLEM = {problem}


{digest}

def tensor(spec, gen, device):
    """A random tensor of the captured shape and dtype, laid out with the captured strides."""
    t = torch.randn(spec["shape"], generator=gen).to(getattr(torch, spec["dtype"]))
    strides = spec.get("strides")
    if strides and list(t.stride()) != strides:
        t = torch.empty_strided(spec["shape"], strides, dtype=t.dtype).copy_(t)
    return t.to(device)
'''

_CONV_BODY = '''

def run_once(x, w, b):
    nd = len(PROBLEM["stride"])
    return torch.ops.aten.convolution.default(x, w, b, PROBLEM["stride"], PROBLEM["padding"], PROBLEM["dilation"],
                                              False, [0] * nd, PROBLEM["groups"])


def describe():
    return "%s input %s weight %s -> %s stride=%s padding=%s dilation=%s groups=%d (%s)" % (
        PROBLEM["label"], PROBLEM["input"]["shape"], PROBLEM["weight"]["shape"], PROBLEM["out_shape"],
        PROBLEM["stride"], PROBLEM["padding"], PROBLEM["dilation"], PROBLEM["groups"], PROBLEM["assumed"])


def operands(device, seed):
    gen = torch.Generator(device="cpu").manual_seed(seed)
    b = tensor(PROBLEM["bias"], gen, device) if PROBLEM["bias"] else None
    return tensor(PROBLEM["input"], gen, device), tensor(PROBLEM["weight"], gen, device), b
'''

_RUN = '''

def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=THREADS, help="intra-op threads (default: the captured count)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print("problem: " + describe())
    print("knobs: " + (" ".join("%s=%s" % kv for kv in sorted(KNOBS.items())) or "none"))
    if THREADS and args.threads == THREADS:
        print("threads: %d (captured: %s)" % (torch.get_num_threads(), THREADS_SOURCE))
    elif args.threads:
        print("threads: %d (--threads; captured %s)" % (torch.get_num_threads(), THREADS or "not recorded"))
    else:
        print("threads: %d (the captured count is not recorded: this machine's default)" % torch.get_num_threads())
    captured = PROBLEM.get("captured_device")
    here = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if captured is not None and captured != here:
        print("device: %s; captured on %s: the device differs" % (here, captured))
    else:
        print("device: %s" % here)
    x, w, b = operands(device, args.seed)
    digests = []
    for i in range(args.runs):
        d = run_once(x, w, b)
        digests.append(digest(d))
        print("run %d: out %s %s digest %s" % (i + 1, list(d.shape), str(d.dtype).replace("torch.", ""), digests[-1]))
    same = len(set(digests)) == 1
    print("result: %s across %d runs" % ("IDENTICAL" if same else "DIFFERENT", args.runs))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
'''
