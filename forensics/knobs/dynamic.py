"""Dynamic scope: run one arm per knob value through the capture path and compare the site.

Uses ``forensics.capture.kernel.capture_kernel`` (capture) and ``forensics.judge.verdicts.toggle_report`` (kernel /
algo / bits changed against the baseline arm), both imported lazily: without them, or without a
CUDA device, :func:`run_dynamic` raises :class:`Unavailable` with one line.

Also checks *when* a script sets the knob (:func:`late_assignments`): a knob read at import or
at CUDA / library initialisation has no effect when the script assigns ``os.environ[NAME]`` after
``import torch`` (or TE) / after its first CUDA call. Values set by ``forensics knob --values`` are
put in the child's environment before it starts, so they are always in time.
"""
from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput, Unavailable
from forensics.core.words import (  # the grades of dynamic reach, strongest first
    NOT_SEEN,
    REACH_ALGO,
    REACH_ALGO_BITS,
    REACH_ALGO_BITS_UNKNOWN,
    REACH_BITS,
    REACH_KERNEL,
)
from forensics.knobs.catalog import KnobEntry

#: imports after which an import-time knob is too late (the module may read it when imported)
_EARLY_IMPORTS = ("torch", "transformer_engine", "apex", "megatron")
_CUDA_CALLS = ("cuda", "to", "init", "set_device", "is_available", "device_count", "synchronize")
IN_TIME_NOTE = ("a value set in the launching environment (as `forensics knob --values` does for each arm) "
                "is in place before the process starts, so it is always in time")


@dataclass
class LateAssignment:
    """A script line that sets the knob after something that may already have read it."""

    file: str
    line: int
    statement: str
    after: str  # e.g. "import torch (line 3)" or "CUDA use torch.randn(..., device='cuda') (line 9)"
    severity: str  # "too late" | "risky"
    message: str


def script_of(command: list[str]) -> Path | None:
    """The Python script a command runs (``python x.py``, ``torchrun ... x.py``), if any exists."""
    for arg in command:
        if arg.endswith(".py") and os.path.isfile(arg):
            return Path(arg)
    return None


def late_assignments(script: Path, name: str, entry: KnobEntry | None) -> list[LateAssignment]:
    """Assignments of ``os.environ[name]`` (or setdefault/putenv/update) that come too late.

    Order is the module's top-level execution order (statements inside ``if``/``with``/``try``
    blocks included, function bodies counted where they are called from the top level).
    """
    try:
        tree = ast.parse(script.read_bytes(), filename=str(script))
    except (OSError, SyntaxError, ValueError) as e:
        raise BadInput(script, f"cannot parse the script to check when {name} is set: {e}") from None
    events = _ordered_events(tree, name)
    out: list[LateAssignment] = []
    first_import = first_cuda = None
    read_at = entry.read_at if entry else "unknown"
    for kind, line, text in events:
        if kind == "import" and first_import is None:
            first_import = (line, text)
        elif kind == "cuda" and first_cuda is None:
            first_cuda = (line, text)
        elif kind == "set":
            if first_cuda is not None and read_at in ("init", "cuda_init", "handle", "import", "construct", "unknown"):
                sev = "too late" if read_at != "unknown" else "risky"
                out.append(LateAssignment(str(script), line, text, f"CUDA use `{first_cuda[1]}` (line {first_cuda[0]})", sev,
                                          f"{script}:{line} sets {name} after CUDA is in use (line {first_cuda[0]}); "
                                          f"{name} is read at {read_at}: {sev}. Set it in the launching environment."))
            elif first_import is not None and read_at in ("import", "construct", "init", "cuda_init", "handle", "unknown"):
                sev = "too late" if read_at == "import" else "risky"
                out.append(LateAssignment(str(script), line, text, f"`{first_import[1]}` (line {first_import[0]})", sev,
                                          f"{script}:{line} sets {name} after `{first_import[1]}` (line {first_import[0]}); "
                                          f"{name} is read at {read_at}: {sev}"
                                          + ("" if sev == "too late" else " (in time only if nothing imported so far initialised it)")
                                          + ". Set it in the launching environment."))
    return out


def _ordered_events(tree: ast.Module, name: str) -> list[tuple[str, int, str]]:
    """(kind, line, source) for imports, CUDA uses and knob assignments, in execution order."""
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    events: list[tuple[str, int, str]] = []

    def walk(stmts: list[ast.stmt], depth: int) -> None:
        for stmt in stmts:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                mods = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
                if any(m.split(".")[0] in _EARLY_IMPORTS for m in mods):
                    events.append(("import", stmt.lineno, ast.unparse(stmt)))
                continue
            compound = isinstance(stmt, (ast.If, ast.With, ast.Try, ast.For, ast.While))
            if not compound and _sets_knob(stmt, name):
                events.append(("set", stmt.lineno, ast.unparse(stmt)))
            elif _uses_cuda(stmt):
                events.append(("cuda", stmt.lineno, _short(ast.unparse(stmt))))
            headers = [getattr(stmt, a) for a in ("test", "iter") if getattr(stmt, a, None) is not None]
            headers += [i.context_expr for i in getattr(stmt, "items", [])] if compound else []
            for expr in (headers if compound else [stmt]):
                for call in (n for n in ast.walk(expr) if isinstance(n, ast.Call)):
                    if isinstance(call.func, ast.Name) and call.func.id in functions and depth < 4:
                        walk(functions[call.func.id].body, depth + 1)
            if compound:
                for block in ("body", "orelse", "finalbody"):
                    walk(getattr(stmt, block, []) or [], depth)
                for handler in getattr(stmt, "handlers", []) or []:
                    walk(handler.body, depth)

    walk(tree.body, 0)
    return events


def _sets_knob(stmt: ast.stmt, name: str) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and _const(node.slice) == name and "environ" in ast.unparse(node.value):
            return True
        if isinstance(node, ast.Call) and node.args and _const(node.args[0]) == name:
            f = ast.unparse(node.func)
            if f.endswith(("environ.setdefault", "putenv")):
                return True
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("environ.update"):
            if any(kw.arg == name for kw in node.keywords) or any(
                    isinstance(a, ast.Dict) and any(_const(k) == name for k in a.keys if k is not None) for a in node.args):
                return True
    return False


def _uses_cuda(stmt: ast.stmt) -> bool:
    """A statement that touches CUDA: ``torch.cuda.*``, ``.cuda()``, ``device='cuda...'``, ``.to('cuda')``."""
    if isinstance(stmt, (ast.If, ast.With, ast.Try, ast.For, ast.While)):
        header = stmt.test if isinstance(stmt, (ast.If, ast.While)) else None
        return header is not None and _uses_cuda(ast.Expr(header))
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and node.attr == "cuda" and isinstance(node.value, ast.Name) and node.value.id == "torch":
            return True
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr == "cuda":
                return True
            for arg in list(node.args) + [k.value for k in node.keywords]:
                text = _const(arg)
                if isinstance(text, str) and text.startswith("cuda"):
                    return True
    return False


def _const(node: ast.AST | None) -> Any:
    return node.value if isinstance(node, ast.Constant) else None


def _short(text: str, width: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


@dataclass
class DynamicResult:
    """One arm per value, compared with the baseline arm at the site."""

    name: str
    site: str
    values: list[str]
    capture_dir: str | None
    arms: dict[str, dict[str, str]]
    toggles: list[dict[str, Any]] = field(default_factory=list)  # ToggleResult.to_dict() per arm
    summary: list[str] = field(default_factory=list)
    passes: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    reach: list[str] = field(default_factory=list)  # one verdict line per toggle arm (reach_line)
    device: str | None = None  # the capture backend the arms ran on (cuda | cpu)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "site": self.site, "values": self.values, "capture_dir": self.capture_dir,
                "arms": self.arms, "toggles": self.toggles, "summary": self.summary, "reach": self.reach,
                "passes": self.passes, "error": self.error, "device": self.device}




def reach_line(r: Any) -> str:
    """One toggle arm's dynamic verdict, graded, with the evidence it rests on.

    REACHES (kernel/implementation changed) when the kernel (on the CPU the implementation op) differs
    at an occurrence; REACHES (algo or attributes changed, ...) when only the algo descriptor does (a
    cuBLASLt algo, a oneDNN primitive's implementation or attributes such as ``attr-fpmath:bf16``, a
    oneMKL mode), saying whether the bits changed too; REACHES (bits only) when kernel and algo are
    unchanged but the output bits differ while the replica arms are bit-identical; NOT SEEN when kernel,
    algo and bits were all captured and unchanged (a static scan or another site may still show it
    read); UNKNOWN otherwise. An arm that crashed is a finding of its own.
    """
    knob = ", ".join(f"{k}={v}" for k, v in getattr(r, "toggle", {}).items())
    kernel, algo = getattr(r, "kernel_changed", None), getattr(r, "algo_changed", None)
    bits = getattr(r, "bits_changed", None)
    crash = getattr(r, "crash", None)
    if crash:  # a dynamic finding of its own: the knob makes the program crash (or fail)
        word = getattr(r, "crash_word", None) or "CRASHED"
        return (f"{knob}: the program {word} with it ({crash}) while the baseline arm ran: the knob reaches the "
                "process; whether it reaches the site is not measurable")
    if not getattr(r, "comparable", True):
        return f"{knob}: reach UNKNOWN (arms not comparable)"
    base, arm = getattr(r, "baseline", "baseline"), getattr(r, "arm", "arm")
    occ = getattr(r, "occurrences", None)
    run_to_run = getattr(r, "baseline_run_to_run", None)
    replicas_equal = bool(run_to_run) and "bit-identical" in run_to_run
    if kernel:
        return f"{knob}: {REACH_KERNEL} at the site; evidence: {_kernel_evidence(occ, base, arm)}"
    if algo:
        grade = REACH_ALGO if bits is False else REACH_ALGO_BITS if bits else REACH_ALGO_BITS_UNKNOWN
        return f"{knob}: {grade} at the site; evidence: {_algo_evidence(occ, base, arm)}"
    if bits and replicas_equal:
        seen = "kernel and algo unchanged" if kernel is False and algo is False else "kernel and algo not both captured"
        return (f"{knob}: {REACH_BITS} at the site (bits changed while the replica arms are bit-identical; {seen}); "
                f"evidence: {_bits_evidence(occ)}")
    if kernel is False and algo is False and bits is False:
        return (f"{knob}: change {NOT_SEEN} at the site (kernel, algo descriptor and bits unchanged); evidence: "
                f"{_same_evidence(occ, base, arm)}")
    if kernel is False and algo is False:
        return f"{knob}: change {NOT_SEEN} at the site (kernel and algo descriptor unchanged; bits: {_bits_word(bits, run_to_run)})"
    return f"{knob}: reach UNKNOWN (kernel/algo not captured at the site)"


def _rows(occ: Any, column: str) -> list[dict[str, Any]]:
    if occ is None or not hasattr(occ, "to_dict") or column not in getattr(occ, "columns", []):
        return []
    return [row for row in occ.to_dict("records") if row.get(column) is True]


def _kernel_evidence(occ: Any, base: str, arm: str) -> str:
    rows = _rows(occ, "kernel_changed")
    if not rows:
        return "the kernel differs in the captured records"
    row = rows[0]
    a = row.get("implementation_baseline") or row.get("kernel_baseline")
    b = row.get("implementation_arm") or row.get("kernel_arm")
    return f"{base} ran {a}, {arm} ran {b} at {row.get('label')} ({len(rows)} of {len(occ)} occurrence(s))"


def _algo_evidence(occ: Any, base: str, arm: str) -> str:
    rows = _rows(occ, "algo_changed")
    if not rows:
        return "the algo descriptor differs in the captured records"
    row = rows[0]
    a_rows, b_rows = str(row.get("algo_baseline") or "").split(" | "), str(row.get("algo_arm") or "").split(" | ")
    pairs = [(x, y) for x, y in zip(a_rows, b_rows) if x != y] or [(" | ".join(a_rows), " | ".join(b_rows))]
    x, y = pairs[0]
    return f"{base} `{x}`, {arm} `{y}` at {row.get('label')} ({len(rows)} of {len(occ)} occurrence(s))"


def _bits_evidence(occ: Any) -> str:
    rows = _rows(occ, "bits_changed")
    if not rows:
        return "the output digests differ"
    return f"output digest differs at {rows[0].get('label')} ({len(rows)} of {len(occ)} occurrence(s)), inputs equal"


def _same_evidence(occ: Any, base: str, arm: str) -> str:
    if occ is None or not len(occ):
        return "no occurrence compared"
    row = occ.to_dict("records")[0]
    what = row.get("implementation_baseline") or row.get("kernel_baseline") or "the same kernel"
    return f"{base} and {arm} both ran {what}, same algo descriptor and output bits at {len(occ)} occurrence(s)"


def _bits_word(bits: Any, run_to_run: Any) -> str:
    if bits is None:
        return "unknown"
    return f"changed, but {run_to_run}" if bits else "unchanged"


def env_arms(name: str, values: list[str]) -> dict[str, dict[str, str]]:
    """Two baseline arms (the launching environment, for run-to-run) then one arm per value.

    Arm names are folder names (``a1``, ``a2``, ``k1-_4096_8`` for ``:4096:8``); the value itself is
    recorded as the arm's toggle in the capture manifest by ``capture_kernel``.
    """
    arms: dict[str, dict[str, str]] = {"a1": {}, "a2": {}}
    for i, v in enumerate(values, 1):
        arms[f"k{i}-" + (re.sub(r"[^A-Za-z0-9_.-]", "_", v)[:40] or "empty")] = {name: v}
    return arms


def check_available(device: str | None = None, tools: Any = None) -> str:
    """The capture backend to use (cuda | cpu); :class:`Unavailable` (one line) when it cannot run here.

    ``device=None``: cuda when a CUDA device is present, else the CPU backend (docs/cpu-backend.md).
    ``tools``: what :func:`forensics.capture.passes.discover_tools` found (asked here when None).
    """
    try:
        from forensics.capture import kernel as _kernel  # noqa: F401, PLC0415
        from forensics.judge import verdicts as _verdicts  # noqa: F401, PLC0415
    except ImportError as e:
        raise Unavailable(f"dynamic scope unavailable: the capture/verdict modules cannot be imported ({e})") from None
    if tools is not None:
        ok, reason = tools.cuda, tools.cuda_reason
    else:
        from forensics.capture.passes import cuda_status  # noqa: PLC0415

        ok, reason = cuda_status()
    if device in (None, "") and not ok:
        return "cpu"
    if device == "cuda" and not ok:
        raise Unavailable(f"dynamic scope on --device cuda needs a CUDA GPU: {reason}; static result above")
    return device or "cuda"


def run_dynamic(name: str, site: Any, values: list[str], command: list[str], *, out: str | None = None,
                steps: str = "1-2", timeout_s: float = 1800, progress: bool = True,
                device: str | None = None) -> DynamicResult:
    """Capture one arm per value (plus the baseline replicas) and report what changed at the site.

    ``site`` is a parsed :class:`forensics.core.site.Site` or ``Occurrence`` (text is parsed once).
    The machine is probed once (:func:`discover_tools`), the passes planned once, and the capture
    read once, by the toggle report (no ``analyze`` of it first: its table is not printed here).
    """
    # capture and judge (pandas) only when dynamic scope runs: the static scan never needs them
    from forensics.capture.kernel import as_site, capture_kernel, merge_options  # noqa: PLC0415
    from forensics.capture.passes import discover_tools  # noqa: PLC0415
    from forensics.judge.verdicts import toggle_report  # noqa: PLC0415

    parsed = as_site(site)
    site = str(parsed)
    tools = discover_tools()
    dev = check_available(device, tools)
    arms = env_arms(name, values)
    opts = merge_options({"site": parsed, "command": list(command), "steps": steps, "env_arms": arms,
                          "out": out, "timeout_s": timeout_s, "device": dev})
    kr = capture_kernel(opts, progress=progress, tools=tools)
    result = DynamicResult(name, site, values, str(kr.capture_dir), arms, device=dev,
                           passes=[{"name": p.name, "arm": p.arm, "status": p.status, "reason": p.reason} for p in kr.passes])
    try:
        report = toggle_report(kr.capture_dir, site=site, names=[name])
    except Exception as e:  # a verdict that cannot be formed is reported, never guessed
        result.error = f"toggle report failed: {type(e).__name__}: {e}"
        return result
    for r in report.for_knob(name):
        result.toggles.append(r.to_dict())
        result.summary.append(r.summary())
        result.reach.append(reach_line(r))
    if not result.toggles:
        result.error = "no arm with this knob's toggle was comparable at the site (see the capture's pass logs)"
    return result
