"""``forensics knob NAME --site SITE --rows ... --values V1,V2 -- CMD``: does a knob make the site batch-invariant?

The sweep of :mod:`forensics.sweep.run` with one setting per value (the knob set in the replay
arms' environment) next to the setting as run; one table per setting and one line per value.
A thread-count knob's arms leave the thread count to the knob (the replay pins it otherwise).
"""
from __future__ import annotations

from typing import Any

from forensics.core.errors import EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE

#: Knobs that set the intra-op thread count: the replay must not pin it in their arms.
THREAD_KNOBS = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DOMAIN_NUM_THREADS", "MKL_DYNAMIC"}


def settings_for(name: str, values: list[str]) -> list[Any]:
    from forensics.sweep.run import BASE, Setting  # noqa: PLC0415

    out = [Setting(BASE)]
    for i, v in enumerate(values, 1):
        env = {name: v}
        if name in THREAD_KNOBS:
            env["FORENSICS_SWEEP_THREADS"] = "env"
        out.append(Setting(f"v{i}", env))
    return out


def knob_lines(name: str, res: Any) -> list[str]:
    """One line per value: does it make the site batch-invariant, against the setting as run."""
    from forensics.sweep.run import BASE  # noqa: PLC0415
    from forensics.sweep.table import INVARIANT, VARIANT  # noqa: PLC0415

    base = res.tables[BASE]

    def state(t: Any) -> str:
        if t.verdict == VARIANT:
            return f"VARIANT (first varying size {t.first_varying})"
        return t.verdict

    lines = []
    for s in res.settings:
        if s.name == BASE:
            continue
        t = res.tables[s.name]
        value = s.env.get(name)
        if t.verdict == INVARIANT and base.verdict == VARIANT:
            head = f"{name}={value}: MAKES the site BATCH-INVARIANT over the tried sizes"
        elif t.verdict == INVARIANT and base.verdict == INVARIANT:
            head = f"{name}={value}: the site stays BATCH-INVARIANT (it already was as run)"
        elif t.verdict == VARIANT and base.verdict == VARIANT:
            same = [r.rows for r in t.rows if r.equal is False] == [r.rows for r in base.rows if r.equal is False]
            head = (f"{name}={value}: does NOT make the site batch-invariant"
                    + ("" if same else " (the varying sizes change)"))
        elif t.verdict == VARIANT:
            head = f"{name}={value}: makes the site VARIANT (it was BATCH-INVARIANT as run)"
        else:
            head = f"{name}={value}: cannot tell"
        varying = ", ".join(str(r.rows) for r in t.rows if r.equal is False) or "none"
        base_varying = ", ".join(str(r.rows) for r in base.rows if r.equal is False) or "none"
        lines.append(f"{head}: {state(t)} with it, {state(base)} as run; varying sizes {varying} with it, "
                     f"{base_varying} as run")
        if s.name in res.repeats:
            base_rep = res.repeats.get(BASE)
            lines.append(f"{name}={value}: repeats {res.repeats[s.name].verdict} with it, "
                         f"{base_rep.verdict if base_rep is not None else 'not repeated'} as run (a separate question: "
                         "same call, same bits)")
    return lines


def run_and_print(name: str, site: str, values: list[str], command: list[str], rows: str, **kw: Any) -> int:
    from forensics.runtime.console import make_console  # noqa: PLC0415
    from forensics.sweep import run as sweep  # noqa: PLC0415
    from forensics.sweep.cli import print_summary  # noqa: PLC0415
    from forensics.sweep.rows import NotBatchable  # noqa: PLC0415

    console = make_console()
    err = make_console(stderr=True)
    try:
        sweep.parse_rows(rows)
        sweep.parse_repeat(kw.get("repeat"))
        res = sweep.run_sweep(site, command, rows, settings=settings_for(name, values), **kw)
    except ValueError as e:
        if isinstance(e, NotBatchable):
            err.print(f"forensics knob: --rows refused: {e}", soft_wrap=True, markup=False)
        else:
            err.print(f"forensics knob: {e}", soft_wrap=True, markup=False)
        return EXIT_USAGE
    except sweep.SweepRefused as e:
        err.print(f"forensics knob: --rows: nothing to sweep: {e}", soft_wrap=True, markup=False)
        return EXIT_USAGE if "budget" in str(e) else EXIT_UNAVAILABLE
    print_summary(res, console)
    console.print(f"batch invariance under {name} (forensics kernel --rows per value):", soft_wrap=True, markup=False)
    for line in knob_lines(name, res):
        console.print(f"  {line}", soft_wrap=True, markup=False)
    from forensics.sweep.table import UNCHECKED  # noqa: PLC0415

    return EXIT_UNAVAILABLE if any(t.verdict == UNCHECKED for t in res.tables.values()) else EXIT_OK
