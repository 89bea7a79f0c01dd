"""The op-level tracer: every ATen op of this rank, fingerprinted, into ``rank<R>/trace.jsonl``.

A :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every op below autograd (backward
ops included). Each record gets the identity ``op:occurrence`` (counted per op name on this rank,
so two runs align offline whatever the arrival order), input digests taken *before* the op runs
and output digests after, with shape/dtype/numel. Digests are ``torch.hash_tensor`` results kept
on the tensor's device; at flush they are concatenated and read with ONE host transfer.

``torch.hash_tensor`` is an XOR: order-independent, so equal digests are a screen, not proof. An
**order-sensitive** digest (``o``) can prove equality. CPU tensors, inputs and outputs, carry it
*instead of* the XOR (one pass over the bytes: xxh3-64 on the host, over the row-major bytes, or
over the memory of a dense permuted layout such as a transposed weight, whose dim order is then
``ol``). Other devices' tensors carry the XOR, and also ``o`` (a position-keyed mix on the device)
on inputs with ``ordered_digests`` = ``inputs``, on inputs and outputs with ``all``; ``off`` records
XOR digests only, everywhere; ``auto`` is the default. Ops whose failure mode is reordering
(:data:`CHUNKED_OPS`) get position-weighted chunk digests and keep the XOR (equal XOR, different
``o``: the values were reordered). Semantic records mark known boundaries: torch.distributed collectives
(``collective.<fn>``), optimizer step, backward start/end; backward records name the autograd
node that issued them and the forward op that created it.

Records reach the file in bounded batches (every :data:`FLUSH_EVERY` records or
:data:`FLUSH_SECONDS`), so a killed process keeps all but its last moments. A write that fails
(disk full) stops the recording with one message; the program is never broken. A process stopped
by a signal or an uncaught exception gets a footer that says so (``stopped``).

Off unless ``optrace`` is in the probe config; no collective is ever added; the step window, the
rank filter and the record budget bound what is written. docs/trace-format.md describes the file.

The package, by job: :mod:`.tracer` (the dispatch mode and record assembly), :mod:`.ops` (what an op
is: chunked, a view, random, what it writes, its GEMM name), :mod:`.digest` (the tensor entries and
their four digest kinds), :mod:`.storage` (storages a resize grew), :mod:`.writer` (the rank file),
:mod:`.hooks` (semantic records and :func:`install`). The file's format (name, version, key order,
the line writers and the header reader) is owned by :mod:`forensics.core.formats.optrace`.
"""
from __future__ import annotations

import numpy as np  # noqa: F401  (tests read the tracer's numpy through this module)

from probes.digests import _GOLDEN, ordered_device  # noqa: F401
from probes.optrace.digest import (  # noqa: F401
    _ARGS_SEEN,
    _BYTES_AT,
    _FAST_INFO,
    _FAST_WORD,
    _PLAIN,
    CHUNK_NAME,
    CPU_SIDES,
    GENERATORS_NAME,
    HASH_NAME,
    HASH_NAME_CPU,
    N_CHUNKS,
    ORDERED_CPU,
    ORDERED_DEVICE,
    ORDERED_MODES,
    _bits,
    _Digest,
    _hash_bits,
    _np_words,
    _raw,
    _resolve,
    _stable_repr,
    args_entry,
    chunk_sums,
    dense_order,
    ordered_cpu,
    ordered_cpu_layout,
    tensor_entry,
    view_entry,
    xor_cpu,
)
from probes.optrace.hooks import _Installed, install  # noqa: F401
from probes.optrace.ops import (  # noqa: F401
    _GEMM_SEEN,
    _OP_INFO,
    CHUNKED_OPS,
    LIFT_OPS,
    METADATA_INPLACE_OPS,
    ORDER_PRESERVING_VIEWS,
    OVERWRITING_OPS,
    RANDOM_OPS,
    RECEIPT_OPS,
    SAME_ELEMENT_VIEWS,
    SKIPPED_OPS,
    _draws,
    _gemm_meta,
    _gemm_name,
    _op_name,
    _OpInfo,
    _out_names,
    _packet,
    _split,
    _written_args,
)
from probes.optrace.tracer import COMPILED_MODES, FLUSH_EVERY, FLUSH_SECONDS, OpTracer, _dynamo_callback  # noqa: F401
from probes.optrace.writer import STORAGE_EVENTS, WRITE_BUFFER  # noqa: F401
