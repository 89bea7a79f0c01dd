"""The run environment as recorded in manifests and bundles, with secrets redacted."""
from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

REDACTED = "<redacted>"
_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|PASS$|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL|AUTH|SESSION|COOKIE|_KEY$|^KEY$)",
    re.I,
)
_SECRET_VALUE = re.compile(
    r"(ghp_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}"
    r"|AKIA[0-9A-Z]{16}|xox[abpr]-[A-Za-z0-9-]{10,}|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+"
    r"|://[^/\s:@]+:[^/\s@]+@)"
)

#: Variables worth keeping in a capture (exact names or prefixes); everything else is dropped.
RELEVANT_PREFIXES = (
    "CUDA_", "CUBLAS", "CUBLASLT_", "CUDNN_", "NVTE_", "NCCL_", "TORCH_", "PYTORCH_", "NVIDIA_",
    "OMP_", "MKL_", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_", "SLURM_",
    "FORENSICS_", "PYTHONHASHSEED", "NVTX_", "LD_LIBRARY_PATH", "CUPTI_", "TRITON_",
)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_value(value: str) -> str:
    """Mask secret-looking substrings (tokens, keys, URL credentials) inside a value."""
    return _SECRET_VALUE.sub(REDACTED, value)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Copy of ``env`` with secret-named variables and secret-looking values redacted."""
    return {k: (REDACTED if is_secret_name(k) else redact_value(str(v))) for k, v in env.items()}


def relevant_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that matter for GPU determinism, redacted."""
    env = os.environ if env is None else env
    keep = {k: v for k, v in env.items() if k.startswith(RELEVANT_PREFIXES)}
    return redact_env(dict(sorted(keep.items())))


def redact_obj(obj: Any) -> Any:
    """Recursively redact a JSON-like object: secret-named keys and secret-looking strings."""
    if isinstance(obj, Mapping):
        return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int, float))
                    else redact_obj(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v) for v in obj]
    if isinstance(obj, str):
        return redact_value(obj)
    return obj


def describe(probe_torch: bool = True) -> dict[str, Any]:
    """Versions and devices: python, platform, torch/CUDA/cuDNN, GPU, driver, TE, cuBLAS."""
    info: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform()}
    if probe_torch:
        try:
            import torch  # noqa: PLC0415

            info["torch"] = torch.__version__
            info["cuda"] = torch.version.cuda
            info["cuda_available"] = bool(torch.cuda.is_available())
            if info["cuda_available"]:
                p = torch.cuda.get_device_properties(0)
                info["device"] = p.name
                info["sm_count"] = p.multi_processor_count
                info["capability"] = f"{p.major}.{p.minor}"
                info["cublas"] = _cublas_version(torch)
            try:
                info["cudnn"] = torch.backends.cudnn.version()
            except Exception:  # noqa: BLE001
                info["cudnn"] = None
        except Exception as e:  # noqa: BLE001
            info["torch"] = f"absent: {type(e).__name__}"
    for mod in ("transformer_engine", "nvtx", "cupti", "ncu_report"):
        info[mod] = _module_version(mod)
    info["driver"] = _driver_version()
    return info


def _module_version(name: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

        dist = {"cupti": "cupti-python", "ncu_report": "ncu-report", "transformer_engine": "transformer-engine"}
        return version(dist.get(name, name))
    except PackageNotFoundError:
        return None
    except Exception:  # noqa: BLE001
        return None


def _cublas_version(torch: Any) -> str | None:
    try:
        return str(torch._C._cuda_getCompiledVersion())
    except Exception:  # noqa: BLE001
        return None


def _driver_version() -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None
