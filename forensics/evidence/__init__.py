"""Stage 3, evidence: the bundle a library owner can act on (``bundle``), its plot (``plots``) and
the standalone reproducer (``repro``)."""
