"""Records at module boundaries (``forensics trace --at modules``): one record per ``nn.Module``
call, its tensor arguments' entries taken before the call and its tensor outputs' after, at the
trace's evidence level. No dispatch mode is pushed, so no op pays for one: a light first pass at
scale (Megatron-Core's determinism recorder works at this grain too). The semantic records
(collectives, optimizer step, backward) are kept. A difference found here is a candidate inside
that module; the next pass is the op-level trace of just that window at full evidence
(``forensics diff`` proposes it).

Identity: ``module.<class name>:<occurrence>`` (``kind`` ``module``), counted per class on this rank
like an op's, so two runs align offline. Hooks are process-global
(``register_module_forward_pre_hook``/``register_module_forward_hook``); outside the window they
return at once.
"""
from __future__ import annotations

from typing import Any

import torch


def _tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a module's arguments or output: a tensor, or those at the top of a tuple,
    list or dict (what a module passes on; nested containers are not searched)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def hook_modules(tracer: Any) -> list[Any]:
    """Install the two global module hooks; their handles (``remove()`` on close)."""
    from torch.nn.modules.module import (  # noqa: PLC0415
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )

    stack: list[tuple[int, list[dict]]] = []  # (id of the module, its input entries), innermost last

    def pre(module: Any, args: Any) -> None:
        if not tracer._recording():
            return
        try:
            stack.append((id(module), tracer.digests_now(_tensors(args))))
        except Exception:  # noqa: BLE001 - never break the user's forward
            pass

    def post(module: Any, args: Any, output: Any) -> None:
        if not stack or stack[-1][0] != id(module):
            return  # its call began outside the window (or its entry failed)
        _, ins = stack.pop()
        if not tracer._recording():
            return
        try:
            tracer.semantic_digested(f"module.{type(module).__name__}", "module", ins, _tensors(output))
        except Exception:  # noqa: BLE001
            pass

    return [register_module_forward_pre_hook(pre), register_module_forward_hook(post)]
