"""forensics bootstrap: activates the probes in every Python process that has FORENSICS_CONFIG.

Placed first on PYTHONPATH by ``forensics kernel`` / ``forensics trace`` (nothing else is added
there: the traced ``sys.path`` is the untraced one plus this directory). It chains to any other
``sitecustomize`` further down the path, and never lets a probe failure kill the user's program.
"""
import os
import sys


def _chain_next_sitecustomize() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    import importlib.util

    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        cand = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(cand):
            spec = importlib.util.spec_from_file_location("_forensics_chained_sitecustomize", cand)
            if spec and spec.loader:
                try:
                    spec.loader.exec_module(importlib.util.module_from_spec(spec))
                except Exception as e:  # noqa: BLE001
                    sys.stderr.write(f"forensics: chained sitecustomize {cand} failed: {e!r}\n")
            return


_chain_next_sitecustomize()



def _import_own_packages() -> None:
    """Import ``probes`` and ``forensics`` (whose bottom layers the probes use; nothing in the
    traced process reads ``parsers``) from the directory that holds this bootstrap's package (a
    checkout or site-packages) and take that directory off ``sys.path`` again: the traced program
    sees the path it would see untraced, plus this bootstrap's entry. Submodules imported later are
    found through the packages' own ``__path__``, not ``sys.path``."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.path.insert(0, root)  # first, also where it is on the path already (site-packages comes last)
    try:
        import probes  # noqa: F401
        import forensics  # noqa: F401
    finally:
        if sys.path and sys.path[0] == root:
            del sys.path[0]
        if root not in sys.path:
            sys.path_importer_cache.pop(root, None)


if os.environ.get("FORENSICS_CONFIG"):
    try:
        _import_own_packages()
        from probes.activate import activate

        activate()
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"forensics: probes not activated: {type(e).__name__}: {e}\n")
