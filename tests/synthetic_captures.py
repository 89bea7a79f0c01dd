"""SYNTHETIC capture directories for verdict/bundle tests (no GPU was involved in making them).

Every file follows a format seen in real output: ``sites.jsonl`` is the site-record format of
docs/parsers/sites-jsonl.md after a ``forensics.sites`` header line;
``cupti.jsonl`` is the docs/parsers/cupti-jsonl.md record shape (CONCURRENT_KERNEL / RUNTIME /
EXTERNAL_CORRELATION records); ``cublaslt.<pid>.log`` lines follow the ``[Trace]`` and ``[Api]``
grammar of the real lines in tests/data/cublaslt/real_lines.log. Kernel names are spelled like real cuBLAS
(``sm90_xmma_...``, unmangled) and CUTLASS/cuBLASLt (Itanium-mangled) symbols. The manifest says
``synthetic: true`` and a README.txt in the directory says so too. The values are made up.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.capture.directory import new_manifest, write_manifest

# Kernel symbols in the spelling real instruments report (cuBLAS sm90 kernels are extern "C" names).
SM90_BF16 = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SM90_BF16_F32OUT = "sm90_xmma_gemm_bf16bf16_f32f32_f32_nt_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SM90_BF16_SPLITK = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_on_kernel__5x_cublas"
CUTLASS_BF16 = "_ZN7cutlass7Kernel2I66cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_nt_align8EEvNT_6ParamsE"
SPLITK_REDUCE = "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EiffLb0ELb0EEEvNS_18cublasSplitKParamsIT2_EEPKT2_PKT3_PT3_"

_LT_TYPE = {"bfloat16": "R_16BF", "float32": "R_32F", "float16": "R_16F"}
DEFAULT_ALGO = {"algoId": 66, "tile": "MATMUL_TILE_128x128", "stages": "MATMUL_STAGES_64xAUTO",
                "customOption": 3, "clusterShape": "CLUSTER_SHAPE_1x1x1"}
VERSIONS = {"torch": "2.9.0+cu128", "cuda": "12.8", "cudnn": 91002, "cublas": "12.8.4.1", "driver": "570.124.06",
            "device": "NVIDIA H200", "sm_count": 132, "capability": "9.0", "transformer_engine": "2.4.0"}
PLANTED = {  # planted secrets: none of these values may survive into a bundle
    "HF_TOKEN": "hf_SyntheticPlantedToken0123456789abcd",
    "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
    "PIP_INDEX_URL": "https://builder:Pl4ntedPassw0rd@pypi.internal.example/simple",
}


@dataclass
class Gemm:
    """One GEMM site occurrence per iteration, with how each arm deviates from the baseline."""

    site: str  # gemm:<layout>:acc<a>:grad<g>
    m: int  # cuBLAS column-major problem
    n: int
    k: int
    a_type: str = "bfloat16"
    d_type: str = "bfloat16"
    kernel: str = SM90_BF16
    grid: tuple[int, int, int] = (8, 16, 1)
    block: tuple[int, int, int] = (384, 1, 1)
    algo: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_ALGO))
    extra_kernels: tuple[str, ...] = ()  # e.g. (SPLITK_REDUCE,) after the main kernel
    epilogue: str | None = None
    diverge_in: tuple[str, ...] = ()  # arms whose output bits differ from the baseline's
    inputs_differ_in: tuple[str, ...] = ()  # arms whose inputs (hence output) differ
    kernel_in: dict[str, str] = field(default_factory=dict)  # arm -> another kernel symbol
    grid_in: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    algo_in: dict[str, dict[str, Any]] = field(default_factory=dict)
    cupti: bool = True  # False: no CUPTI record for this occurrence (kernel unknown)
    cublaslt: bool = True
    no_hash_in: tuple[str, ...] = ()  # arms whose digest records hash_error instead of hash
    #: arms whose digests carry only the order-independent ``hash`` (an older probe, the campaign's recorder)
    xor_only_in: tuple[str, ...] = ()
    #: arms whose output is a permutation of the baseline's: same XOR ``hash``, different ``ohash``
    permuted_in: tuple[str, ...] = ()
    only_in: tuple[str, ...] | None = None  # arms where this occurrence happens (None: every arm)
    on_ranks: tuple[int, ...] | None = None  # ranks where the per-arm deviations apply (None: all)

    @property
    def layout(self) -> str:
        return self.site.split(":")[1]

    @property
    def acc(self) -> bool:
        return self.site.split(":")[2] == "acc1"


@dataclass
class Arm:
    name: str
    toggle: dict[str, str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    command: str | None = None
    world_size: int | None = None
    ranks: tuple[int, ...] = (0,)
    pass_of: str | None = None  # an instrument pass folder repeating this arm (manifest role: pass)


def _hash(*parts: Any) -> int:
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[:8], "little")


def _digest(shape: tuple[int, ...], dtype: str, h: int | None, ordered: bool = True, order: str = "") -> dict[str, Any]:
    """SYNTHETIC digest: ``hash`` as torch.hash_tensor's field, ``ohash`` (order-sensitive) unless
    ``ordered`` is False; ``order`` changes ``ohash`` alone (a permutation of the same elements)."""
    numel = 1
    for s in shape:
        numel *= s
    d: dict[str, Any] = {"shape": list(shape), "dtype": dtype, "numel": numel}
    if h is None:
        d["hash_error"] = "RuntimeError('hash_tensor not available')"
    else:
        d["hash"] = h
        if ordered:
            d["ohash"] = _hash(h, "ordered", order)
    return d


def operand_shapes(g: Gemm) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """Row-major (torch) shapes of A, B and D for a column-major cuBLAS problem."""
    a = (g.k, g.m) if g.layout[0] == "N" else (g.m, g.k)
    b = (g.n, g.k) if g.layout[1] == "N" else (g.k, g.n)
    return a, b, (g.n, g.m)


def _lt_lines(g: Gemm, arm: str, pid: int, ts: str, ptr: int) -> list[str]:
    ta, tb = g.layout
    a_rows, a_cols = (g.m, g.k) if ta == "N" else (g.k, g.m)
    b_rows, b_cols = (g.k, g.n) if tb == "N" else (g.n, g.k)
    at, dt = _LT_TYPE[g.a_type], _LT_TYPE[g.d_type]
    comp = "computeType=COMPUTE_32F scaleType=R_32F"
    comp += " transa=OP_T" if ta == "T" else ""
    comp += " transb=OP_T" if tb == "T" else ""
    comp += f" epilogue={g.epilogue}" if g.epilogue else ""
    algo = " ".join(f"{k}={v}" for k, v in g.algo_in.get(arm, g.algo).items())
    adesc = f"Adesc=[type={at} rows={a_rows} cols={a_cols} ld={a_rows}]"
    bdesc = f"Bdesc=[type={at} rows={b_rows} cols={b_cols} ld={b_rows}]"
    cdesc = f"Cdesc=[type={dt} rows={g.m} cols={g.n} ld={g.m}]"
    ddesc = f"Ddesc=[type={dt} rows={g.m} cols={g.n} ld={g.m}]"
    heur = (f"[{ts}][cublasLt][{pid}][Api][cublasLtMatmulAlgoGetHeuristic] {adesc} {bdesc} {cdesc} {ddesc} "
            f"preference=[maxWavesCount=0.0 maxWorkspaceSizeinBytes=33554432] computeDesc=[{comp}]")
    trace = (f"[{ts}][cublasLt][{pid}][Trace][cublasLtMatmul] A=0X{ptr:X} {adesc} B=0X{ptr + 0x100000:X} {bdesc} "
             f"C=0X{ptr + 0x200000:X} {cdesc} D=0X{ptr + 0x200000:X} {ddesc} "
             f"computeDesc=[{comp}] algo=[{algo}] workSpace=0X{ptr + 0x400000:X} workSpaceSizeInBytes=33554432 "
             f"beta={1 if g.acc else 0} outOfPlace=0 stream=0X0")
    return [heur, trace]


def build_capture(root: str | Path, gemms: list[Gemm], arms: list[Arm], iterations: tuple[int, ...] = (1,),
                  plant_secrets: bool = False, command: str = "torchrun --nproc-per-node 1 train.py --config tiny.yaml",
                  world_size: int = 1, env: dict[str, str] | None = None) -> Path:
    """Write a SYNTHETIC capture directory; the first arm is the baseline."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    base_env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "NVTE_ALLOW_NONDETERMINISTIC_ALGO": "1",
                "PYTHONHASHSEED": "0", **(env or {})}
    if plant_secrets:
        base_env.update(PLANTED)
    entries = []
    for arm in arms:
        arm_env = {**base_env, **arm.env, **(arm.toggle or {})}
        entry: dict[str, Any] = {"name": arm.name, "role": "arm", "env": arm_env}
        if arm.pass_of:
            entry.update(role="pass", of=arm.pass_of)
        if arm.toggle:
            entry["toggle"] = dict(arm.toggle)
        if arm.command:
            entry["command"] = arm.command
        if arm.world_size:
            entry["world_size"] = arm.world_size
        if arm.versions:
            entry["versions"] = dict(arm.versions)
        entries.append(entry)
        for rank in arm.ranks:
            _write_rank(root / arm.name / f"rank{rank}", gemms, arm, rank, iterations, arm_env, plant_secrets)
    manifest = new_manifest(synthetic=True, source="tests/synthetic_captures.py (SYNTHETIC)", command=command,
                            world_size=world_size, steps="-".join(map(str, iterations)), arms=entries)
    write_manifest(root, manifest)
    (root / "README.txt").write_text(
        "SYNTHETIC capture directory written by tests/synthetic_captures.py.\n"
        "No GPU, CUPTI or cuBLASLt produced these files: they imitate the real formats\n"
        "(campaign.py site records and CUPTI records, cuBLASLt [Trace]/[Api] lines) with made-up values.\n")
    return root


def _write_rank(d: Path, gemms: list[Gemm], arm: Arm, rank: int, iterations: tuple[int, ...],
                env: dict[str, str], plant_secrets: bool) -> None:
    d.mkdir(parents=True, exist_ok=True)
    pid = 41000 + 17 * rank + 101 * len(arm.name) + sum(map(ord, arm.name))
    sites = [{"event": "header", "schema": "forensics.sites", "version": 1, "arm": arm.name, "rank": rank,
              "synthetic": True, "pid": pid}]
    if plant_secrets:
        sites[0]["argv"] = ["train.py", "--data-url", PLANTED["PIP_INDEX_URL"]]
    cupti: list[dict[str, Any]] = []
    lt: list[str] = []
    seen: dict[str, int] = {}
    ext_id, corr, t = 0, 900, 1_700_000_000_000_000_000
    for it in iterations:
        sites.append({"event": "iteration", "arm": arm.name, "iteration": it, "t_ns": t})
        for g in gemms:
            if g.only_in is not None and arm.name not in g.only_in:
                continue
            name = arm.name if g.on_ranks is None or rank in g.on_ranks else "<baseline>"
            seen[g.site] = seen.get(g.site, 0) + 1
            label = f"{g.site}#{seen[g.site]}"
            ext_id += 1
            a_shape, b_shape, d_shape = operand_shapes(g)
            in_variant = name if name in g.inputs_differ_in else "same"
            out_variant = name if name in g.diverge_in or name in g.inputs_differ_in else "same"
            hashed = name not in g.no_hash_in
            o = name not in g.xor_only_in
            perm = name if name in g.permuted_in else ""
            ins = [_digest(a_shape, g.a_type, _hash(rank, label, "A", in_variant) if hashed else None, o),
                   _digest(b_shape, g.a_type, _hash(rank, label, "B", in_variant) if hashed else None, o)]
            if g.acc:
                ins.append(_digest(d_shape, g.d_type, _hash(rank, label, "C", in_variant) if hashed else None, o))
            out = [_digest(d_shape, g.d_type, _hash(rank, label, "D", out_variant) if hashed else None, o, perm)]
            kernel = g.kernel_in.get(name, g.kernel)
            grid = g.grid_in.get(name, g.grid)
            for sym in (kernel, *g.extra_kernels):
                corr += 1
                t += 20_000
                if g.cupti:
                    cupti.append({"cbid": 211, "correlation_id": corr, "end": t + 4_000, "kind": 5,
                                  "process_id": pid, "return_value": 0, "start": t, "thread_id": 140_000_000 + rank,
                                  "kind_name": "RUNTIME", "api_name": "cudaLaunchKernel_v7000"})
                    cupti.append({"correlation_id": corr, "external_id": ext_id, "external_kind": 3, "kind": 39,
                                  "kind_name": "EXTERNAL_CORRELATION"})
                    is_reduce = sym == SPLITK_REDUCE
                    gx, gy, gz = (grid[0] * grid[1], 1, 1) if is_reduce else grid
                    bx, by, bz = (256, 1, 1) if is_reduce else g.block
                    cupti.append({"block_x": bx, "block_y": by, "block_z": bz, "channel_id": 3, "channel_type": 1,
                                  "cluster_x": 1, "cluster_y": 1, "cluster_z": 1, "completed": t + 60_000,
                                  "context_id": 1, "correlation_id": corr, "device_id": 0,
                                  "dynamic_shared_memory": 0 if is_reduce else 213_000, "end": t + 58_000,
                                  "graph_id": 0, "graph_node_id": 0, "grid_id": corr - 600, "grid_x": gx,
                                  "grid_y": gy, "grid_z": gz, "kind": 10, "launch_type": 0,
                                  "local_memory_per_thread": 0, "local_memory_total": 0, "name": sym,
                                  "queued": t + 1_000, "registers_per_thread": 32 if is_reduce else 168,
                                  "shared_memory_config": 0, "shared_memory_executed": 0 if is_reduce else 233_472,
                                  "start": t + 9_000, "static_shared_memory": 0, "stream_id": 7,
                                  "submitted": t + 2_000, "kind_name": "CONCURRENT_KERNEL"})
            if g.cublaslt:
                ts = "2026-11-29 20:40:%02d" % (seen[g.site] % 60)
                lt.extend(_lt_lines(g, name, pid, ts, 0x7F3A_0000_0000 + ext_id * 0x1000_0000))
            sites.append({"event": "site", "arm": arm.name, "iteration": it, "site": g.site,
                          "occurrence": seen[g.site], "label": label, "external_id": ext_id, "in": ins, "out": out})
    (d / "sites.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sites))
    if cupti:
        (d / "cupti.jsonl").write_text("".join(json.dumps(r) + "\n" for r in cupti))
    if lt:
        (d / f"cublaslt.{pid}.log").write_text("\n".join(lt) + "\n")
    environment = {"synthetic": True, "python": "3.12.3", **VERSIONS, **arm.versions, "cuda_available": True,
                   "env": env}
    (d / "environment.json").write_text(json.dumps(environment, indent=1))


# --------------------------------------------------------------------------- ready-made scenarios
def wgrad_scenario() -> list[Gemm]:
    """The worked example's shape: fprop/dgrad bf16 CLEAN, the fp32-output wgrad DIVERGENT.

    Every input is bf16 and every other axis has both clean and divergent instances, so the
    output dtype is the only axis that separates clean from divergent.
    """
    return [
        Gemm("gemm:TN:acc0:grad0", 256, 512, 256),  # fprop
        Gemm("gemm:NN:acc0:grad1", 256, 512, 256),  # dgrad
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512),  # wgrad, bf16 out: clean
        Gemm("gemm:NT:acc0:grad1", 256, 256, 512, d_type="float32", kernel=SM90_BF16_F32OUT,
             diverge_in=("a2",)),  # wgrad, fp32 out: divergent, same kernel
        Gemm("gemm:NT:acc1:grad1", 256, 256, 512, d_type="float32", kernel=SM90_BF16_F32OUT,
             diverge_in=("a2",)),  # accumulate wgrad, fp32 out: divergent
        Gemm("gemm:NN:acc1:grad1", 256, 512, 256, d_type="float32", kernel=SM90_BF16_F32OUT,
             diverge_in=("a2",)),  # fp32-out dgrad-like accumulate: divergent (so layout/acc stay MIXED)
        Gemm("gemm:TN:acc0:grad0", 256, 256, 512, d_type="float32", kernel=SM90_BF16_F32OUT,
             diverge_in=("a2",)),  # fp32-out fprop: divergent (so grad stays MIXED)
    ]
