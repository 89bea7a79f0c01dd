"""What ``forensics kernel --rows`` and ``forensics knob --rows`` print; thin over :mod:`forensics.sweep.run`."""
from __future__ import annotations

from typing import Any

from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE


def exit_code(verdicts: list[str]) -> int:
    """0: batch-invariant everywhere; 1: some setting VARIANT; 4: nothing could be checked."""
    from forensics.sweep.table import INVARIANT, VARIANT  # noqa: PLC0415

    if any(v == VARIANT for v in verdicts):
        return EXIT_NOT_NAMED
    if verdicts and all(v == INVARIANT for v in verdicts):
        return EXIT_OK
    return EXIT_UNAVAILABLE


def run_and_print(prog: str, site: str, command: list[str], rows: str, *, quiet: bool = False, **kw: Any) -> int:
    """Run the sweep and print it; refusals are one line (exit 2: the site cannot be swept; 1: it never ran)."""
    from forensics.runtime.console import make_console  # noqa: PLC0415
    from forensics.sweep import run as sweep  # noqa: PLC0415
    from forensics.sweep.rows import NotBatchable  # noqa: PLC0415
    from forensics.sweep.table import print_table  # noqa: PLC0415

    console = make_console()
    err = make_console(stderr=True)
    try:
        sweep.parse_rows(rows)
    except ValueError as e:
        err.print(f"{prog}: {e}", soft_wrap=True, markup=False)
        return EXIT_USAGE
    try:
        res = sweep.run_sweep(site, command, rows, progress=not quiet, **kw)
    except NotBatchable as e:
        err.print(f"{prog}: --rows refused: {e}", soft_wrap=True, markup=False)
        return EXIT_USAGE
    except ValueError as e:  # the capture planner refused the arguments
        err.print(f"{prog}: {e}", soft_wrap=True, markup=False)
        return EXIT_USAGE
    except sweep.SweepRefused as e:
        err.print(f"{prog}: --rows: nothing to sweep: {e}", soft_wrap=True, markup=False)
        return EXIT_USAGE if "budget" in str(e) else EXIT_UNAVAILABLE
    print_summary(res, console, quiet)
    return exit_code([t.verdict for t in res.tables.values()])


def print_summary(res: Any, console: Any, quiet: bool = False) -> None:
    from forensics.sweep.table import print_table  # noqa: PLC0415

    kept = res.kept
    p = res.plan
    for r in res.kernel.passes:
        if r.status != "ok":
            console.print(f"pass {r.name}: {r.status}: {r.reason}  (log: {r.log_path})", soft_wrap=True, markup=False)
    console.print(f"sweep: {res.sweep_dir}  (device: {res.kernel.device})", soft_wrap=True, markup=False)
    console.print(f"site {kept.get('label')} = {p.op}; kept its inputs ({kept.get('bytes')} bytes, "
                  f"{kept.get('threads')} intra-op thread(s)); sliced: {p.what}; used whole: "
                  f"{', '.join(p.kept_whole) or 'nothing'}", soft_wrap=True, markup=False)
    if res.discovered:
        console.print(f"--rows auto: {', '.join(map(str, res.discovered))} added where a plain scan of the auto sizes "
                      "(one process, no instrument) saw the shared rows flip between equal and different",
                      soft_wrap=True, markup=False)
    if res.skipped_rows:
        console.print(f"skipped row counts: {', '.join(res.skipped_rows)}", soft_wrap=True, markup=False)
    for t in res.tables.values():
        if quiet:
            for n in t.notes:
                console.print(f"note: {n}", soft_wrap=True, markup=False)
            console.print(f"verdict ({t.setting}): {t.verdict_line}", soft_wrap=True, markup=False)
        else:
            print_table(t, console)
    first = next(iter(res.tables.values()))
    console.print(f"evidence: {first.evidence}", soft_wrap=True, markup=False)
    d = res.kernel.capture_dir
    console.print(f"wrote {d / 'sweep' / 'table.md'}, {d / 'sweep' / 'sweep.json'}, {d / 'sweep' / 'repro.py'} "
                  f"(replay capture: {d}; forensics bundle {d} carries them)", soft_wrap=True, markup=False)
