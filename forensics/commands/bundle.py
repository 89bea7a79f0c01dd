"""`forensics bundle CAPTURE_DIR -o bundle.tar.gz [--site SITE]`: the evidence bundle (offline, no GPU)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forensics.runtime.output import FORCE_HELP, examples


def register(app: typer.Typer) -> None:
    @app.command("bundle", epilog=examples(
        "forensics bundle CAPTURE -o evidence.tar.gz",
        "forensics bundle CAPTURE -o evidence.tar.gz --site aten.mm.default#1 --force"))
    def bundle_cmd(
        capture_dir: Path = typer.Argument(..., metavar="CAPTURE_DIR", help="capture directory (has manifest.yaml)"),
        out: Path = typer.Option(..., "--out", "-o", help="bundle to write (.tar.gz); an existing one is refused "
                                 "unless --force"),
        site: Optional[str] = typer.Option(None, "--site", help="site (gemm:NT:acc0:grad1) or occurrence (SITE#N); "
                                                                 "default: the first divergent origin"),
        section: Optional[list[Path]] = typer.Option(None, "--section", help="extra report section: JSON "
                                                     "{title, markdown, data}, e.g. a knob scope report (repeatable)"),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
    ) -> None:
        """Write report.md, evidence.json, the site's raw records, the redacted manifest and repro.py as one tar.gz.

        Exit 0: written; 3: bad input (no such site, unreadable capture, output exists without --force).
        """
        from forensics.evidence.bundle import read_section, write_bundle
        from forensics.runtime.output import check_output

        check_output(out, force=force, flag="-o", what="bundle")
        path = write_bundle(capture_dir, out, site=site, sections=[read_section(p) for p in section or []],
                            overwrite=force)
        typer.echo(f"wrote {path}")
