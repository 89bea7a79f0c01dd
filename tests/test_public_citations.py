"""What ships cites public sources only (issue 16 item 9).

A user of a plain clone can open neither a development machine's paths nor our internal reference
notes, so no tracked text file names them. Tests that need the shared corpus refer to it relatively
(``../shared/corpus/...``) and skip when it is absent; that stays allowed.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: absolute paths of the development machines, and the internal reference notes by name
FORBIDDEN = re.compile(r"/work/(shared|main|h-[a-z]+)\b|instrument-formats\.md|peers\.md|seeds/method|shared/reference/")
TEXT = (".py", ".md", ".yaml", ".yml", ".txt", ".toml", ".cfg", ".ini", ".sh", ".rst")
SELF = {"tests/test_public_citations.py", "tests/test_knob_scope.py"}  # they hold the patterns themselves


def _tracked() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
        out = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    return [f for f in out if f.endswith(TEXT) and f not in SELF]


def test_no_machine_path_or_internal_reference_in_tracked_text():
    hits = []
    for rel in _tracked():
        path = ROOT / rel
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:120]}")
    assert hits == [], "\n".join(hits)
