"""`forensics kernel --site SITE [...] -- CMD ...`: rerun the window under the instruments, then analyse."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from forensics.runtime.output import AS_HELP, check_as, examples

from forensics.core.errors import EXIT_BAD_INPUT, EXIT_NOT_NAMED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE

SHIPPED_CAPTURE = "tests/fixtures/cpu/conv1d-threads"  # a real capture of the CPU backend, in the repository


def _split(values: Optional[List[str]]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def register(app: typer.Typer) -> None:
    @app.command("kernel", context_settings={"allow_interspersed_args": False}, epilog=examples(
        "forensics kernel --site gemm:NT:acc0:grad1 --out cap -- python train.py",
        "forensics kernel --from diff.json --out cap --force",
        "forensics kernel --site aten.mm.default --device cpu --toggle OMP_NUM_THREADS=2 -- python train.py",
        "forensics kernel --site aten.mm.default --rows auto -- python train.py",
        "forensics kernel --site aten.mm.default --device cpu --as csv -- python train.py > verdicts.csv"))
    def kernel_cmd(
        command: Optional[List[str]] = typer.Argument(None, metavar="[-- CMD ...]",
                                                      help="after '--': the training command. Without one, the bundled "
                                                           "example runs: `python -m forensics.capture.example_workload` "
                                                           "(--cpu on the CPU backend), a Transformer-Engine-style "
                                                           "linear layer trained for a few steps whose wgrad GEMM is the "
                                                           "site gemm:NT:acc0:grad1"),
        site: Optional[str] = typer.Option(None, "--site", help="site or occurrence, e.g. gemm:NT:acc0:grad1 or gemm:NT:acc0:grad1#3"),
        steps: Optional[str] = typer.Option(None, "--steps", help="step window: N, A-B, A-, A-B:K, all (default 1-2)"),
        ranks: Optional[str] = typer.Option(None, "--ranks", help="ranks to capture: all or 0,3,8-15 (default all)"),
        arms: Optional[int] = typer.Option(None, "--arms", help="identical arms to run (default 2)"),
        device: Optional[str] = typer.Option(None, "--device", help="cuda, rocm or cpu backend (default: cuda when a CUDA device is present, rocm when an AMD GPU is, else cpu)"),
        instruments: Optional[List[str]] = typer.Option(None, "--instruments", help="cuda: cupti,cublaslt,ncu,nsys; rocm: hipblaslt,rocblas,rocprofv3; cpu: torch_profiler,onednn,mkl (default: all of the device's)"),
        toggle: Optional[List[str]] = typer.Option(None, "--toggle", help="NAME=VALUE: one more arm with that env var set (repeatable)"),
        env: Optional[List[str]] = typer.Option(None, "--env", help="NAME=VALUE set in every arm and pass (a --toggle of "
                                                                   "the same name overrides it; repeatable)"),
        arm_command: Optional[List[str]] = typer.Option(None, "--arm-command", help="'CMD ...' (one string): one more arm "
                                                        "(c1, c2...) running this command instead, e.g. the other "
                                                        "diffed run's (repeatable)"),
        config: Optional[Path] = typer.Option(None, "--config", help="run.yaml holding any of these options (flags override)"),
        out: Optional[Path] = typer.Option(None, "--out", help="capture directory: an existing one is refused unless "
                                           "--force (default forensics-capture, never overwritten: -2, -3...)"),
        force: bool = typer.Option(False, "--force", help="replace an existing --out capture (otherwise it is refused: "
                                   "exit 3); the earlier one is removed only when the new run ends"),
        timeout: Optional[float] = typer.Option(None, "--timeout", help="seconds per pass (default 1800)"),
        ncu_mode: Optional[str] = typer.Option(None, "--ncu-mode", help="window (cudaProfilerStart/Stop, default) or nvtx (site ranges)"),
        dry_run: bool = typer.Option(False, "--dry-run", help="print every pass's exact argv and env additions; run nothing"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress display, no table"),
        as_: str = typer.Option("text", "--as", metavar="text|json|csv|markdown", callback=check_as,
                                help=AS_HELP + "; the passes and the verdict go to stderr"),
        json_out: Optional[Path] = typer.Option(None, "--json", help="also write the analysis's JSON report here "
                                                "('-': to stdout, instead of the text, as --as json); an existing "
                                                "file is refused unless --force"),
        rows: Optional[str] = typer.Option(
            None, "--rows", help="batch-invariance sweep: keep the site's inputs at its first occurrence and replay "
                                 "the op on the first m rows for each m (1,2,3,8 or auto: every size to 32, then 8 "
                                 "per doubling), all in one fresh process under the instruments; table and verdict "
                                 "(docs/batch-invariance.md)"),
        repeat: Optional[int] = typer.Option(
            None, "--repeat", help="replay the kept call N times in one process under the instruments: do the bits "
                                   "stay equal (DETERMINISTIC), differ in one process (NONDETERMINISTIC: racy at a "
                                   "fixed choice, or the choice changed), or differ only from the program's own call "
                                   "(PROCESS-DEPENDENT)? with --rows: N calls per size (docs/batch-invariance.md)"),
        keep_budget: Optional[int] = typer.Option(None, "--keep-budget", help="with --rows or --repeat: the most bytes of "
                                                  "input tensors kept (default 268435456); over it: refused"),
        from_report: Optional[Path] = typer.Option(
            None, "--from", help="take the site from a `forensics diff --json` or Megatron compare_traces.py report "
                                 "(refused for a RECEIVER, CONTROL_FLOW or unproven first divergence)"),
        command_from: Optional[Path] = typer.Option(
            None, "--command-from", metavar="TRACE", help="the training command recorded in this trace (what "
            "`forensics diff`'s next: line gives when the traced command holds a secret, never printed)"),
    ) -> None:
        """Rerun the step window under the device's instruments; NAME the site's kernel (implementation on the CPU).

        cuda: CUPTI, cuBLASLt log, ncu, nsys. cpu: torch.profiler, oneDNN and oneMKL verbose logs.
        Exit 0: a kernel NAMED; 1: none NAMED; 2: usage; 3: bad input (--out exists without --force);
        4: nothing could run; 128+N: sent signal N (passed on to the running pass).
        """
        from forensics.capture import kernel as lib
        from forensics.capture.passes import (default_instruments, describe_plan, discover_tools, parse_toggle,
                                              plan_passes, resolve_device)
        from forensics.core.site import Occurrence, parse_site_or_occurrence
        from forensics.commands.suggest import check_op_site

        if command_from is not None:
            if command:
                _usage("--command-from and a command after '--' exclude each other")
            from forensics.tracediff.from_report import command_from_trace

            command = command_from_trace(command_from)
        if from_report is not None:
            site, ranks, steps, command, found = _from_report(from_report, site, ranks, steps, command)
            d = found.differences
            if d is not None:  # both sides of the difference become arms (flags given by hand come first)
                env = list(env or []) + [e for e in d.base_env if e.split("=", 1)[0] not in _names(env)]
                toggle = list(toggle or []) + [t for t in d.toggles if t not in (toggle or [])]
                arm_command = list(arm_command or []) + [c for c in d.arm_commands if c not in (arm_command or [])]
        import shlex

        try:
            base_env = dict(parse_toggle(e) for e in env or []) or None
            arm_commands = [shlex.split(c) for c in arm_command or []]
        except ValueError as e:
            _usage(f"--env/--arm-command: {e}")
        cfg = lib.load_run_config(config) if config else {}  # read once
        # the one merge of flags and --config (flags win): every later step reads opts
        opts = lib.merge_options({
            "site": site, "command": list(command or []), "steps": steps, "ranks": ranks, "arms": arms,
            "instruments": tuple(_split(instruments)), "toggles": tuple(toggle or ()), "out": out,
            "timeout_s": timeout, "ncu_mode": ncu_mode, "device": device, "env": base_env,
            "arm_commands": arm_commands}, cfg)
        from forensics.runtime.output import check_output, replacing

        from forensics.runtime.output import json_as

        as_ = json_as(json_out, as_)
        named_out = opts["out"]  # named by --out or the config's out: refused when it exists, unless --force
        check_output(named_out, force=force, flag="--out", what="capture", directory=True)  # before anything runs
        check_output(json_out, force=force, flag="--json", what="--json report")
        if not opts["site"]:
            _usage("--site is required (or site: in --config), e.g. --site gemm:NT:acc0:grad1")
        parsed = parse_site_or_occurrence(str(opts["site"]))  # the one parse; BadSite: one line, exit 2 (forensics.cli)
        op_site = parsed.site if isinstance(parsed, Occurrence) else parsed
        if op_site.is_aten and from_report is None:  # a typed op name torch does not register: exit 2 before any
            check_op_site(op_site.name)  # run (a site from a diff's report was recorded from a run: it exists)
        opts["site"] = parsed
        tools = discover_tools()
        try:
            dev = resolve_device(opts["device"], tools, opts["instruments"])
        except ValueError as e:
            _usage(str(e))
        opts["device"] = dev
        if not opts["command"]:
            if dev == "cuda" and not tools.cuda and not dry_run:
                typer.echo(f"forensics kernel: the bundled example on --device cuda needs a CUDA GPU ({tools.cuda_reason}); "
                           f"run it on the CPU backend with --device cpu, or try `forensics analyze {SHIPPED_CAPTURE}` "
                           "(a real capture of the CPU backend)", err=True)
                raise typer.Exit(EXIT_UNAVAILABLE)
            opts["command"] = lib.default_command(dev)
        swept = rows is not None or repeat is not None
        if swept and as_ != "text":
            _usage("--as prints the capture's verdict table; the --rows/--repeat sweep writes its table (table.md, "
                   "sweep.json)")
        if rows is not None and dry_run:  # --dry-run honours --rows: what the sweep would run, nothing started
            _dry_run_rows(str(parsed), opts, rows, toggled=bool(opts["toggles"]) or from_report is not None)
        if swept and not dry_run:  # the batch-invariance sweep and the repeat axis (forensics.sweep)
            from forensics.sweep.cli import run_and_print

            if opts["toggles"] or from_report is not None:
                _usage("--rows/--repeat replay one site's kept inputs: --toggle and --from do not apply "
                       "(a knob's effect on batch invariance: forensics knob NAME --site SITE --rows ... --values V -- CMD)")

            with replacing(named_out, force=force, flag="--out", what="capture"):
                code = run_and_print("forensics kernel", str(parsed), opts["command"], rows, quiet=quiet,
                                     steps=opts["steps"], ranks=ranks or cfg.get("ranks", "0"), device=dev,
                                     instruments=opts["instruments"], out=opts["out"],
                                     timeout_s=opts["timeout_s"], tools=tools, repeat=repeat,
                                     **({"budget_bytes": keep_budget} if keep_budget else {}))
            raise typer.Exit(code)
        if dry_run:
            where = Path(opts["out"] or lib.DEFAULT_OUT).resolve()
            try:
                plan = plan_passes(str(parsed), opts["command"], out=where, steps=opts["steps"], ranks=opts["ranks"],
                                   arms=int(opts["arms"]), instruments=opts["instruments"] or default_instruments(dev),
                                   toggles=opts["toggles"], env_arms=opts["env_arms"], tools=tools,
                                   ncu_mode=opts["ncu_mode"], max_records=int(opts["max_records"]), device=dev,
                                   base_env=opts["env"], arm_commands=opts["arm_commands"])
            except ValueError as e:
                _usage(str(e))
            from forensics.runtime.console import echo_plain, make_console  # noqa: PLC0415

            echo_plain(make_console(), describe_plan(plan) + "\n\n(dry run: nothing was started; an existing --out is "
                       "refused unless --force, the default folder gets a -2, -3... suffix)")
            raise typer.Exit(EXIT_OK)
        from forensics.pipeline import analyse

        try:
            with replacing(named_out, force=force, flag="--out", what="capture"):
                result = analyse(lib.capture_kernel(opts, progress=not quiet, tools=tools))
        except ValueError as e:
            _usage(str(e))
        raise typer.Exit(_report(result, quiet, as_, json_out=json_out, force=force))


def _usage(message: str) -> None:
    """A usage error as one line on stderr (exit 2)."""
    typer.echo(f"forensics kernel: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)


def _from_report(path: Path, site: Optional[str], ranks: Optional[str], steps: Optional[str],
                 command: Optional[List[str]]):  # noqa: ANN202
    """``--from REPORT``: the report's ORIGIN site, rank, step window and command (flags win), and what it found."""
    from forensics.tracediff.from_report import site_from_report

    if site:
        raise typer.BadParameter("--from and --site exclude each other", param_hint="--from")
    found = site_from_report(path, list(command) if command else None)
    if not found.ok:
        typer.echo(f"forensics kernel: --from {path}: refused: {found.reason}", err=True)
        raise typer.Exit(EXIT_NOT_NAMED)
    typer.echo(f"--from {path}: {found.reason}: {found.command_line()}", err=True)
    for w in found.warnings:
        typer.echo(f"  warning: {w}", err=True)
    cmd = found.command[found.command.index("--") + 1:] if "--" in found.command else None
    return (found.site_arg, ranks or (str(found.rank) if found.rank is not None else None),
            steps or found.steps, command or cmd, found)


def _dry_run_rows(site: str, opts: dict, rows: str, *, toggled: bool) -> None:
    """``--rows ... --dry-run``: the sizes checked as the sweep checks them (exit 2 as it would), then
    the sweep's steps; nothing runs (the site's own row count is known only once its inputs are kept)."""
    import shlex

    from forensics.core.redact import redact_argv
    from forensics.sweep.run import parse_rows

    try:
        wanted = parse_rows(rows)
    except ValueError as e:
        _usage(str(e))
    if toggled:
        _usage("--rows replays one site per row count: --toggle and --from do not apply")
    sizes = "auto (1, 2, 3, the powers of two below the site's rows, its row count, both sides of a flip)" \
        if wanted is None else ", ".join(map(str, wanted))
    typer.echo(f"dry run of --rows {rows}: site {site}, steps {opts['steps'] or 'default'}, device {opts['device']}\n"
               f"  1. keep run: {shlex.join(map(str, redact_argv(opts['command'])))} with the site probe keeping the "
               "site's first occurrence's inputs\n"
               f"  2. one replay process per row count under the instruments: {sizes}; a count above the site's "
               "own row count is not tried (refused when none is below it)\n"
               "(dry run: nothing was started)")
    raise typer.Exit(EXIT_OK)


def _names(assignments: Optional[List[str]]) -> set[str]:
    return {a.split("=", 1)[0] for a in assignments or []}


def _report(result, quiet: bool, as_: str = "text", json_out: Optional[Path] = None,  # noqa: ANN001
            force: bool = False) -> int:
    """Print the passes, the verdict and the capture directory; return the exit code. ``as_``
    json/csv/markdown: the analysis's JSON or verdict rows alone on stdout, the rest on stderr."""
    from forensics.runtime.console import make_console

    console = make_console(stderr=as_ != "text")
    for r in result.passes:
        if r.status != "ok":
            console.print(f"pass {r.name}: {r.status}: {r.reason}  (log: {r.log_path})", soft_wrap=True)
    console.print(f"capture: {result.capture_dir}  (device: {result.device})", soft_wrap=True)
    if not any(r.status == "ok" for r in result.passes):
        console.print("no pass ran: nothing captured")
        return EXIT_UNAVAILABLE
    an = result.analysis
    no_gpu = result.cuda_reason if result.device == "cuda" else _device_absent(result.device)
    if an is None:
        console.print(f"{result.analysis_error or 'analysis unavailable'}; "
                      f"run `forensics analyze {result.capture_dir}` later", soft_wrap=True)
        if no_gpu:
            console.print(_no_gpu_verdict(no_gpu, result.device), soft_wrap=True)
            return EXIT_UNAVAILABLE
        return result.analysis_exit or EXIT_BAD_INPUT  # never 0: that reads as a kernel NAMED
    if as_ != "text":
        from forensics.judge.report import analysis_json, verdict_rows
        from forensics.runtime.output import emit_as

        emit_as(as_, analysis_json(an), *(verdict_rows(an) if len(an.verdicts) else ([], [])))
    elif not quiet:
        from forensics.judge.report import print_table

        print_table(an, console)
    from forensics.judge.report import verdict_line, write_outputs

    try:
        written = write_outputs(an, result.capture_dir / "analysis")
        console.print(f"wrote {', '.join(str(p) for p in written)}", soft_wrap=True)
    except Exception as e:  # noqa: BLE001  (the capture is complete; only the report files are missing)
        console.print(f"note: analysis outputs not written ({type(e).__name__}: {e}); "
                      f"`forensics analyze {result.capture_dir}` writes them", soft_wrap=True)
    from forensics.runtime.output import is_stdout, write_json

    if json_out is not None and not is_stdout(json_out):
        from forensics.judge.report import analysis_json

        write_json(json_out, analysis_json(an), force=force)
        console.print(f"report: {json_out}", soft_wrap=True)
    if no_gpu:
        console.print(_no_gpu_verdict(no_gpu, result.device), soft_wrap=True)
        return EXIT_UNAVAILABLE
    n = an.named["kernel"].nunique() if an.any_named() else 0
    console.print(verdict_line(an), soft_wrap=True)
    for line in arm_lines(an, result.capture_dir):
        console.print(line, markup=False, highlight=False, soft_wrap=True, crop=False)
    return EXIT_OK if n else EXIT_NOT_NAMED


def arm_lines(an, capture_dir: Path) -> list[str]:  # noqa: ANN001
    """What the arms say at the site's occurrences, and the next step: one ``arms:`` line per arm whose
    bits (or kernel) differ from the baseline's, then ``next: forensics compare CAPTURE`` (on one line:
    a command to copy). Nothing when the capture has no site records to compare by."""
    import shlex

    from forensics.core.errors import BadInput
    from forensics.judge.verdicts import compare_arms, toggle_text

    sites = getattr(an, "sites", None)
    if sites is None or not len(sites):
        return []
    try:
        comparison = compare_arms(an)
    except BadInput as e:  # the verdict above stands; the arms are compared by `forensics compare`
        return [f"arms: not compared here ({e}); `forensics compare {shlex.quote(str(capture_dir))}` says why"]
    lines = []
    for p in comparison.pairs:
        kind = "toggle " + toggle_text(p.toggle) if p.toggle else "replica"
        if not p.comparable:
            lines.append(f"arms: {p.arm} ({kind}) NOT COMPARABLE with {p.baseline}: {'; '.join(p.reasons)}")
            continue
        if p.crash:
            lines.append(f"arms: {p.arm} ({kind}) {p.crash_word}: {p.crash}")
        for rank, fd in sorted(p.first_divergence.items()):
            what = "its output bits differ" if fd.get("bits_differ") else str(fd.get("classification"))
            lines.append(f"arms: {p.arm} ({kind}) vs {p.baseline}: {what} at {fd['label']} (rank {rank}, "
                         f"{fd['classification']}, {fd['role']})")
    if not lines:
        if comparison.pairs:
            lines.append(f"arms: no divergence from {comparison.baseline} at the occurrences compared")
        return lines
    return lines + [f"next: forensics compare {shlex.quote(_as_typed(capture_dir))}"]


def _as_typed(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it (as a user would type it)."""
    import os

    try:
        rel = os.path.relpath(path)
    except ValueError:  # another drive
        return str(path)
    return rel if not rel.startswith("..") else str(path)


def _device_absent(device: str) -> str | None:
    """Why a non-CUDA GPU backend's device is absent (its instruments' own check, e.g. rocprofv3's), else None."""
    from forensics import instruments  # noqa: PLC0415 (the registry, asked only after a capture ran)

    for inst in instruments.captured(device):
        own = inst.switch.own_pass
        if own is not None and own.device_status is not None:
            present, reason = own.device_status()
            if not present:
                return reason
    return None


def _no_gpu_verdict(reason: str, device: str = "cuda") -> str:
    """--device cuda (or rocm) on a machine without one: the arms ran (site names and digests are real),
    no kernel could."""
    if device == "cuda":
        tools = "CUPTI, the cuBLASLt log, ncu and nsys"
    else:
        from forensics import instruments  # noqa: PLC0415 (the registry, asked only after a capture ran)

        tools = ", ".join(i.label for i in instruments.captured(device))
    return (f"verdict: no kernel could run: {reason}; the arms ran on the CPU (site digests recorded) but {tools} "
            "had no GPU work to observe. On this machine use the CPU backend: --device cpu")
