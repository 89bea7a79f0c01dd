"""`forensics knob NAME [--site SITE] [--path DIR ...] [--values 0,1] [--json F] [--no-cache] [-- CMD ...]`.

Static scope always; dynamic scope (one arm per value through the capture path) when ``--values``
and a command are given (on a CUDA GPU; on the CPU backend where none is present, or with ``--device cpu``).
Exit 0: report written; 2: bad command line;
3: bad input (--json exists without --force), including files or directories under the scanned paths that could not be read (the
report is printed first and lists them); 4: dynamic scope asked for but unavailable here (the static
report is still printed).
"""
from __future__ import annotations

from pathlib import Path

import typer

from forensics.runtime.output import AS_HELP, FORCE_HELP, check_as, examples

from forensics.core.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, Unavailable


def register(app: typer.Typer) -> None:
    @app.command(
        "knob",
        epilog=examples("forensics knob CUBLAS_WORKSPACE_CONFIG --site gemm:NT:acc0:grad1",
                        "forensics knob OMP_NUM_THREADS --site aten.mm.default --json -",
                        "forensics knob OMP_NUM_THREADS --as csv > findings.csv",
                        "forensics knob OMP_NUM_THREADS --site aten.mm.default --values 1,2 -- python train.py"),
        help="Does an environment knob reach a site? Static scope (Python reads/writers/mentions, shared "
        "libraries holding the name, the shipped catalog, verdict ON PATH / NOT ON PATH / CANNOT TELL STATICALLY / UNKNOWN for --site) "
        "and, with --values and '-- CMD', dynamic scope (one capture arm per value). "
        "Exit 0 ok; 2 usage; 3 bad input or unreadable paths under the scanned trees (report printed first); "
        "4 dynamic scope unavailable (static report still printed).",
    )
    def knob_cmd(
        name: str = typer.Argument(..., metavar="NAME", help="environment variable, e.g. CUBLAS_WORKSPACE_CONFIG"),
        command: list[str] | None = typer.Argument(None, metavar="[-- CMD ...]", help="after '--': the command to run one arm per value"),
        site: str | None = typer.Option(None, "--site", help="site (or SITE#N), e.g. gemm:NT:acc0:grad1, aten.mm.default"),
        path: list[Path] | None = typer.Option(None, "--path", help="tree or file to scan (repeatable); default: this Python's site-packages"),
        values: str | None = typer.Option(None, "--values", help="comma-separated values, one capture arm each (needs '-- CMD')"),
        json_out: Path | None = typer.Option(None, "--json", help="write the JSON report here ('-': to stdout, "
                                             "instead of the tables); an existing file is refused unless --force"),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
        no_cache: bool = typer.Option(False, "--no-cache", help="rescan every file (ignore and do not update the cache)"),
        out: Path | None = typer.Option(None, "--out", help="capture directory for the dynamic arms (an existing one "
                                        "is refused unless --force; default forensics-capture, -2, -3...)"),
        steps: str = typer.Option("1-2", "--steps", help="step window of the dynamic capture"),
        jobs: int | None = typer.Option(None, "--jobs", help="worker processes for the static scan (default: CPU count, max 8)"),
        device: str = typer.Option("auto", "--device", help="code path of the site: cuda, cpu or auto (cuda when Transformer Engine "
                                   "is under the scanned paths, cpu when their torch is a CPU build, else cuda); also the capture "
                                   "backend of the dynamic arms (auto: cuda when a GPU is present, else cpu)"),
        uncatalogued: bool = typer.Option(False, "--uncatalogued", help="scan NAME as given even when it is one typo "
                                          "away from a catalogued knob (otherwise: exit 2 with a did-you-mean)"),
        rows: str | None = typer.Option(None, "--rows", help="with --values and '-- CMD': does the knob make the site "
                                        "batch-invariant? the forensics kernel --rows sweep (1,2,3,8 or auto) as run "
                                        "and under each value (docs/batch-invariance.md)"),
        repeat: int | None = typer.Option(None, "--repeat", help="with --rows: N calls per size in each setting's "
                                          "replay process; a determinism verdict per value next to batch invariance"),
        as_: str = typer.Option("text", "--as", metavar="text|json|csv|markdown", callback=check_as, help=AS_HELP),
    ) -> None:
        from forensics.knobs import check_knob_name, scan  # noqa: PLC0415
        from forensics.knobs.catalog import load_catalog, lookup  # noqa: PLC0415
        from forensics.commands.suggest import check_knob_typo, check_op_site  # noqa: PLC0415
        from forensics.knobs.dynamic import IN_TIME_NOTE, late_assignments, run_dynamic, script_of  # noqa: PLC0415
        from forensics.knobs.report import KnobReport, knob_json, knob_rows, render  # noqa: PLC0415
        from forensics.knobs.scope import DEVICES, assess, choose_device  # noqa: PLC0415
        from forensics.core.site import Occurrence, parse_site_or_occurrence  # noqa: PLC0415

        check_knob_name(name)
        if not uncatalogued:  # a typo of a catalogued name: exit 2 with a did-you-mean, before any scan
            check_knob_typo(name, load_catalog())
        parsed_site = parse_site_or_occurrence(site) if site else None  # the one parse of --site
        op_site = parsed_site.site if isinstance(parsed_site, Occurrence) else parsed_site
        if op_site is not None and op_site.is_aten:  # an op torch does not register: exit 2 before any scan
            check_op_site(op_site.name)
        value_list = [v.strip() for v in values.split(",")] if values is not None else []
        if values is not None and not command:
            _usage("--values needs the command to run after '--', e.g. forensics knob NAME --site S --values 0,1 -- python train.py")
        if command and values is None:
            _usage("a command after '--' is run only with --values V1,V2")
        if value_list and parsed_site is None:
            _usage("dynamic scope (--values) needs --site")
        if device not in (*DEVICES, "auto"):
            _usage(f"--device {device!r}: choose cuda, cpu or auto")
        from forensics.runtime.output import check_output, emit_as, is_stdout, replacing, write_json  # noqa: PLC0415

        check_output(json_out, force=force, flag="--json", what="--json report")  # exit 3 before any scan
        if value_list:
            check_output(out, force=force, flag="--out", what="capture", directory=True)

        result = scan(name, [str(p) for p in path] if path else None, use_cache=not no_cache, workers=jobs)
        entry = lookup(name)
        report = KnobReport(name, result, entry)
        if parsed_site is not None:
            chosen, why = choose_device(parsed_site, result, None if device == "auto" else device)
            report.scope = assess(result, parsed_site, entry, device=chosen)
            report.scope.device_note = why
        if command:
            script = script_of(command)
            if script is not None:
                report.late = late_assignments(script, name, entry)
            report.notes.append(f"note: {IN_TIME_NOTE}")
        elif entry is not None and entry.read_before_start:
            report.notes.append(f"note: {name} is read at {entry.read_at}: set it in the launching environment; "
                                "assigning os.environ later in a script can be too late (give '-- CMD' to check a script)")
        code = EXIT_OK
        if rows is not None and as_ != "text":
            _usage("--as prints the knob report; the --rows sweep writes its table (table.md, sweep.json) instead")
        if rows is not None and value_list:  # the batch-invariance sweep per value (forensics.sweep.knob)
            from forensics.sweep.knob import run_and_print  # noqa: PLC0415

            render(report)
            with replacing(out, force=force, flag="--out", what="capture"):
                code = run_and_print(name, str(parsed_site), value_list, list(command or []), rows,
                                     out=str(out) if out else None, steps=steps, repeat=repeat,
                                     device=None if device == "auto" else device)
            raise typer.Exit(code)
        if rows is not None or repeat is not None:
            _usage("--rows (and --repeat with it) needs --site, --values V1,V2 and the command after '--'")
        if value_list:
            try:
                with replacing(out, force=force, flag="--out", what="capture"):
                    report.dynamic = run_dynamic(name, parsed_site, value_list, list(command or []),
                                                 out=str(out) if out else None, steps=steps,
                                                 device=None if device == "auto" else device)
            except Unavailable as e:
                report.dynamic_unavailable = str(e)
                code = EXIT_UNAVAILABLE
            except ValueError as e:  # the capture planner refused the arguments (one line, no traceback)
                _usage(f"dynamic scope: {e}")
        if as_ != "text":  # the JSON report or the findings' rows alone on stdout
            emit_as(as_, knob_json(report), *knob_rows(report))
        elif not is_stdout(json_out):
            render(report)
        if json_out is not None and write_json(json_out, knob_json(report), force=force) is not None and as_ == "text":
            typer.echo(f"report: {json_out}")
        if report.dynamic_unavailable:
            typer.echo(f"forensics knob: {report.dynamic_unavailable}", err=True)
        if result.unreadable:
            first, why = result.unreadable[0]
            more = f" and {len(result.unreadable) - 1} more" if len(result.unreadable) > 1 else ""
            typer.echo(f"forensics knob: {first}: {why}{more} could not be read; the static result above covers only what was read",
                       err=True)
            code = EXIT_BAD_INPUT
        raise typer.Exit(code)


def _usage(message: str) -> None:
    typer.echo(f"forensics knob: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)
