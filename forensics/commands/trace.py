"""`forensics trace -- CMD`: run a command with the op tracer on, rank-local traces under --out."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

from forensics.errors import EXIT_UNAVAILABLE, EXIT_USAGE, BadInput


class UsageError(ValueError):
    """A bad option value (exit 2, one line)."""


def trace_command(command: list[str], out: Path, steps: str = "all", ranks: str = "all",
                  max_records: int = 2_000_000, chunk_digests: bool = True) -> tuple[int, Path]:
    """Run ``command`` through the probe bootstrap with ``optrace`` on; returns (exit code, out dir).

    ``out`` must be absent or empty (a capture is never overwritten). Works for ``python x.py``,
    ``torchrun ... x.py`` and anything else that starts Python processes: every child inherits
    the bootstrap through PYTHONPATH and writes ``out/rank<R>/trace.jsonl``.
    """
    from probes.config import ProbeConfig, bootstrap_env  # noqa: PLC0415
    from probes.window import parse_ranks, parse_steps  # noqa: PLC0415

    try:
        parse_steps(steps)
        parse_ranks(ranks)
    except ValueError as e:
        raise UsageError(str(e)) from None
    from forensics.atomic import claim_dir  # noqa: PLC0415 - one run per --out, even when two start at once

    if not claim_dir(out):
        raise UsageError(f"{out} exists and is not empty (or another run claimed it); traces are never "
                         "overwritten (choose another --out)")
    cfg = ProbeConfig(out_dir=str(out.resolve()), probes=["optrace"], steps=steps, ranks=ranks,
                      max_records=max_records, chunk_digests=chunk_digests, nvtx=False,
                      extra={"command": list(command)})
    cfg_path = cfg.write(out / "optrace-config.json")
    try:
        proc = subprocess.run(command, env=bootstrap_env(cfg_path), check=False)
    except FileNotFoundError:
        raise BadInput(command[0], "command not found") from None
    return proc.returncode, out


def summarise(out: Path) -> list[str]:
    """One line per rank file: records, dropped, complete."""
    from forensics.tracediff.traces.native import read_footer  # noqa: PLC0415

    lines = []
    for f in sorted(out.glob("rank*/trace*.jsonl")):
        foot = read_footer(f)
        if foot is None:
            lines.append(f"  {f}: no footer (the process did not close the trace)")
        else:
            drop = f", {foot['dropped']} dropped past --max-records" if foot.get("dropped") else ""
            lines.append(f"  {f}: {foot.get('records', 0)} records{drop}")
    return lines


def register(app: typer.Typer) -> None:
    @app.command(
        "trace",
        help="forensics trace [OPTIONS] -- CMD ...  Run CMD with the op-level tracer on: every ATen op per rank with input/output digests, plus "
        "collective, optimizer and backward records, into OUT/rank<R>/trace.jsonl. Then diff two runs "
        "with `forensics diff`.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def trace_cmd(
        ctx: typer.Context,
        steps: str = typer.Option("all", "--steps", help="step window: all | N | A-B | A- | A-B:K (steps advance at optimizer.step)"),
        ranks: str = typer.Option("all", "--ranks", help="ranks to trace: all | 0,3,8-15"),
        out: Path = typer.Option(Path("forensics-trace"), "--out", help="output directory (must be absent or empty)"),
        max_records: int = typer.Option(2_000_000, "--max-records", min=1, help="record budget per rank; further records are counted as dropped"),
        no_chunks: bool = typer.Option(False, "--no-chunk-digests", help="skip per-chunk digests of reordering-prone ops"),
    ) -> None:
        command = list(ctx.args)
        if command and command[0] == "--":
            command = command[1:]
        if not command:
            typer.echo("forensics trace: no command; usage: forensics trace [OPTIONS] -- CMD ...", err=True)
            raise typer.Exit(2)
        try:
            import torch  # noqa: F401, PLC0415
        except ImportError:
            typer.echo("forensics trace: torch is not importable here; the tracer needs it in the traced program",
                       err=True)
            raise typer.Exit(EXIT_UNAVAILABLE) from None
        try:
            code, out_dir = trace_command(command, out, steps, ranks, max_records, not no_chunks)
        except UsageError as e:
            typer.echo(f"forensics trace: {e}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        lines = summarise(out_dir)
        typer.echo(f"forensics trace: {out_dir} ({len(lines)} rank file(s)); command exited {code}")
        for line in lines:
            typer.echo(line)
        if not lines:
            typer.echo("forensics trace: no trace written (the command started no Python process, or none "
                       "imported the bootstrap; a rank filter may exclude every rank)", err=True)
        if code != 0:
            raise typer.Exit(code)
