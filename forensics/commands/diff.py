"""`forensics diff A B`: the first divergent op per rank, its verdict, the pattern, the next command."""
from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from forensics.errors import EXIT_NOT_NAMED, EXIT_OK, EXIT_USAGE


def register(app: typer.Typer) -> None:
    @app.command(
        "diff",
        help="Diff two op-level traces (directories or single rank files): per rank the first divergent "
        "record (ORIGIN / RECEIVER / INPUTS_UNKNOWN / CONTROL_FLOW), the cross-rank pattern, the site and the "
        "next command. Partial traces (killed or interrupted runs) are compared up to where they stop. "
        "Exit 0: no divergence; 1: divergence found; 2: usage; 3: bad input.",
    )
    def diff_cmd(
        run_a: Path = typer.Argument(..., metavar="RUN_A", help="trace of run A (directory or rank file)"),
        run_b: Path = typer.Argument(..., metavar="RUN_B", help="trace of run B (directory or rank file)"),
        fmt: str = typer.Option("auto", "--format", metavar="auto|native|megatron|debugmode",
                                help="trace reader: auto detects it (two traces of different formats are refused)"),
        json_out: Path | None = typer.Option(None, "--json", help="write the JSON report here (never overwrites)"),
        rank: int | None = typer.Option(None, "--rank", help="compare this rank only"),
        window: int = typer.Option(16_384, "--window", min=256,
                                   help="records held per side while aligning (bounds memory; ops reordered by "
                                        "more than this count as control flow)"),
    ) -> None:
        from forensics.tracediff.diff import diff_paths, format_report  # noqa: PLC0415

        if json_out is not None and os.path.lexists(json_out):  # a dangling link too
            typer.echo(f"forensics diff: {json_out} exists; not overwriting it (choose another --json path)", err=True)
            raise typer.Exit(EXIT_USAGE)
        report = diff_paths(run_a, run_b, fmt=fmt, rank=rank, window=window)
        typer.echo(format_report(report))
        if json_out is not None:
            from forensics.atomic import write_atomic  # noqa: PLC0415 - whole or nothing, never overwrites

            write_atomic(json_out, json.dumps(report.to_json(), indent=1, default=str) + "\n", what="--json report",
                         hint="choose another --json path")
            typer.echo(f"report: {json_out}")
        raise typer.Exit(EXIT_NOT_NAMED if report.diverged else EXIT_OK)
