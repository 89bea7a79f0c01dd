"""What a bundle carries from a batch-invariance sweep (``<capture>/sweep/``, written by ``kernel --rows``)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: sweep file -> bundle member (text members are redacted like every other; the inputs are tensor bytes)
MEMBERS = {"table.md": "sweep-table.md", "sweep.json": "sweep.json", "repro.py": "sweep-repro.py",
           "sweep-plan.json": "sweep-plan.json", "site-inputs.pt": "sweep-site-inputs.pt"}


def sweep_parts(root: Path | None) -> tuple[list[dict[str, Any]], dict[str, bytes]]:
    """The report section (table and verdict per setting) and the members; nothing when the capture has no sweep."""
    d = Path(root) / "sweep" if root is not None else None
    if d is None or not (d / "sweep.json").is_file():
        return [], {}
    data = json.loads((d / "sweep.json").read_text())
    md = (d / "table.md").read_text() if (d / "table.md").is_file() else ""
    lines = [f"Site {data.get('site')} ({data.get('op')}), replayed on its kept inputs (every row count and repeat "
             "in one fresh process under the instruments). `sweep-repro.py` (with --rows) runs the anchor-row check "
             "with torch only, on the kept inputs next to it (`sweep-site-inputs.pt`, `sweep-plan.json`).", "",
             (md.split("\n", 2)[-1] if md.startswith("# ") else md).replace("\n## ", "\n### ")]
    verdicts = {k: {"verdict": t.get("verdict"), "verdict_line": t.get("verdict_line"),
                    "first_varying": t.get("first_varying")} for k, t in (data.get("tables") or {}).items()}
    repeats = {k: {"verdict": r.get("verdict"), "verdict_line": r.get("verdict_line"), "repeat": r.get("repeat")}
               for k, r in (data.get("repeats") or {}).items()}
    title = "Batch invariance (forensics kernel --rows)" if verdicts else "Determinism (forensics kernel --repeat)"
    section = {"title": title, "markdown": "\n".join(lines), "data": verdicts | ({"repeats": repeats} if repeats else {})}
    members = {}
    for name, member in MEMBERS.items():
        if (d / name).is_file():
            members[member] = (d / name).read_bytes()
    return [section], members
