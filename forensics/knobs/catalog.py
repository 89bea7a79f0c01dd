"""The shipped knob catalog (``forensics/data/knobs.yaml``): documented scope and read time."""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from forensics.core.errors import BadInput

READ_TIMES = ("import", "construct", "init", "cuda_init", "handle", "call", "unknown")
CERTAINTIES = ("doc", "real", "inferred", "uncertain")
PATH_KINDS = ("te_gemm", "torch_gemm", "attention", "collective", "torch_other", "cpu_gemm", "cpu_conv", "cpu_other", "logging")


@dataclass(frozen=True)
class KnobEntry:
    """One catalog entry; every fact carries its ``source`` and ``certainty``."""

    name: str
    governs: str
    scope: tuple[str, ...]
    not_scope: tuple[str, ...]
    uncertain_scope: tuple[str, ...]
    read_at: str
    source: str
    certainty: str
    read_by: tuple[str, ...] = field(default_factory=tuple)
    read_at_note: str | None = None
    default: str | None = None
    note: str | None = None

    @property
    def read_before_start(self) -> bool:
        """True when the knob is read at import / library or CUDA init: set it before launch."""
        return self.read_at in ("import", "construct", "init", "cuda_init", "handle")


def catalog_path() -> Path:
    return Path(str(resources.files("forensics") / "data" / "knobs.yaml"))


@lru_cache(maxsize=4)
def load_catalog(path: str | None = None) -> dict[str, KnobEntry]:
    """Load and check the catalog; a malformed file raises :class:`BadInput` naming it."""
    where = Path(path) if path else catalog_path()
    try:
        doc = yaml.safe_load(where.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise BadInput(where, f"cannot read the knob catalog: {e}") from None
    if not isinstance(doc, dict) or doc.get("schema") != 1 or not isinstance(doc.get("knobs"), list):
        raise BadInput(where, "not a knob catalog (expected 'schema: 1' and a 'knobs' list)")
    out: dict[str, KnobEntry] = {}
    for i, raw in enumerate(doc["knobs"], 1):
        entry = _entry(where, i, raw)
        if entry.name in out:
            raise BadInput(where, f"entry {i}: {entry.name} appears twice")
        out[entry.name] = entry
    return out


def _entry(where: Path, i: int, raw: object) -> KnobEntry:
    if not isinstance(raw, dict):
        raise BadInput(where, f"entry {i} is not a mapping")
    missing = [k for k in ("name", "governs", "scope", "read_at", "source", "certainty") if k not in raw]
    if missing:
        raise BadInput(where, f"entry {i} ({raw.get('name', '?')}) lacks {', '.join(missing)}")
    if raw["read_at"] not in READ_TIMES:
        raise BadInput(where, f"entry {i} ({raw['name']}): read_at {raw['read_at']!r} not one of {', '.join(READ_TIMES)}")
    if raw["certainty"] not in CERTAINTIES:
        raise BadInput(where, f"entry {i} ({raw['name']}): certainty {raw['certainty']!r} not one of {', '.join(CERTAINTIES)}")
    kinds = [*(raw.get("scope") or []), *(raw.get("not_scope") or []), *(raw.get("uncertain_scope") or [])]
    bad = [k for k in kinds if k not in PATH_KINDS]
    if bad:
        raise BadInput(where, f"entry {i} ({raw['name']}): unknown path kind(s) {bad}; known: {', '.join(PATH_KINDS)}")
    return KnobEntry(
        name=str(raw["name"]), governs=" ".join(str(raw["governs"]).split()),
        scope=tuple(raw.get("scope") or ()), not_scope=tuple(raw.get("not_scope") or ()),
        uncertain_scope=tuple(raw.get("uncertain_scope") or ()), read_at=raw["read_at"],
        source=" ".join(str(raw["source"]).split()), certainty=raw["certainty"],
        read_by=tuple(raw.get("read_by") or ()), read_at_note=raw.get("read_at_note"),
        default=None if raw.get("default") is None else str(raw["default"]),
        note=None if raw.get("note") is None else " ".join(str(raw["note"]).split()),
    )


def lookup(name: str) -> KnobEntry | None:
    """The catalog entry for ``name`` (None when the knob is not catalogued)."""
    return load_catalog().get(name)


def catalog_markdown(path: str | None = None) -> str:
    """The "Entries" section of docs/knob-catalog.md, generated from the YAML (one block per knob)."""
    lines: list[str] = []
    for e in load_catalog(path).values():
        scope = ", ".join(e.scope) or "-"
        if e.not_scope:
            scope += f"; NOT: {', '.join(e.not_scope)}"
        if e.uncertain_scope:
            scope += f"; uncertain: {', '.join(e.uncertain_scope)}"
        lines += [f"### `{e.name}`", "", f"- governs: {e.governs}",
                  f"- scope: {scope}; read at: {e.read_at}" + (f" ({e.read_at_note})" if e.read_at_note else "")
                  + f"; read by: {', '.join(e.read_by) or '-'}; certainty: {e.certainty}"]
        if e.default:
            lines.append(f"- default: {e.default}")
        lines.append(f"- source: {e.source}")
        if e.note:
            lines.append(f"- note: {e.note}")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m forensics.knobs.catalog > entries.md
    print(catalog_markdown(), end="")
