"""`forensics analyze CAPTURE_DIR [--site SITE]`: offline, no GPU."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forensics.errors import EXIT_NOT_NAMED, EXIT_OK


def register(app: typer.Typer) -> None:
    @app.command("analyze")
    def analyze_cmd(
        capture_dir: Path = typer.Argument(..., help="capture directory (has manifest.yaml)"),
        site: Optional[str] = typer.Option(None, "--site", help="only this site (gemm:NT:acc0:grad1) or occurrence (SITE#N)"),
        out: Optional[Path] = typer.Option(None, "--out", help="where analysis.json and report.md go (default CAPTURE_DIR/analysis)"),
        keep_going: bool = typer.Option(False, "--keep-going", help="skip unreadable files (listed) instead of stopping"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no table, only the verdict line"),
    ) -> None:
        """Count launches per instrument and NAME kernels that two independent instruments agree on.

        Exit 0: at least one kernel NAMED; 1: none NAMED; 3: bad input.
        """
        from forensics.console import make_console

        from forensics.judge.analysis import analyze
        from forensics.judge.report import print_table, write_outputs

        an = analyze(capture_dir, site=site, keep_going=keep_going)
        console = make_console()
        if not quiet:
            print_table(an, console)
        target = out or (capture_dir / "analysis")
        try:
            written = write_outputs(an, target)
            console.print(f"wrote {', '.join(str(p) for p in written)}")
        except OSError as e:
            console.print(f"[yellow]could not write outputs to {target}: {e.strerror}[/yellow]")
        n = an.named["kernel"].nunique() if an.any_named() else 0
        console.print(f"verdict: {n} kernel(s) NAMED" if n else "verdict: no kernel NAMED")
        raise typer.Exit(EXIT_OK if n else EXIT_NOT_NAMED)
