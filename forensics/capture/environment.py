"""The run environment as recorded in manifests and bundles, with secrets redacted (rules: forensics.core.redact)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from typing import Any



#: Keys of environment.json compared across arms or printed in bundles, and the types they may have.
_TEXT = (str, type(None))
_TEXT_OR_NUMBER = (str, int, float, type(None))
VERSION_FIELDS: dict[str, tuple[type, ...]] = {
    "python": _TEXT, "platform": _TEXT, "torch": _TEXT, "cuda": _TEXT_OR_NUMBER, "cudnn": _TEXT_OR_NUMBER,
    "cublas": _TEXT_OR_NUMBER, "cublaslt": _TEXT_OR_NUMBER, "driver": _TEXT_OR_NUMBER, "device": _TEXT,
    "transformer_engine": _TEXT, "sm_count": (int, type(None)), "capability": _TEXT_OR_NUMBER,
    "cuda_available": (bool, type(None)), "nvtx": _TEXT, "cupti": _TEXT, "ncu_report": _TEXT,
    "world_size": (int, type(None)), "seed": _TEXT_OR_NUMBER,
}
_PLAIN = (str, int, float, bool, type(None))


def check_environment(data: Any, path: Any) -> None:
    """An ``environment.json`` the verdicts can read: an object, version values of their types, ``env`` NAME -> value.

    Raises :class:`forensics.core.errors.BadInput` naming the file and the key (a list or a number where a
    device name belongs would otherwise read as "versions differ" and make arms NOT COMPARABLE).
    """
    from forensics.core.errors import BadInput  # noqa: PLC0415

    def kind(v: Any) -> str:
        return {str: "text", bool: "true/false", list: "a list", dict: "an object"}.get(
            type(v), "a number" if isinstance(v, (int, float)) else type(v).__name__)

    if not isinstance(data, dict):
        raise BadInput(path, "environment.json must be a JSON object")
    for key, types in VERSION_FIELDS.items():
        v = data.get(key)
        bad_bool = isinstance(v, bool) and bool not in types
        if not isinstance(v, types) or bad_bool or (isinstance(v, float) and v != v):
            want = "text" if types == _TEXT else ("an integer" if int in types and str not in types
                                                   else "true/false" if bool in types else "text or a number")
            raise BadInput(path, f"{key} must be {want}, not {kind(v)}")
    command = data.get("command")
    if command is not None and not (isinstance(command, str) or (
            isinstance(command, list) and all(isinstance(x, _PLAIN) for x in command))):
        raise BadInput(path, f"command must be text or a list of arguments, not {kind(command)}")
    env = data.get("env")
    if env is not None:
        if not isinstance(env, dict):
            raise BadInput(path, f"env must be an object NAME: VALUE, not {kind(env)}")
        for k, v in env.items():
            if not isinstance(v, _PLAIN):
                raise BadInput(path, f"env.{k} must be a plain value, not {kind(v)}")


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


def describe_without_torch(cuda_available: bool | None = None) -> dict[str, Any]:
    """:func:`describe` without importing torch: its version and CUDA build from ``torch/version.py``
    (read as text, as ``import torch`` would set ``torch.__version__`` and ``torch.version.cuda``).

    ``cuda_available``: what the caller found (no GPU device node: False); None leaves it out unless
    this torch is built without CUDA (then False, and no cuDNN). Device properties are left out:
    they need CUDA initialised (:func:`describe` in a side process does that on a GPU).
    """
    info = describe(probe_torch=False)
    version = _torch_version_file()
    if version is None:
        info["torch"] = "absent: no readable torch/version.py"
        return info
    info["torch"], info["cuda"] = version.get("__version__"), version.get("cuda")
    if info["cuda"] is None:  # a CPU build: no CUDA, no cuDNN, whatever the machine has
        cuda_available, info["cudnn"] = False, None
    if cuda_available is not None:
        info["cuda_available"] = bool(cuda_available)
    return info


def _torch_version_file() -> dict[str, Any] | None:
    """The literal assignments of the installed torch's ``version.py`` (None: no torch, or unreadable)."""
    import ast  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "version.py")
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(1 << 16))
    except (OSError, SyntaxError, ValueError):
        return None
    out: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else (
            node.target if isinstance(node, ast.AnnAssign) else None)
        if isinstance(target, ast.Name) and isinstance(getattr(node, "value", None), ast.Constant):
            out[target.id] = node.value.value
    return out if "__version__" in out else None


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
