"""`forensics trace -- CMD`: run a command with the op tracer on, rank-local traces under --out."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from forensics.runtime.launch import launch
from forensics.runtime.output import examples

from forensics.core.errors import EXIT_UNAVAILABLE, EXIT_USAGE, BadInput
from forensics.core.formats.optrace import EVIDENCE_LEVELS, GRANULARITIES, OPTIMIZER_RECORDS, default_optimizer


class UsageError(ValueError):
    """A bad option value (exit 2, one line)."""


CONFIG_NAME = "optrace-config.json"
ORDERED_MODES = ("auto", "inputs", "all", "off")
COMPILED_MODES = ("compiled", "eager")  # probes/optrace/tracer.py COMPILED_MODES


def _only_leftover_config(out: Path) -> bool:
    """``out`` is a directory holding nothing but the config of a run that traced nothing."""
    if out.is_symlink() or not out.is_dir():
        return False
    names = os.listdir(out)
    return names == [CONFIG_NAME] and (out / CONFIG_NAME).is_file()


def _cleanup(out: Path, created: bool) -> None:
    """Remove what a run that traced nothing left: its config and claim, and ``out`` when this run
    made it, so the corrected rerun with the same ``--out`` is accepted."""
    from forensics.runtime.atomic import release_dir  # noqa: PLC0415

    if any(out.glob("rank*/trace*.jsonl")):
        return
    (out / CONFIG_NAME).unlink(missing_ok=True)
    release_dir(out)
    for d in sorted(out.glob("rank*"), reverse=True):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    if created and out.is_dir() and not any(out.iterdir()):
        out.rmdir()


def run_forwarding_signals(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` (:func:`forensics.runtime.launch.launch`: signals passed on, dies with this
    process); its exit status (128+N when signal N ended it), or 128+N when this process was sent
    signal N (it passed it on and waited)."""
    return launch(command, env, who="forensics trace", what="the traced command").status


def trace_command(command: list[str], out: Path, steps: str = "all", ranks: str = "all",
                  max_records: int = 2_000_000, chunk_digests: bool = True,
                  ordered_digests: str = "auto", compiled: str = "compiled",
                  evidence: str = "full", at: str = "ops", optimizer: str | None = None) -> tuple[int, Path]:
    """Run ``command`` through the probe bootstrap with ``optrace`` on; returns (exit code, out dir).

    ``out`` must be absent or empty (a capture is never overwritten; a config left by a run that
    traced nothing does not count). Works for ``python x.py``, ``torchrun ... x.py`` and anything
    else that starts Python processes: every child inherits the bootstrap through PYTHONPATH and
    writes ``out/rank<R>/trace.jsonl``. Signals to this process are passed on to the command; a
    command ended by signal N gives 128+N. A run that traced nothing leaves nothing behind.
    ``evidence``: the level every tensor entry is recorded at (full, sampled, summary, metadata;
    docs/trace-format.md, "Evidence levels"); ``at``: what a record is, every ATen op (``ops``) or
    every nn.Module call (``modules``, no dispatch mode: the light first pass at scale);
    ``optimizer``: how an optimizer step is recorded, ``ops`` (every op it runs) or ``whole`` (one
    record of its parameters, gradients and state before and after); None: ``ops`` at full evidence
    op by op, ``whole`` otherwise (:func:`forensics.core.formats.optrace.default_optimizer`).
    """
    from probes.config import ProbeConfig, bootstrap_env  # noqa: PLC0415
    from probes.window import parse_ranks, parse_steps  # noqa: PLC0415

    try:
        parse_steps(steps)
        parse_ranks(ranks)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if ordered_digests not in ORDERED_MODES:
        raise UsageError(f"--ordered-digests {ordered_digests!r}: one of {', '.join(ORDERED_MODES)}")
    if compiled not in COMPILED_MODES:
        raise UsageError(f"--compiled {compiled!r}: one of {', '.join(COMPILED_MODES)}")
    if evidence not in EVIDENCE_LEVELS:
        raise UsageError(f"--evidence {evidence!r}: one of {', '.join(EVIDENCE_LEVELS)}")
    if at not in GRANULARITIES:
        raise UsageError(f"--at {at!r}: one of {', '.join(GRANULARITIES)}")
    if optimizer is None:
        optimizer = default_optimizer(evidence, at)
    if optimizer not in OPTIMIZER_RECORDS:
        raise UsageError(f"--optimizer {optimizer!r}: one of {', '.join(OPTIMIZER_RECORDS)}")
    if optimizer == "ops" and at == "modules":
        raise UsageError("--optimizer ops needs --at ops: at module boundaries no op is traced, so each optimizer "
                         "step is one record (--optimizer whole)")
    from forensics.runtime.atomic import claim_dir  # noqa: PLC0415 - one run per --out, even when two start at once

    if _only_leftover_config(out):
        (out / CONFIG_NAME).unlink(missing_ok=True)  # what a run that traced nothing left (older versions)
    created = not os.path.lexists(out)
    if not claim_dir(out):
        raise UsageError(f"{out} exists and is not empty (or another run claimed it); traces are never "
                         "overwritten (choose another --out)")
    cfg = ProbeConfig(out_dir=str(out.resolve()), probes=["optrace"], steps=steps, ranks=ranks,
                      max_records=max_records, chunk_digests=chunk_digests, nvtx=False,
                      extra={"command": list(command), "ordered_digests": ordered_digests, "compiled": compiled,
                             "evidence": evidence, "at": at, "optimizer": optimizer})
    cfg_path = cfg.write(out / CONFIG_NAME)
    try:
        code = run_forwarding_signals(command, bootstrap_env(cfg_path))
    except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
        _cleanup(out, created)
        what = "command not found" if isinstance(e, FileNotFoundError) else f"cannot run it: {e.strerror or e}"
        raise BadInput(command[0], what) from None
    except BaseException:
        _cleanup(out, created)
        raise
    _cleanup(out, created)
    return code, out


def summarise(out: Path) -> list[str]:
    """One line per rank file: records, dropped, and whether it is complete or partial (and why)."""
    from forensics.tracediff.traces.native import read_footer, stream_end_of  # noqa: PLC0415

    lines = []
    for f in sorted(out.glob("rank*/trace*.jsonl")):
        try:
            end = stream_end_of(f)
            foot = read_footer(f)
        except OSError as e:
            lines.append(f"  {f}: unreadable ({e.strerror or e})")
            continue
        if end.partial:
            lines.append(f"  {f}: {end.reason}")
        else:
            drop = f", {foot['dropped']} dropped past --max-records" if foot and foot.get("dropped") else ""
            lines.append(f"  {f}: {end.records or 0} records{drop}")
        graphs = foot.get("compiled_graphs") if foot else None
        if isinstance(graphs, int) and graphs > 0:
            lines.append(f"    {graphs} torch.compile graph(s) ran compiled: their fused kernels are below the "
                         "dispatcher, so a difference born in one shows at its first traced reader (--compiled eager "
                         "records every op, running eager kernels instead)")
    return lines


def register(app: typer.Typer) -> None:
    @app.command(
        "trace",
        epilog=examples("forensics trace --out runA -- python examples/cpu-divergence/train.py --threads 1",
                        "forensics trace --out runA --force -- torchrun --nproc-per-node 2 train.py",
                        "forensics diff runA runB"),
        options_metavar="[OPTIONS] -- CMD ...",
        help="Run CMD with the op-level tracer on: every ATen op per rank with input/output digests, plus "
        "collective, optimizer and backward records, into OUT/rank<R>/trace.jsonl. Then diff two runs "
        "with `forensics diff`.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )
    def trace_cmd(
        ctx: typer.Context,
        steps: str = typer.Option("all", "--steps", help="step window: all | N | A-B | A- | A-B:K (steps advance at optimizer.step)"),
        ranks: str = typer.Option("all", "--ranks", help="ranks to trace: all | 0,3,8-15"),
        out: Path = typer.Option(Path("forensics-trace"), "--out", help="output directory: absent or empty, or an "
                                 "earlier trace replaced with --force (otherwise refused: exit 3)"),
        force: bool = typer.Option(False, "--force", help="replace an earlier trace at --out; it is removed only "
                                   "when the new run ends"),
        max_records: int = typer.Option(2_000_000, "--max-records", min=1, help="record budget per rank; further records are counted as dropped"),
        no_chunks: bool = typer.Option(False, "--no-chunk-digests", help="skip per-chunk digests of reordering-prone ops"),
        ordered: str = typer.Option("auto", "--ordered-digests", metavar="auto|inputs|all|off",
                                    help="order-sensitive digests, which alone prove equal values equal: auto = CPU "
                                         "tensors, inputs and outputs (xxh3, instead of the XOR digest); inputs = also "
                                         "inputs on every device; all = inputs and outputs on every device; off = none "
                                         "(XOR digests only)"),
        compiled: str = typer.Option("compiled", "--compiled", metavar="compiled|eager",
                                     help="torch.compile'd code: compiled = runs compiled, as without the tracer (its "
                                          "ATen calls are recorded, its fused kernels are not); eager = falls back to "
                                          "eager so every op is recorded (other kernels than the program's)"),
        evidence: str = typer.Option("full", "--evidence", metavar="full|sampled|summary|metadata",
                                     help="what each tensor entry records: full = digests of every element (the "
                                          "only level whose equal digests prove equality); sampled = a digest of 64 "
                                          "elements at fixed positions; summary = the sum of the elements' bits; "
                                          "metadata = shape and dtype. A light first pass finds the step and rank; "
                                          "`diff` then proposes the full rerun of that window"),
        at: str = typer.Option("ops", "--at", metavar="ops|modules",
                               help="what a record is: ops = every ATen op (a dispatch mode); modules = every "
                                    "nn.Module call (no dispatch mode: the cheapest first pass; a difference is a "
                                    "candidate inside that module, and `diff` proposes the op-level rerun of its "
                                    "window)"),
        optimizer: str | None = typer.Option(None, "--optimizer", metavar="ops|whole",
                                             help="how an optimizer step is recorded: ops = every op it runs; "
                                                  "whole = one record of the parameters, gradients and optimizer "
                                                  "state before and after, its ops not traced (a difference inside "
                                                  "it is a candidate the full rerun of its window names). Default: "
                                                  "ops at --evidence full, whole at the light levels and --at modules"),
        command_from: Path | None = typer.Option(
            None, "--command-from", metavar="TRACE", help="run the command recorded in this trace (what `forensics "
            "diff`'s next: line gives when the traced command holds a secret, never printed)"),
    ) -> None:
        command = list(ctx.args)
        if command and command[0] == "--":
            command = command[1:]
        if command_from is not None:
            if command:
                typer.echo("forensics trace: --command-from and a command after '--' exclude each other", err=True)
                raise typer.Exit(2)
            from forensics.tracediff.from_report import command_from_trace  # noqa: PLC0415

            command = command_from_trace(command_from)
        if not command:
            typer.echo("forensics trace: no command; usage: forensics trace [OPTIONS] -- CMD ...", err=True)
            raise typer.Exit(2)
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("torch") is None:  # found, not imported: no threads before the fork
            typer.echo("forensics trace: torch is not importable here; the tracer needs it in the traced program",
                       err=True)
            raise typer.Exit(EXIT_UNAVAILABLE)
        import contextlib  # noqa: PLC0415

        from forensics.runtime.output import replacing  # noqa: PLC0415 - exit 3 before the command starts

        # a folder holding only the config of a run that traced nothing is free (trace_command clears it)
        free = _only_leftover_config(out)
        try:
            with contextlib.nullcontext() if free else replacing(out, force=force, flag="--out", what="trace"):
                code, out_dir = trace_command(command, out, steps, ranks, max_records, not no_chunks, ordered,
                                              compiled, evidence, at, optimizer)
        except UsageError as e:
            typer.echo(f"forensics trace: {e}", err=True)
            raise typer.Exit(EXIT_USAGE) from None
        lines = summarise(out_dir) if out_dir.is_dir() else []
        files = len(list(out_dir.glob("rank*/trace*.jsonl"))) if out_dir.is_dir() else 0
        typer.echo(f"forensics trace: {out_dir} ({files} rank file(s)); command exited {code}")
        for line in lines:
            typer.echo(line)
        if not lines:
            typer.echo("forensics trace: no trace written (the command started no Python process, or none "
                       "imported the bootstrap; a rank filter may exclude every rank)", err=True)
        if code != 0:
            raise typer.Exit(code)
