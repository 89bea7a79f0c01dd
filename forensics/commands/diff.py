"""`forensics diff A B`: the first divergent op per rank, its verdict, the pattern, the next command."""
from __future__ import annotations

from pathlib import Path

import typer

from forensics.runtime.output import AS_HELP, FORCE_HELP, check_as, examples

from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK

#: ``diff --as csv|markdown``: one row per rank, its first divergence (empty when clean).
ROW_COLUMNS = ["rank", "records_compared", "artifacts_total", "verdict", "evidence", "identity", "seq", "step",
               "phase", "autograd_node", "site", "occurrence", "inputs_matched", "how", "partial_a", "partial_b"]


def diff_rows(payload: dict) -> tuple[list[str], list[list]]:
    """The rank table of a diff's JSON report (what ``--as csv|markdown`` prints): every rank."""
    rows = []
    for key, r in sorted(payload.get("ranks", {}).items(), key=lambda kv: int(kv[0])):
        d = r.get("first_divergence") or {}
        rows.append([r.get("rank", key), r.get("records_compared"), r.get("artifacts_total"),
                     d.get("verdict", "no divergence" if r.get("first_divergence") is None else ""),
                     d.get("evidence"), d.get("identity"), d.get("seq"), d.get("step"), d.get("phase"),
                     d.get("autograd_node"), d.get("site"), d.get("occurrence"), d.get("inputs_matched"),
                     d.get("how"), r.get("partial_a"), r.get("partial_b")])
    return ROW_COLUMNS, rows


def register(app: typer.Typer) -> None:
    @app.command(
        "diff",
        epilog=examples("forensics diff runA runB", "forensics diff runA runB --json diff.json --force",
                        "forensics diff runA runB --json - | jq .pattern",
                        "forensics diff runA runB --as csv > ranks.csv"),
        help="Diff two op-level traces (directories or single rank files): per rank the first divergent "
        "record (ORIGIN / RECEIVER / INPUTS_UNKNOWN / CONTROL_FLOW), the cross-rank pattern, the site and the "
        "next command. Partial traces (killed or interrupted runs) are compared up to where they stop. "
        "Exit 0: no divergence; 1: divergence found; 2: usage; 3: bad input (--json exists without --force).",
    )
    def diff_cmd(
        run_a: Path = typer.Argument(..., metavar="RUN_A", help="trace of run A (directory or rank file)"),
        run_b: Path = typer.Argument(..., metavar="RUN_B", help="trace of run B (directory or rank file)"),
        fmt: str = typer.Option("auto", "--format", metavar="auto|native|megatron|debugmode|torchtitan",
                                help="trace reader: auto detects it (two traces of different formats are refused)"),
        json_out: Path | None = typer.Option(None, "--json", help="write the JSON report here ('-': to stdout, "
                                             "instead of the text); an existing file is refused unless --force"),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
        rank: int | None = typer.Option(None, "--rank", help="compare this rank only"),
        window: int = typer.Option(16_384, "--window", min=256,
                                   help="records held per side while aligning (bounds memory; ops reordered by "
                                        "more than this count as control flow)"),
        jobs: int = typer.Option(0, "--jobs", "-j", help="worker processes for many ranks (0: one per core; 1: none)"),
        ranks: str | None = typer.Option(None, "--ranks", help="only these ranks (0,3,8-15): one shard of a "
                                         "multi-node diff (docs/scale.md)"),
        shard: str | None = typer.Option(None, "--shard", help="only the K-th of N contiguous blocks of ranks "
                                         "(K/N, K from 0: $SLURM_PROCID/$SLURM_NTASKS)"),
        merge: Path | None = typer.Option(None, "--merge", help="merge the shards' --json reports found in this "
                                          "folder (or its subfolders) instead of reading the traces' records"),
        as_: str = typer.Option("text", "--as", metavar="text|json|csv|markdown", callback=check_as, help=AS_HELP),
        scheduler: str | None = typer.Option(None, "--scheduler", help="place the rank groups on a Dask cluster: "
                                                "its scheduler's address (tcp://host:8786, e.g. "
                                                "\"$DASK_SCHEDULER_ADDRESS\") or scheduler file; the workers must see "
                                                "the inputs (the dask extra; docs/scale.md)"),
    ) -> None:
        from forensics.runtime.output import check_output, emit_as, is_stdout, write_json  # noqa: PLC0415

        check_output(json_out, force=force, flag="--json", what="--json report")  # before any trace is read
        from forensics.tracediff.diff import diff_paths, format_report  # noqa: PLC0415
        from forensics.tracediff.shards import diff_ranks, merge_reports  # noqa: PLC0415

        if merge is not None:
            report = merge_reports(run_a, run_b, merge, fmt=fmt)
        elif rank is not None:
            report = diff_paths(run_a, run_b, fmt=fmt, rank=rank, window=window)
        else:
            report = diff_ranks(run_a, run_b, fmt=fmt, window=window, jobs=jobs, ranks=ranks, shard=shard,
                                scheduler=scheduler)
        if as_ != "text":  # the JSON report or its rank rows alone on stdout
            payload = report.to_json()
            emit_as(as_, payload, *diff_rows(payload))
        elif not is_stdout(json_out):  # a terminal wraps between words only (never inside '--' or a path)
            from forensics.runtime.console import echo_plain, make_console  # noqa: PLC0415

            echo_plain(make_console(), format_report(report))
        if json_out is not None:  # whole or nothing (forensics.runtime.atomic); '-': the JSON alone on stdout
            if write_json(json_out, report.to_json(), force=force) is not None and as_ == "text":
                typer.echo(f"report: {json_out}")
        raise typer.Exit(EXIT_NOT_NAMED if report.diverged else EXIT_OK)
