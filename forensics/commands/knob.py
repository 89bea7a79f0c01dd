"""`forensics knob` (stub: being built)."""
from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    @app.command("knob", help="(not built yet)")
    def _cmd() -> None:
        typer.echo("forensics knob: not built yet", err=True)
        raise typer.Exit(4)
