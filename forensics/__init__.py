"""forensics: below-dispatcher GPU kernel forensics.

From a divergent site found by an op-level tracer (e.g. ``gemm:NT:acc0:grad1``) to the kernel
symbol, cuBLASLt algo and problem descriptors, cross-checked by two independent instruments.

The Python API (docs/api.md; :mod:`forensics.api`), the same library the commands use::

    import forensics
    an = forensics.analyze("tests/fixtures/cpu/conv1d-threads")   # AnalysisResult
    an.verdicts                                                    # a DataFrame, one row per verdict
    forensics.diff("runA", "runB").to_frame()                      # first divergence per rank
    forensics.compare(capture), forensics.knob("OMP_NUM_THREADS", site="aten.mm.default")
    forensics.load_capture(capture), forensics.load_trace("runA")  # frames before any verdict

Imported on first use (``import forensics`` stays cheap for the command line).
"""

__version__ = "0.1.0"

_API = ("analyze", "compare", "diff", "knob", "load_capture", "load_trace",
        "AnalysisResult", "CaptureData", "CompareResult", "DiffResult", "KnobResult")
__all__ = ["__version__", *_API]


def __getattr__(name: str):  # noqa: ANN202 - PEP 562 lazy attributes
    if name in _API:
        from forensics import api  # noqa: PLC0415

        return getattr(api, name)
    raise AttributeError(f"module 'forensics' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
