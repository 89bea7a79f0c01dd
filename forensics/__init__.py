"""forensics: below-dispatcher GPU kernel forensics.

From a divergent site found by an op-level tracer (e.g. ``gemm:NT:acc0:grad1``) to the kernel
symbol, cuBLASLt algo and problem descriptors, cross-checked by two independent instruments.
"""

__version__ = "0.1.0"
