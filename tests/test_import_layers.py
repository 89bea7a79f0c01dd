"""The packages import only downward (docs/layout.md): read from the source, every import.

The stage order, bottom to top, is :data:`LAYERS`. A module may import its own package or any package
below it; an import that runs back up (``capture`` importing ``judge``) or a pair of packages that
import each other is a layering bug, whether the import sits at module level or inside a function.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Bottom to top. ``forensics`` (the package's ``__init__``: the version) is importable from anywhere.
LAYERS = (
    "forensics.core", "forensics.runtime", "parsers", "probes", "forensics.instruments",
    "forensics.capture", "forensics.judge", "forensics.pipeline", "forensics.knobs", "forensics.tracediff",
    "forensics.sweep", "forensics.evidence", "forensics.commands", "forensics.top",
)
#: Modules at the root of ``forensics/`` are the facade (the API, the CLI): the top layer.
TOP = "forensics.top"

#: Imports that still run up, each with the reason it is tolerated; the list only shrinks.
KNOWN: dict[tuple[str, str], str] = {
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] in ("parsers", "probes"):
        return parts[0]
    if parts[0] != "forensics":
        return None
    if len(parts) == 1:
        return "forensics"
    name = "forensics." + parts[1]
    if name in LAYERS:
        return name
    return TOP if (ROOT / "forensics" / f"{parts[1]}.py").exists() else None


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> list[tuple[str, int]]:
    """Every imported module of ``path`` (absolute or relative, at any depth), with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    here = module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            # ``from forensics import instruments`` imports a package, not the root
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if (ROOT / sub.replace(".", "/")).is_dir() or (ROOT / (sub.replace(".", "/") + ".py")).exists():
                    found.append((sub, node.lineno))
    return found


def sources() -> list[Path]:
    out = []
    for top in ("forensics", "parsers", "probes"):
        out += [p for p in sorted((ROOT / top).rglob("*.py")) if "bootstrap" not in p.parts]
    return out


@functools.lru_cache(maxsize=1)
def edges() -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for path in sources():
        src = layer_of(module_name(path))
        if src in (None, "forensics"):
            continue
        for target, line in imports_of(path):
            dst = layer_of(target)
            if dst in (None, "forensics") or dst == src:
                continue
            found.setdefault((src, dst), []).append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    return found


def test_every_package_has_a_layer():
    for path in sources():
        assert layer_of(module_name(path)) is not None, f"{path.relative_to(ROOT)}: add its package to LAYERS"


def test_no_import_runs_back_up():
    order = {name: i for i, name in enumerate(LAYERS)}
    upward = [where for (src, dst), wheres in edges().items()
              if order[dst] > order[src] and (src, dst) not in KNOWN for where in wheres]
    assert not upward, "imports running up the stage order:\n" + "\n".join(upward)


def test_no_two_packages_import_each_other():
    found = edges()
    mutual = sorted({tuple(sorted(pair)) for pair in found
                     if pair[::-1] in found and pair not in KNOWN and pair[::-1] not in KNOWN})
    assert not mutual, f"packages importing each other: {mutual}"


def test_known_exceptions_still_exist():
    gone = [pair for pair in KNOWN if pair not in edges()]
    assert not gone, f"{gone} no longer import upward: remove them from KNOWN"
