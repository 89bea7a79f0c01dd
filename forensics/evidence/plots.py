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


#: Cell colours of the arms picture: what the arm's occurrence is, compared with the baseline's.
_FILL = {"same": "#e8f5e9", "differs": "#ffebee", "base": "#eeeeee", "none": "#ffffff"}


def arms_svg(comparison, title: str) -> str | None:
    """The arms side by side per occurrence, as SVG written by hand (no dependency): one row per
    (rank, occurrence), one column per arm (the baseline first), each cell the implementation or
    kernel the arm ran there, its algo, and whether its bits equal the baseline's. A cell is red
    where the arm differs from the baseline (kernel, algo or bits), green where it is the same,
    grey for the baseline. None when no pair has an occurrence to show."""
    from xml.sax.saxutils import escape  # noqa: PLC0415

    pairs = [p for p in comparison.pairs if len(p.occurrences)]
    if not pairs:
        return None
    arms = [comparison.baseline] + [p.arm for p in pairs]
    cells: dict[tuple, dict[str, dict[str, str]]] = {}
    for p in pairs:
        for r in p.occurrences.to_dict("records"):
            key = (str(r.get("rank")), str(r.get("label")))
            row = cells.setdefault(key, {})
            impl_b = r.get("implementation_baseline") or r.get("kernel_baseline")
            impl_a = r.get("implementation_arm") or r.get("kernel_arm")
            row.setdefault(p.baseline, {"impl": _txt(impl_b), "algo": _txt(r.get("algo_baseline")), "bits": "baseline",
                                        "fill": "base"})
            differs = (r.get("bits_differ") is True or _txt(impl_a) != _txt(impl_b)
                       or _txt(r.get("algo_arm")) != _txt(r.get("algo_baseline")))
            bits = {True: "bits DIFFER", False: "bits equal"}.get(r.get("bits_differ"), "bits not compared")
            row[p.arm] = {"impl": _txt(impl_a), "algo": _txt(r.get("algo_arm")),
                          "bits": f"{bits}: {r.get('classification')}", "fill": "differs" if differs else "same"}
    col_w, row_h, head_w, top = 400, 64, 200, 56
    width, height = head_w + col_w * len(arms) + 10, top + row_h * len(cells) + 10
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">',
           f'<title>{escape(title)}</title>',
           f'<text x="8" y="18" font-size="13">{escape(title)}</text>']
    for j, arm in enumerate(arms):
        x = head_w + j * col_w
        out.append(f'<text x="{x + 6}" y="{top - 10}" font-weight="bold">{escape(arm)}'
                   f'{" (baseline)" if j == 0 else ""}</text>')
    for i, (key, row) in enumerate(sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1]))):
        y = top + i * row_h
        out.append(f'<text x="8" y="{y + 20}">rank {escape(key[0])}</text>')
        out.append(f'<text x="8" y="{y + 36}">{escape(key[1])}</text>')
        for j, arm in enumerate(arms):
            x = head_w + j * col_w
            c = row.get(arm) or {"impl": "-", "algo": "-", "bits": "not in this arm", "fill": "none"}
            out.append(f'<g class="cell" data-arm="{escape(arm)}" data-occurrence="{escape(key[1])}" '
                       f'data-rank="{escape(key[0])}">')
            out.append(f'<rect x="{x}" y="{y}" width="{col_w - 4}" height="{row_h - 4}" fill="{_FILL[c["fill"]]}" '
                       'stroke="#999"/>')
            for k, (field, text) in enumerate((("impl", c["impl"]), ("algo", c["algo"]), ("bits", c["bits"]))):
                out.append(f'<text x="{x + 4}" y="{y + 16 + 16 * k}" class="{field}">{escape(_clip(text, 62))}</text>')
            out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _txt(v) -> str:  # noqa: ANN001
    return "-" if v is None or (isinstance(v, float) and v != v) or str(v) in ("", "None", "<NA>", "nan") else str(v)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def sweep_svg(data: dict) -> str | None:
    """The batch-size table of a ``kernel --rows`` sweep (its sweep.json) as a chart, SVG written by
    hand: one band per setting (as run, then each knob value), one cell per row count, green where
    the shared rows' bits equal the full call's, red where they differ, grey where not checked; the
    implementation is written under a cell where it changes from the previous size, and each band
    is headed with its verdict. None when the sweep has no table."""
    from xml.sax.saxutils import escape  # noqa: PLC0415

    tables = [(k, t) for k, t in (data.get("tables") or {}).items() if isinstance(t, dict) and t.get("rows")]
    if not tables:
        return None
    sizes = sorted({int(r["rows"]) for _, t in tables for r in t["rows"]})
    cell_w, cell_h, left, top, band = 64, 28, 150, 48, 96
    width = max(left + cell_w * len(sizes) + 20, 8 + 7 * 160)  # room for a band's verdict line
    height = top + band * len(tables) + 20
    title = f"{data.get('site')} ({data.get('op')}): the first m rows vs the full call, per row count m"
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="monospace" font-size="11">', f"<title>{escape(title)}</title>",
           f'<text x="8" y="18" font-size="13">{escape(title)}</text>']
    for i, (setting, t) in enumerate(tables):
        y = top + i * band
        head = _clip(f'{setting}: {t.get("verdict_line") or t.get("verdict") or ""}', 160)
        out.append(f'<text x="8" y="{y + 12}" font-weight="bold">{escape(head)}</text>')
        by = {int(r["rows"]): r for r in t["rows"]}
        last = None
        for j, m in enumerate(sizes):
            x = left + j * cell_w
            r = by.get(m)
            eq = None if r is None else r.get("equal")
            fill = {True: "#e8f5e9", False: "#ffebee"}.get(eq, "#eeeeee")
            word = {True: "EQUAL", False: "DIFFER"}.get(eq, "-")
            out.append(f'<g class="size" data-setting="{escape(str(setting))}" data-rows="{m}" data-equal="{eq}">')
            out.append(f'<rect x="{x}" y="{y + 20}" width="{cell_w - 4}" height="{cell_h}" fill="{fill}" stroke="#999"/>')
            out.append(f'<text x="{x + 4}" y="{y + 32}" class="rows">m={m}</text>')
            out.append(f'<text x="{x + 4}" y="{y + 44}" class="bits">{word}</text>')
            impl = None if r is None else str(r.get("implementation") or "-")
            if impl is not None and impl != last:
                out.append(f'<text x="{x + 2}" y="{y + 62 + 12 * (j % 2)}" font-size="9" class="implementation">'
                           f'{escape(_clip(impl, 40))}</text>')
                last = impl
            out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"
