"""Process plumbing every stage uses: atomic writes, console, progress, crash reports, parallel
shards, input decoding, the output contract. Imports only :mod:`forensics.core`."""
