"""The bottom layer: domain facts stated once (errors, the site grammar, frame columns, kernel and
CPU-op name grammars, demangling, redaction, which environment variables matter). Imports nothing
above it."""
