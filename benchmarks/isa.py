"""Run a benchmark with the libraries' AVX-512 code paths turned off: AVX2 *as far as they let*.

Issue 33 asks for the reader, differ and tracer figures "on an AVX2 machine as on AVX-512". When
no AVX2-only machine can be reached, this wrapper sets every runtime-dispatch switch we know of
to AVX2 and runs the command (its child processes inherit them), then prints what each library
reports it used:

* numpy: ``NPY_DISABLE_CPU_FEATURES`` (the X86_V4 / AVX512_* dispatch targets);
* pyarrow: ``ARROW_USER_SIMD_LEVEL=AVX2`` (``pyarrow.runtime_info().simd_level``);
* torch's ATen kernels: ``ATEN_CPU_CAPABILITY=avx2``; oneDNN: ``ONEDNN_MAX_CPU_ISA=AVX2``;
  oneMKL: ``MKL_ENABLE_INSTRUCTIONS=AVX2``.

What it cannot switch off, so a figure taken under it is *AVX2-emulated*, never an AVX2 machine's:
code compiled with AVX-512 unconditionally or dispatching on its own (orjson, msgspec and xxhash
choose at build time or by their own CPUID test), the CPU's caches, memory bandwidth and clock,
which differ between machine kinds more than the instruction set does.

    python benchmarks/isa.py avx2 -- python benchmarks/bench_diff.py --records 2000000
    python benchmarks/isa.py native -- python benchmarks/bench_diff.py --records 2000000
"""
from __future__ import annotations

import os
import subprocess
import sys

#: the switches that take the AVX-512 paths out (each library's own documented variable)
AVX2_ENV = {
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",
    "ARROW_USER_SIMD_LEVEL": "AVX2",
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}


def cpu_model() -> str:
    """The CPU's model name and the SIMD flags that matter here, as ``/proc/cpuinfo`` gives them."""
    name, flags = "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and name == "unknown":
                    name = value.strip()
                elif key.strip() == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    shown = [f for f in ("avx2", "avx512f", "amx_tile") if f in flags]
    return f"{name} ({', '.join(shown) or 'no avx2'})"


def levels() -> str:
    """What numpy, pyarrow and torch say they dispatch to in this process (imports each if present)."""
    out = []
    try:
        import numpy as np
        from numpy._core._multiarray_umath import __cpu_features__ as feats  # numpy >= 2
        # numpy 2.x dispatches to the X86_V3 (AVX2) / X86_V4 (AVX-512) targets; older ones name AVX512_SKX
        avx512 = feats.get("X86_V4", feats.get("AVX512_SKX", False))
        out.append("numpy " + ("AVX512" if avx512 else "AVX2" if feats.get("AVX2") else "below AVX2"))
        del np
    except Exception:  # noqa: BLE001 - a level we cannot read is reported as such
        out.append("numpy ?")
    try:
        import pyarrow as pa
        out.append(f"pyarrow {pa.runtime_info().simd_level}")
    except Exception:  # noqa: BLE001
        out.append("pyarrow ?")
    try:
        import torch
        out.append(f"torch {torch.backends.cpu.get_cpu_capability()}")
    except Exception:  # noqa: BLE001
        out.append("torch ?")
    return ", ".join(out)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in ("avx2", "native") or argv[1] != "--":
        print("usage: python benchmarks/isa.py avx2|native -- COMMAND ...", file=sys.stderr)
        return 2
    env = dict(os.environ)
    if argv[0] == "avx2":
        env.update(AVX2_ENV)
    else:
        for key in AVX2_ENV:
            env.pop(key, None)
    probe = subprocess.run([sys.executable, __file__, "--levels"], env=env, capture_output=True, text=True)
    print(f"isa: {argv[0]}{' (emulated: AVX-512 paths switched off where libraries allow)' if argv[0] == 'avx2' else ''}; "
          f"cpu: {cpu_model()}; libraries: {probe.stdout.strip() or probe.stderr.strip()}", flush=True)
    return subprocess.run(argv[2:], env=env).returncode


if __name__ == "__main__":
    if sys.argv[1:] == ["--levels"]:
        print(levels())
        sys.exit(0)
    sys.exit(main(sys.argv[1:]))
