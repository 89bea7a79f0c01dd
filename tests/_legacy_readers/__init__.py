"""The readers as main had them before issue 44's streamed readers (rocprofv3 CSV, rocprofv3 JSON,
nsys tables): copies kept only for tests/test_streamed_readers_equivalence.py, which compares every
frame, attr and BadInput of the new readers with these on every real file and a set of edits."""
