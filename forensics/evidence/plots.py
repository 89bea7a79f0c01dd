"""The bundle's plot: a site's kernel launches per arm (matplotlib, Agg backend; optional).

Without matplotlib :func:`plot_launches` returns ``(None, reason)`` and the report says so.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd


def plot_launches(launches: pd.DataFrame, path: str | Path, title: str, device: str = "cuda") -> tuple[Path | None, str]:
    """One row per (arm, rank), one mark per launch in launch order, coloured by kernel.

    ``launches``: columns ``arm rank label kernel`` (one source per occurrence, launch order).
    Returns ``(path, "")`` or ``(None, why no plot)``.
    """
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return None, "matplotlib is not installed: no plot (pip install 'forensics[plot]')"
    if launches.empty:
        what = "implementation-op execution (an op that calls oneDNN or oneMKL)" if device == "cpu" else "kernel launch"
        return None, f"no {what} was attributed to the site: nothing to plot"
    from forensics.judge.arm_evidence import kernel_family  # noqa: PLC0415
    from forensics.core.demangle import short_name  # noqa: PLC0415

    names = [str(k) for k in dict.fromkeys(launches["kernel"].astype(str))]
    colours = {k: plt.get_cmap("tab10")(i % 10) for i, k in enumerate(names)}
    rows = list(dict.fromkeys(zip(launches["arm"], launches["rank"])))
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.5 * len(rows)))
    for y, (arm, rank) in enumerate(rows):
        mine = launches[(launches["arm"] == arm) & (launches["rank"] == rank)]["kernel"].astype(str).tolist()
        for kernel in dict.fromkeys(mine):  # one call per kernel per row, however many launches
            spans = [(x, 0.9) for x, k in enumerate(mine) if k == kernel]
            ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colours[kernel], edgecolor="black", linewidth=0.3)
    ax.set_xlim(0, max(1, int(launches.groupby(["arm", "rank"]).size().max())))
    ax.set_yticks(range(len(rows)), [f"{a} rank{r}" for a, r in rows])
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("launch (in order) of the site's occurrences")
    ax.set_title(title, fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[k]) for k in names]
    labels = [f"{kernel_family(k)}: {short_name(k)[:60]}" for k in names]
    ax.legend(handles, labels, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=1, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path, ""
