"""`forensics analyze` (stub: being built)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("analyze", help="(not built yet)")
    def _cmd(capture_dir: str) -> None:
        raise typer.Exit(4)
