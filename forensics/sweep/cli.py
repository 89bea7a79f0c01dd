"""What ``forensics kernel --rows`` and ``forensics knob --rows`` print; thin over :mod:`forensics.sweep.run`."""
from __future__ import annotations

from typing import Any

from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE


def exit_code(verdicts: list[str]) -> int:
    """0: batch-invariant (and deterministic) everywhere; 1: some setting VARIANT, NONDETERMINISTIC or
    PROCESS-DEPENDENT; 4: nothing could be checked."""
    from forensics.core.words import DETERMINISTIC, NONDETERMINISTIC, PROCESS_DEPENDENT  # noqa: PLC0415
    from forensics.sweep.table import INVARIANT, VARIANT  # noqa: PLC0415

    if any(v in (VARIANT, NONDETERMINISTIC, PROCESS_DEPENDENT) for v in verdicts):
        return EXIT_NOT_NAMED
    if verdicts and all(v in (INVARIANT, DETERMINISTIC) for v in verdicts):
        return EXIT_OK
    return EXIT_UNAVAILABLE


def run_and_print(prog: str, site: str, command: list[str], rows: str | None, *, quiet: bool = False,
                  **kw: Any) -> int:
    """Run the sweep (``rows`` None: the repeat axis alone) and print it; refusals are one line (exit 2:
    the site cannot be swept; 4: it never ran)."""
    from forensics.runtime.console import make_console  # noqa: PLC0415
    from forensics.sweep import run as sweep  # noqa: PLC0415
    from forensics.sweep.rows import NotBatchable  # noqa: PLC0415
    from forensics.sweep.table import print_table  # noqa: PLC0415

    console = make_console()
    err = make_console(stderr=True)
    try:
        if rows is not None:
            sweep.parse_rows(rows)
        sweep.parse_repeat(kw.get("repeat"))
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
        err.print(f"{prog}: {'--rows' if rows is not None else '--repeat'}: nothing to sweep: {e}", soft_wrap=True,
                  markup=False)
        return EXIT_USAGE if "budget" in str(e) else EXIT_UNAVAILABLE
    print_summary(res, console, quiet)
    return exit_code([t.verdict for t in res.tables.values()] + [r.verdict for r in res.repeats.values()])


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
    if res.auto:
        from forensics.sweep.run import AUTO_DENSE, AUTO_PER_OCTAVE  # noqa: PLC0415
        from forensics.sweep.table import ranges  # noqa: PLC0415

        console.print(f"--rows auto tried {len(res.rows)} sizes: {ranges(res.rows)} (every size up to {AUTO_DENSE}, "
                      f"then {AUTO_PER_OCTAVE} evenly spaced per doubling, then the full count); no other size was "
                      "checked", soft_wrap=True, markup=False)
    console.print(f"replay: one process per setting ({res.seconds.get('replay')} s), after one keep run "
                  f"({res.seconds.get('keep')} s); {res.repeat} call(s) per size"
                  + (" (the full size at least 2)" if res.tables else ""), soft_wrap=True, markup=False)
    if res.skipped_rows:
        console.print(f"skipped row counts: {', '.join(res.skipped_rows)}", soft_wrap=True, markup=False)
    for t in res.tables.values():
        if quiet:
            for n in t.notes:
                console.print(f"note: {n}", soft_wrap=True, markup=False)
            console.print(f"verdict ({t.setting}): {t.verdict_line}", soft_wrap=True, markup=False)
        else:
            print_table(t, console)
    from forensics.sweep.table import print_repeats  # noqa: PLC0415

    for r in res.repeats.values():
        print_repeats(r, console)
    first = next(iter(res.tables.values()), None) or next(iter(res.repeats.values()))
    console.print(f"evidence: {first.evidence}", soft_wrap=True, markup=False)
    d = res.kernel.capture_dir
    repro = f", {d / 'sweep' / 'repro.py'}" if res.tables else ""
    console.print(f"wrote {d / 'sweep' / 'table.md'}, {d / 'sweep' / 'sweep.json'}{repro} "
                  f"(replay capture: {d}; forensics bundle {d} carries them)", soft_wrap=True, markup=False)
