"""What runs inside the user's process: site ranges, CUPTI collection, the op tracer, windows.

Importing this package costs nothing: no torch import, no hooks, no threads. Probes are switched
on only by :func:`probes.activate.activate`, which the bootstrap calls when ``FORENSICS_CONFIG``
is set in the environment.
"""


def step() -> None:
    """Mark the end of a training step explicitly (instead of the optimizer-step hook)."""
    from probes import activate  # noqa: PLC0415

    activate.explicit_step()
