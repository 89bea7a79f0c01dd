"""Stage 2, judge: count launches per instrument, apply the two-instrument rule, compare arms.

``analysis`` (per capture: NAMED / DISAGREE / SINGLE-SOURCE), ``report`` (its table and files),
``arm_evidence`` (per-arm kernels, algos, bits) and ``verdicts`` (arms, discriminators, toggles).
"""
