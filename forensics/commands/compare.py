"""`forensics compare CAPTURE_DIR [--site SITE] [--json F]`: arms, discriminator table, toggles (offline)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from forensics.runtime.output import AS_HELP, FORCE_HELP, check_as, examples

from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK, BadInput


def register(app: typer.Typer) -> None:
    @app.command("compare", epilog=examples(
        "forensics compare tests/fixtures/cpu/conv1d-threads",
        "forensics compare CAPTURE --site gemm:NT:acc0:grad1 --json - | jq .toggles",
        "forensics compare CAPTURE --as csv > occurrences.csv"))
    def compare_cmd(
        capture_dir: Path = typer.Argument(..., metavar="CAPTURE_DIR", help="capture directory (has manifest.yaml)"),
        site: Optional[str] = typer.Option(None, "--site", help="site (gemm:NT:acc0:grad1) or occurrence (SITE#N)"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="also write the comparison as JSON ('-': to "
                                                "stdout, instead of the text; an existing file is refused)"),
        force: bool = typer.Option(False, "--force", help=FORCE_HELP),
        incomparable: bool = typer.Option(False, "--incomparable", help="diff arms even when they are NOT COMPARABLE "
                                          "(what --force meant before the one output rule)"),
        as_: str = typer.Option("text", "--as", metavar="text|json|csv|markdown", callback=check_as, help=AS_HELP),
    ) -> None:
        """Classify every site occurrence across arms and report the first divergence per rank.

        Exit 0: no divergence between comparable arms; 1: a divergence was found; 3: bad input;
        4: --json could not be written; 70: internal error. A divergence ends with a `next:` command:
        `forensics knob NAME --site SITE` for a toggled knob that changed the site, else `forensics bundle`.
        """
        from forensics.runtime.output import check_output, emit_as, is_stdout, write_json
        from forensics.core.errors import doing
        from forensics.judge.arm_evidence import load_evidence
        from forensics.judge.verdicts import compare_arms, discriminator_table, toggle_report, toggle_text

        if site:  # a site the capture never recorded: exit 2 with a did-you-mean, not "nothing NAMED"
            from forensics.commands.suggest import check_site_in_capture

            check_site_in_capture(capture_dir, site)
        check_output(json_out, force=force, flag="--json", what="--json file")  # before the capture is read
        from forensics.runtime.console import echo_plain, make_console

        console = make_console()

        def echo(line: str) -> None:  # '-', --as: the JSON (rows) alone on stdout; a terminal wraps between words only
            if not is_stdout(json_out) and as_ == "text":
                echo_plain(console, line)
        with doing(f"analysing the capture {capture_dir}"):
            ev = load_evidence(capture_dir)
        if ev.sites.empty:
            raise BadInput(capture_dir, "no site records (sites.jsonl) in this capture: arms cannot be compared "
                                        "occurrence by occurrence (capture with `forensics kernel`)")
        with doing("comparing the arms occurrence by occurrence"):
            comparison = compare_arms(ev, site=site, force=incomparable)
        echo(f"baseline arm: {comparison.baseline}")
        losses = list(getattr(ev.analysis, "losses", None) or [])
        for x in losses:  # what a reader lost (records a probe dropped): every comparison of that arm rests on less
            echo(f"lost: arm {x.get('arm')} rank {x.get('rank')} ({x.get('instrument')}): {x.get('loss')} "
                       f"[{x.get('file')}]")
        from forensics.capture.exits import arm_crash, crash_word
        from forensics.judge.verdicts import arm_entries

        base_crash = arm_crash(arm_entries(ev.manifest).get(comparison.baseline))
        if base_crash:
            echo(f"  {comparison.baseline} {crash_word(base_crash)}: {base_crash} (its log: "
                 f"passes/{comparison.baseline}.log): what it did not run is compared with nothing")
        if not comparison.pairs:
            echo("only one arm in this capture: nothing to compare it with")
        for p in comparison.pairs:
            kind = "toggle " + toggle_text(p.toggle) if p.toggle else "replica"
            if not p.comparable:
                echo(f"{p.arm} ({kind}): NOT COMPARABLE with {p.baseline}: {'; '.join(p.reasons)}"
                     + (" (diffed anyway: --incomparable)" if incomparable else " (--incomparable diffs them anyway)"))
                if not incomparable:
                    continue
            counts = ", ".join(f"{k} {v}" for k, v in sorted(p.counts().items())) or "no occurrence"
            echo(f"{p.arm} ({kind}) vs {p.baseline}: {counts}")
            if p.crash:
                echo(f"  {p.arm} {p.crash_word}: {p.crash} (its log: passes/{p.arm}.log)")
            for rank, fd in sorted(p.first_divergence.items()):
                echo(f"  rank {rank}: first divergence {fd['label']}: {fd['classification']} ({fd['role']}); "
                     f"{fd['detail']}")
        with doing("building the discriminator table and the toggle report"):
            table = discriminator_table(ev, site=site)
            toggles = toggle_report(ev, site=site)
        echo(f"discriminator: {table.statement}")
        for r in toggles.results:
            echo(f"toggle {r.summary()}")
        if comparison.diverged():
            for line in next_lines(capture_dir, comparison, toggles):
                echo(line)
        from forensics.judge.report import compare_json, compare_rows

        payload = compare_json(comparison, table, toggles, losses)
        if as_ != "text":
            emit_as(as_, payload, *compare_rows(comparison))
        if json_out is not None:
            with doing(f"writing {json_out}"):
                if write_json(json_out, payload, force=force, what="--json file") is not None and as_ == "text":
                    typer.echo(f"wrote {json_out}")
        raise typer.Exit(EXIT_NOT_NAMED if comparison.diverged() else EXIT_OK)


def next_lines(capture_dir: Path, comparison, toggles) -> list[str]:  # noqa: ANN001
    """The step after a divergence, as commands to copy (each printed on one line): ``forensics knob`` on
    the first toggled environment knob that changed the kernel, the algo or the bits at the site, then
    ``forensics bundle``; without such a knob, ``forensics bundle`` alone."""
    import shlex

    from forensics.core.site import split_label

    cap = shlex.quote(str(capture_dir))
    bundle = f"forensics bundle {cap} -o bundle.tar.gz"
    first = next((fd for p in comparison.pairs if p.comparable for _, fd in sorted(p.first_divergence.items())), None)
    site = split_label(str(first["label"]))[0] if first and first.get("label") else None
    for r in toggles.results:
        knobs = [k for k in r.toggle if k != "command"]  # an --arm-command arm is a command, not a knob
        if site and knobs and r.comparable and (r.kernel_changed or r.algo_changed or r.bits_changed):
            return [f"next: forensics knob {shlex.quote(knobs[0])} --site {shlex.quote(site)}", f"then: {bundle}"]
    return [f"next: {bundle}"]
