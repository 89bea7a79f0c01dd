"""Keep the inputs of one site occurrence (``forensics kernel --rows``: the batch-invariance sweep).

Switched on by ``ProbeConfig.extra["keep_inputs"] = {"budget_bytes": N}`` in the site probe's
config; costs nothing otherwise. At the first selected occurrence of the site inside the window it
writes, into the rank folder:

* ``site-inputs.json``: the op, the occurrence, its GEMM meta (layout, grad), the intra-op thread
  count, every argument tensor's shape, strides and dtype, and either ``"kept": "site-inputs.pt"``
  or ``"refused"``: the size of the inputs and the budget they exceed (nothing is kept then);
* ``site-inputs.pt``: ``{"op", "args", "kwargs"}`` with every tensor cloned to the CPU before the
  call ran (strides kept where they are dense), ``torch.save`` format;
* ``site-output.json``: once the call returned, the shape, dtype and order-sensitive digest of each
  of its tensor outputs (what ``--repeat`` compares its replays with: the program's own bits).

Both files are created exclusively (never overwritten). A failure is written into the JSON as
``"error"``; it never reaches the program.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

INPUTS_JSON = "site-inputs.json"
INPUTS_PT = "site-inputs.pt"
OUTPUT_JSON = "site-output.json"


def human_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class InputKeeper:
    """Keeps the first occurrence it is shown; every later one is ignored."""

    def __init__(self, folder: Path, budget_bytes: int):
        self.folder = Path(folder)
        self.budget = int(budget_bytes)
        self.done = False
        self.pending: str | None = None  # the label kept at this call, until its output is described

    def refuse(self, label: str, op: str, why: str, meta: dict[str, Any]) -> None:
        """The first occurrence cannot be kept (a call that is no aten op): say so in the JSON."""
        if self.done:
            return
        self.done = True
        self._write({"label": label, "op": op, "meta": meta, "pid": os.getpid(), "refused": f"{label} is {why}"})

    def _write(self, info: dict[str, Any]) -> None:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.folder / INPUTS_JSON, "x") as f:
                f.write(json.dumps(info, default=str) + "\n")
        except Exception as e:  # noqa: BLE001  (an existing file, a full disk: never the program's problem)
            import sys  # noqa: PLC0415

            sys.stderr.write(f"forensics: site inputs not described: {type(e).__name__}: {e}\n")

    def keep(self, label: str, func: Any, args: tuple, kwargs: dict, meta: dict[str, Any]) -> None:
        if self.done:
            return
        self.done = True
        info: dict[str, Any] = {"label": label, "op": str(func), "meta": meta, "pid": os.getpid()}
        try:
            self._keep(info, func, args, kwargs)
        except Exception as e:  # noqa: BLE001  (a probe never breaks the program it observes)
            info["error"] = f"{type(e).__name__}: {e}"[:300]
        self._write(info)
        if info.get("kept"):
            self.pending = label

    def finish(self, out: Any) -> None:
        """After the kept call: its outputs' order-sensitive digests into ``site-output.json``."""
        label, self.pending = self.pending, None
        if label is None:
            return
        try:
            from probes.digests import ordered_device  # noqa: PLC0415

            items = out if isinstance(out, (list, tuple)) else [out]
            outs = [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""), "device": str(t.device),
                     "ohash": int(ordered_device(t).item()) % (1 << 64) if t.numel() else 0}
                    for t in items if hasattr(t, "shape") and hasattr(t, "stride")]
            with open(self.folder / OUTPUT_JSON, "x") as f:
                f.write(json.dumps({"label": label, "outputs": outs}) + "\n")
        except Exception as e:  # noqa: BLE001  (a probe never breaks the program it observes)
            import sys  # noqa: PLC0415

            sys.stderr.write(f"forensics: site output not described: {type(e).__name__}: {e}\n")

    def _keep(self, info: dict[str, Any], func: Any, args: tuple, kwargs: dict) -> None:
        import torch  # noqa: PLC0415
        from torch.utils._pytree import tree_flatten_with_path, keystr, tree_map  # noqa: PLC0415

        info["threads"] = torch.get_num_threads()
        leaves, _ = tree_flatten_with_path((args, kwargs))
        tensors = []
        total = 0
        for path, leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                nbytes = int(leaf.numel()) * leaf.element_size()
                total += nbytes
                tensors.append({"path": keystr(path), "shape": list(leaf.shape), "strides": list(leaf.stride()),
                                "dtype": str(leaf.dtype).replace("torch.", ""), "device": str(leaf.device),
                                "bytes": nbytes})
        info["tensors"] = tensors
        counter = iter(range(len(tensors)))
        # the call's structure with each tensor as {"tensor": i} (its entry in "tensors") and every other
        # argument as itself (a str where JSON has no form): the sweep plans its rows from it without torch
        info["skeleton"] = tree_map(lambda x: {"tensor": next(counter)} if isinstance(x, torch.Tensor) else
                                    (x if isinstance(x, (int, float, bool, str, type(None))) else str(x)),
                                    [list(args), dict(kwargs)])
        info["bytes"] = total
        info["budget_bytes"] = self.budget
        if total > self.budget:
            info["refused"] = (f"the inputs of {info['label']} are {human_bytes(total)} ({total} bytes), over the "
                               f"budget of {human_bytes(self.budget)} ({self.budget} bytes): nothing kept")
            return

        def clone(x: Any) -> Any:
            if not isinstance(x, torch.Tensor):
                return x
            y = x.detach()
            return y.clone(memory_format=torch.preserve_format).cpu() if y.device.type != "cpu" else \
                y.clone(memory_format=torch.preserve_format)

        kept = {"op": str(func), "args": tree_map(clone, tuple(args)), "kwargs": tree_map(clone, dict(kwargs))}
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / INPUTS_PT
        with open(path, "xb") as f:
            torch.save(kept, f)
        info["kept"] = INPUTS_PT


def from_config(extra: dict[str, Any], folder: Path) -> InputKeeper | None:
    spec = extra.get("keep_inputs") if isinstance(extra, dict) else None
    if not spec:
        return None
    return InputKeeper(folder, int(spec.get("budget_bytes", 256 << 20)))
