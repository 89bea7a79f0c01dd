"""forensics bootstrap: activates the probes in every Python process that has FORENSICS_CONFIG.

Placed first on PYTHONPATH by ``forensics kernel`` / ``forensics trace``. It chains to any other
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

if os.environ.get("FORENSICS_CONFIG"):
    try:
        from probes.activate import activate

        activate()
    except Exception as e:  # noqa: BLE001
        sys.stderr.write(f"forensics: probes not activated: {type(e).__name__}: {e}\n")
