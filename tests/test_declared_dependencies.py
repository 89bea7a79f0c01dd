"""Every third-party module that shipped code, a benchmark or an example imports is declared in
pyproject.toml (core dependencies or an extra). A fast path that silently falls back when its module
is missing, or a benchmark that crashes on a fresh install, starts with an undeclared import."""
from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("forensics", "parsers", "probes", "benchmarks", "examples")
OWN = {"forensics", "parsers", "probes", "tests", "benchmarks", "examples"}
#: import name -> distribution name, where they differ.
DISTRIBUTION = {"yaml": "pyyaml", "elftools": "pyelftools", "cupti": "cupti-python", "ncu_report": "ncu-report"}
#: Imported only to look at a user's environment (never needed by forensics itself).
PROBED_NOT_NEEDED = {"transformer_engine"}


def _imports() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for root in SCANNED:
        for path in (ROOT / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in OWN:
                        found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].strip().lower() for s in specs}


def test_every_imported_third_party_module_is_declared() -> None:
    declared = _declared()
    undeclared = {mod: sorted(where) for mod, where in _imports().items()
                  if mod not in PROBED_NOT_NEEDED and DISTRIBUTION.get(mod, mod).lower() not in declared}
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_scan_sees_the_fast_paths() -> None:
    """The scan is not vacuous: it finds the modules the fast paths are known to import."""
    found = _imports()
    assert {"orjson", "pyarrow", "numpy", "pandas", "torch"} <= set(found)
