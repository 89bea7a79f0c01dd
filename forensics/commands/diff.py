"""`forensics diff` (stub: being built)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("diff", help="(not built yet)")
    def _cmd() -> None:
        typer.echo("forensics diff: not built yet", err=True)
        raise typer.Exit(4)
