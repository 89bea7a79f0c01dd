"""Mistakes are errors, not findings: names a user types are checked before anything runs.

An op site (``aten.convolution.defualt``) is looked up in the dispatcher's registry of the
installed torch (when torch is installed and the op's namespace is loaded; otherwise only the site
grammar is checked, :mod:`forensics.core.site`), and a knob name in the shipped catalog
(``forensics/data/knobs.yaml``); an unknown one gets exit 2 with the closest known names
(``difflib``), where it would otherwise rerun a job and exit 1 "not NAMED" or exit 0 "not
catalogued".
"""
from __future__ import annotations

import difflib
import functools
import importlib.util
from collections.abc import Iterable

from forensics.core.errors import EXIT_USAGE, BadSite, ForensicsError


class UnknownName(ForensicsError):
    """A knob or op name that is known nowhere, with the nearest known ones (exit 2)."""

    exit_code = EXIT_USAGE


def close_matches(word: str, known: Iterable[str], n: int = 3, cutoff: float = 0.8) -> list[str]:
    """The known names nearest to ``word`` (difflib's ratio >= cutoff), best first."""
    return difflib.get_close_matches(word, list(known), n=n, cutoff=cutoff)


def did_you_mean(matches: list[str]) -> str:
    return f"; did you mean {' or '.join(matches)}?" if matches else ""


@functools.lru_cache(maxsize=1)
def registered_ops() -> frozenset[str] | None:
    """``ns.op.overload`` of every op the installed torch registers (None without torch)."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch  # noqa: PLC0415

        names = torch._C._dispatch_get_all_op_names()  # noqa: SLF001 - the dispatcher's own registry
    except Exception:  # noqa: BLE001 - a broken or odd torch: fall back to the grammar alone
        return None
    out = set()
    for name in names:
        ns, _, rest = name.partition("::")
        op, _, overload = rest.partition(".")
        out.add(f"{ns}.{op}.{overload or 'default'}")
    return frozenset(out)


def check_op_site(name: str) -> None:
    """Raise :class:`BadSite` (exit 2) when ``name`` (``ns.op`` or ``ns.op.overload``, already
    parsed as an op site) names no op the installed torch registers; silent when torch is absent
    or the namespace is not loaded here (a library's ops may register only when it is imported)."""
    ops = registered_ops()
    if not ops:
        return
    ns, op, *overload = name.split(".")
    in_ns = sorted(o for o in ops if o.startswith(ns + "."))
    if not in_ns:
        return
    packets = {o.rsplit(".", 1)[0] for o in in_ns}
    if f"{ns}.{op}" not in packets:
        raise BadSite(f"{name!r}: torch has no op {ns}.{op}"
                      + did_you_mean(close_matches(name, in_ns if overload else packets)))
    if overload and name not in ops:
        same_op = sorted(o for o in in_ns if o.startswith(f"{ns}.{op}."))
        raise BadSite(f"{name!r}: {ns}.{op} has no overload {overload[0]!r} (it has "
                      f"{', '.join(o.rsplit('.', 1)[1] for o in same_op)})" + did_you_mean(close_matches(name, same_op)))


def check_site_text(text: str) -> None:
    """Parse a site or occurrence (BadSite on bad grammar) and check an op site's op exists."""
    from forensics.core.site import Occurrence, parse_site_or_occurrence  # noqa: PLC0415

    parsed = parse_site_or_occurrence(text)
    site = parsed.site if isinstance(parsed, Occurrence) else parsed
    if site.is_aten:
        check_op_site(site.name)


def check_knob_typo(name: str, catalog: Iterable[str]) -> None:
    """Raise :class:`UnknownName` when ``name`` is not catalogued but a catalogued name is one
    typo away (difflib ratio >= 0.85): ``CUBLAS_WORKSPACE_CONFG`` is CUBLAS_WORKSPACE_CONFIG."""
    names = list(catalog)
    if name in names:
        return
    near = close_matches(name, names, cutoff=0.85)
    if near:
        raise UnknownName(f"knob {name!r} is not catalogued{did_you_mean(near)} (to scan this exact name anyway, "
                          "add --uncatalogued)")


def check_site_in_capture(capture_dir: object, site: str) -> None:
    """``analyze``/``compare --site`` on a capture: a site (or ``SITE#N``) that none of the capture's
    site records names exits 2 with the nearest recorded ones, before any instrument file is read
    (it would read as "nothing NAMED", a finding). Without site records the grammar and the
    installed torch's op registry are checked (:func:`check_site_text`)."""
    from forensics.capture.directory import load_capture  # noqa: PLC0415
    from forensics.judge.analysis import _sites_of  # noqa: PLC0415

    sites = _sites_of(load_capture(capture_dir))
    if sites.empty:
        check_site_text(site)
        return
    known = sorted({str(s) for s in sites["site"].dropna()} | {str(s) for s in sites["label"].dropna()})
    if site in known:
        return
    from forensics.core.site import parse_site_or_occurrence  # noqa: PLC0415

    parse_site_or_occurrence(site)  # bad grammar: BadSite, exit 2
    sites_only = sorted({str(s) for s in sites["site"].dropna()})
    raise UnknownName(f"site {site!r} is not in this capture (it recorded {', '.join(sites_only[:6])}"
                      f"{', ...' if len(sites_only) > 6 else ''}){did_you_mean(close_matches(site, known))}")
