"""The layout's rules, read from the source with ast (no import runs): no function in the probes or
the differ over ~150 lines (issue 30), and the probes, which run inside the user's process, import
nothing of forensics but its bottom layers (core, runtime)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_FUNCTION_LINES = 150
#: the layers a probe may import (forensics.core.formats holds the wire formats the probes write)
PROBE_MAY_IMPORT = ("forensics.core", "forensics.runtime")


def _functions(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node.lineno, node.end_lineno - node.lineno + 1


def _imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module, node.lineno


@pytest.mark.parametrize("package", ["probes", "forensics/tracediff"])
def test_no_long_functions_in_probes(package):
    long = [f"{path.relative_to(ROOT)}:{line}: {name} is {n} lines"
            for path in sorted((ROOT / package).rglob("*.py"))
            for name, line, n in _functions(path) if n > MAX_FUNCTION_LINES]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def test_the_function_counter_counts():
    """The rule above could fail: a 151-line function is found (SYNTHETIC source)."""
    src = "def f():\n" + "    x = 1\n" * 150
    tree = ast.parse(src)
    node = tree.body[0]
    assert node.end_lineno - node.lineno + 1 == 151


def test_probes_import_only_the_bottom_layers_of_forensics():
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {module}"
             for path in sorted((ROOT / "probes").rglob("*.py"))
             for module, line in _imports(path)
             if (module == "forensics" or module.startswith("forensics."))
             and not module.startswith(PROBE_MAY_IMPORT) and module != "forensics"]
    assert not wrong, "a probe runs in the user's process and imports only " + ", ".join(PROBE_MAY_IMPORT) \
        + ":\n" + "\n".join(wrong)
    assert not [path for path in (ROOT / "probes").rglob("*.py") for module, _ in _imports(path) if module == "parsers"
                or module.startswith("parsers.")], "probes -> parsers runs back up the stage order"


@pytest.mark.parametrize("package", ["forensics/tracediff", "forensics/judge"])
def test_the_offline_stages_read_no_probe(package):
    """The differ and the analysis read what the probes wrote through the formats and grammars in
    forensics.core (the op-trace format, the step and rank windows), never the probes' code."""
    wrong = [f"{path.relative_to(ROOT)}:{line}: imports {module}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for module, line in _imports(path) if module == "probes" or module.startswith("probes.")]
    assert not wrong, "\n".join(wrong)
