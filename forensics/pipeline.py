"""``forensics kernel`` end to end: capture (:mod:`forensics.capture.kernel`), then analyse (:mod:`forensics.judge`).

Stage: right above ``judge`` and below ``knobs`` (it imports ``capture`` and ``judge`` only), so the
capture never imports the judge. ``forensics kernel`` and the batch-invariance sweep use it; ``knob
--dynamic`` captures and reads the capture once with its own toggle report.
"""
from __future__ import annotations

import os
from typing import Any

from forensics.capture.kernel import KernelResult, as_site, capture_kernel, merge_options
from forensics.capture.passes import Tools
from forensics.core.errors import ForensicsError, doing
from forensics.core.site import Occurrence, Site
from forensics.judge import analysis


def analyse(result: KernelResult) -> KernelResult:
    """Fill ``result.analysis`` (:func:`forensics.judge.analysis.analyze` with ``keep_going``: a
    damaged file is a note, not the end). A capture the analysis refuses (a
    :class:`forensics.core.errors.ForensicsError`: bad input) leaves ``analysis`` None and says why
    in ``analysis_error`` and ``analysis_exit`` (its exit code, never 0). Any other exception is a
    bug: it propagates (the CLI's exit 70), naming the capture, which is complete on disk.

    (``kernel`` used to retry ``analyze`` without ``keep_going`` on any TypeError, which turned a
    bug inside the analysis into a second, stricter run; and a failed analysis exited 0, which
    reads as a kernel NAMED.)"""
    try:
        with doing(f"analysing the capture {result.capture_dir} (complete on disk: `forensics analyze` reads it)"):
            result.analysis = analysis.analyze(result.capture_dir, site=result.site, keep_going=True)
    except ForensicsError as e:
        result.analysis, result.analysis_error = None, f"analysis failed: {e}"
        result.analysis_exit = e.exit_code
    return result


def run_kernel(
    site: Site | Occurrence | str | None,
    command: list[str] | None,
    *,
    config: str | os.PathLike[str] | dict[str, Any] | None = None,
    progress: bool = True,
    tools: Tools | None = None,
    base_env: dict[str, str] | None = None,
    **options: Any,
) -> KernelResult:
    """Capture ``command`` at ``site`` under the instruments, then analyse the capture.

    ``options`` are :data:`forensics.capture.kernel.DEFAULTS`' keys (steps, ranks, arms,
    instruments, toggles, env_arms, out, timeout_s, ncu_mode, max_records, device, arm_commands);
    ``base_env`` is ``--env``. ``config`` (a run YAML path or a dict) fills any option not given
    (:func:`forensics.capture.kernel.merge_options`, the one merge). Never overwrites a capture.
    """
    unknown = set(options) - set(merge_options({}))
    if unknown:
        raise TypeError(f"run_kernel() got unexpected option(s) {', '.join(sorted(unknown))}")
    given = dict(options, site=site, command=command, env=base_env)
    opts = merge_options(given, config)
    opts["site"] = as_site(opts["site"])
    return analyse(capture_kernel(opts, progress=progress, tools=tools))
