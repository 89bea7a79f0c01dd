"""`forensics analyze CAPTURE_DIR [--site SITE]`: offline, no GPU."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forensics.runtime.output import AS_HELP, FORCE_HELP, check_as, examples

from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK


def register(app: typer.Typer) -> None:
    @app.command("analyze", epilog=examples(
        "forensics analyze tests/fixtures/cpu/conv1d-threads",
        "forensics analyze CAPTURE --site aten.convolution.default#1 --out res --force",
        "forensics analyze nsys-export.sqlite -q",
        "forensics analyze CAPTURE --as csv > verdicts.csv"))
    def analyze_cmd(
        capture_dir: Path = typer.Argument(..., metavar="PATH", help="a capture directory (manifest.yaml), a folder of "
                                           "instrument files, or one instrument file (docs/capture-format.md)"),
        site: Optional[str] = typer.Option(None, "--site", help="only this site (gemm:NT:acc0:grad1) or occurrence (SITE#N)"),
        out: Optional[Path] = typer.Option(None, "--out", help="where analysis.json and report.md go; an existing "
                                           "one is refused unless --force (default PATH/analysis, or the file's folder/analysis: "
                                           "never overwritten, analysis-2, -3... with a note)"),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
        keep_going: bool = typer.Option(False, "--keep-going", help="skip unreadable files (listed) instead of stopping"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no table, only the verdict line"),
        jobs: int = typer.Option(0, "--jobs", "-j", help="worker processes for many ranks (0: one per core; 1: none)"),
        ranks: Optional[str] = typer.Option(None, "--ranks", help="only these ranks (0,3,8-15): one shard of a "
                                            "multi-node analysis (docs/scale.md)"),
        shard: Optional[str] = typer.Option(None, "--shard", help="only the K-th of N contiguous blocks of ranks "
                                            "(K/N, K from 0: $SLURM_PROCID/$SLURM_NTASKS)"),
        merge: Optional[Path] = typer.Option(None, "--merge", help="merge the shards' analysis.json files found in "
                                             "this folder (or its subfolders) instead of reading instrument files"),
        as_: str = typer.Option("text", "--as", metavar="text|json|csv|markdown", callback=check_as, help=AS_HELP),
        scheduler: Optional[str] = typer.Option(None, "--scheduler", help="place the rank groups on a Dask cluster: "
                                                "its scheduler's address (tcp://host:8786, e.g. "
                                                "\"$DASK_SCHEDULER_ADDRESS\") or scheduler file; the workers must see "
                                                "the inputs (the dask extra; docs/scale.md)"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="also write the JSON report here ('-': to stdout, "
                                                "instead of the text, as --as json); an existing file is refused "
                                                "unless --force"),
    ) -> None:
        """Count launches per instrument and NAME kernels that two independent instruments agree on.

        Exit 0: at least one kernel NAMED; 1: none NAMED; 2: bad site; 3: bad input (not a
        capture, a corrupt file, --out exists without --force); 4: --out could not be written;
        70: internal error.
        """
        from forensics.runtime.atomic import CannotWrite
        from forensics.runtime.console import make_console
        from forensics.runtime.output import emit_as
        from forensics.core.errors import doing
        from forensics.judge.report import analysis_json, print_table, verdict_line, verdict_rows, write_outputs
        from forensics.judge.shards import analyze_ranks, merge_shards

        if site:  # a site the capture never recorded: exit 2 with a did-you-mean, not "nothing NAMED"
            from forensics.commands.suggest import check_site_in_capture

            check_site_in_capture(capture_dir, site)
        from forensics.runtime.output import check_output, is_stdout, json_as, replacing, write_json

        as_ = json_as(json_out, as_)
        check_output(json_out, force=force, flag="--json", what="--json report")  # before any file is read
        with replacing(out, force=force, flag="--out", what="analysis folder"):  # refused before any file is read
            with doing(f"analysing the capture {capture_dir}"):
                if merge is not None:
                    an = merge_shards(capture_dir, merge, site=site)
                else:
                    an = analyze_ranks(capture_dir, site=site, keep_going=keep_going, jobs=jobs, ranks=ranks, shard=shard,
                                       scheduler=scheduler)
            # --as json|csv|markdown: the JSON report or the verdict rows alone on stdout, the rest on stderr
            console = make_console(stderr=as_ != "text")
            if as_ != "text":
                emit_as(as_, analysis_json(an), *(verdict_rows(an) if len(an.verdicts) else ([], [])))
            elif not quiet:
                with doing("printing the verdict table"):
                    print_table(an, console)
            target = out or (capture_dir / "analysis" if capture_dir.is_dir() else capture_dir.parent / "analysis")
            n = an.named["kernel"].nunique() if an.any_named() else 0
            verdict = verdict_line(an)
            try:
                written = write_outputs(an, target)
            except CannotWrite as e:
                if out is not None:  # the user asked for these files: say the verdict, then fail (exit 4)
                    console.print(verdict, markup=False)
                    raise
                console.print(f"note: analysis outputs not written: {e}", markup=False)
            else:
                if written and written[0].parent != target:
                    console.print(f"note: {target} already holds earlier output; wrote {written[0].parent} instead "
                                  "(a default location is never overwritten; --out DIR --force replaces one)",
                                  markup=False)
                console.print(f"wrote {', '.join(str(p) for p in written)}", markup=False)
            if json_out is not None and not is_stdout(json_out):  # '-': printed above, as --as json
                write_json(json_out, analysis_json(an), force=force)
                console.print(f"report: {json_out}", markup=False)
        console.print(verdict, markup=False)
        raise typer.Exit(EXIT_OK if n else EXIT_NOT_NAMED)
