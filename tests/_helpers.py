"""Assertions shared by the tests (import: ``from tests._helpers import assert_bad_input``)."""
from __future__ import annotations

import os

from forensics.core.errors import EXIT_BAD_INPUT

PREFIX = "forensics: bad input: "


def assert_bad_input(code: int, err: str, *, file: str | os.PathLike[str] | None = None, line: int | None = None,
                     needle: str | None = None, out: str = "", prefix: str = PREFIX) -> str:
    """Bad input as the CLI reports it: exit 3, one line on stderr (``forensics: bad input: FILE[:LINE]:
    why``; an existing output refused reads ``forensics: PATH exists ...``: pass ``prefix="forensics: "``)
    that names ``file`` (its name, or its path) and, given ``line``, ``FILE:LINE``; no traceback on
    either stream. Returns that line."""
    lines = err.strip().splitlines()
    assert code == EXIT_BAD_INPUT, f"exit {code}, not {EXIT_BAD_INPUT}\n{out}{err}"
    assert len(lines) == 1 and lines[0].startswith(prefix), f"not one line starting {prefix!r}:\n{err}"
    assert "Traceback" not in out + err, out + err
    text = lines[0]
    if file is not None:
        name = os.path.basename(os.fspath(file))
        assert name in text, f"{name} not named: {text}"
        if line is not None:
            assert f"{name}:{line}:" in text, f"{name}:{line}: not named: {text}"
    if needle is not None:
        assert needle in text, f"{needle!r} not in: {text}"
    return text
