"""Which environment variables matter for GPU/CPU determinism, kept redacted in trace headers,
capture manifests and bundles. Stated once here; the probes (inside the user's process), the capture
and the verdicts import it."""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from forensics.core.redact import REDACTED, Redactor, is_secret_key
from forensics.core.redact import redact_obj as _redact_obj

#: Variables worth keeping in a trace header and a capture manifest (exact names or prefixes);
#: everything else is dropped. Every knob of the catalog (forensics/data/knobs.yaml) matches one
#: (tests/test_knobs_recorded.py), and so does every variable of the libraries those knobs belong
#: to: ATen, oneDNN (ONEDNN_/DNNL_/MKLDNN_), oneMKL, OpenMP (OMP_, Intel's KMP_, GNU's GOMP_),
#: OpenBLAS, cuBLAS/cuBLASLt, cuDNN, NCCL, Transformer Engine, torch and Inductor (TORCH*,
#: PYTORCH_), CUDA, ROCm's hipBLASLt/rocBLAS/MIOpen, Triton.
RELEVANT_PREFIXES = (
    "CUDA_", "CUBLAS", "CUDNN", "NVTE_", "NCCL_", "TORCH", "PYTORCH_", "NVIDIA_",
    "OMP_", "KMP_", "GOMP_", "MKL_", "ATEN_", "ONEDNN_", "DNNL_", "MKLDNN_", "OPENBLAS_",
    "HIPBLASLT_", "ROCBLAS_", "MIOPEN_", "HIP_", "VLLM_", "SGLANG_",
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_", "SLURM_",
    "FORENSICS_", "PYTHONHASHSEED", "NVTX_", "LD_LIBRARY_PATH", "LD_PRELOAD", "CUPTI_", "TRITON_",
)


def is_secret_name(name: str) -> bool:
    """A secret's name (``HF_TOKEN``, ``WANDB_API_KEY``, ``DB_PASS``); whole words only (forensics.core.redact)."""
    return is_secret_key(name)


def redact_value(value: str) -> str:
    """Mask secret-looking substrings (tokens, keys, URL credentials, ``--token X``...) inside a value."""
    return Redactor().learn_text(value).text(value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with secret-named variables and secret-looking values redacted."""
    return {k: (REDACTED if is_secret_key(k) else redact_value(str(v))) for k, v in env.items()}


def relevant_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that matter for GPU determinism, redacted."""
    env = os.environ if env is None else env
    keep = {k: v for k, v in env.items() if k.startswith(RELEVANT_PREFIXES)}
    return redact_env(dict(sorted(keep.items())))


def redact_obj(obj: Any) -> Any:
    """Recursively redact a JSON-like object: secret-named keys lose their whole value, strings are scrubbed."""
    return _redact_obj(obj)
