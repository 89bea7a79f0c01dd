"""Sequence alignment of two op-name streams after a control-flow divergence.

Before a control-flow divergence the differ aligns records by identity (``name:occurrence``).
Once one run executed an op the other did not, the occurrence counters of that name no longer
agree, so the rest is aligned by the order of op names: a shortest edit script (Myers' O(ND)
algorithm, bounded by ``max_edits``) says which records each side has that the other lacks and
where the runs align again.
"""
from __future__ import annotations

from collections.abc import Sequence

Opcode = tuple[str, int, int, int, int]  # (tag, a_start, a_end, b_start, b_end); tag: equal | delete | insert | replace


def edit_script(a: Sequence[object], b: Sequence[object], max_edits: int = 512) -> list[Opcode] | None:
    """Opcodes (like :meth:`difflib.SequenceMatcher.get_opcodes`) of a shortest edit script turning
    ``a`` into ``b``, or None when more than ``max_edits`` insertions + deletions are needed."""
    n, m = len(a), len(b)
    pre = 0
    while pre < n and pre < m and a[pre] == b[pre]:
        pre += 1
    suf = 0
    while suf < n - pre and suf < m - pre and a[n - 1 - suf] == b[m - 1 - suf]:
        suf += 1
    core = _myers(a[pre:n - suf], b[pre:m - suf], max_edits)
    if core is None:
        return None
    ops: list[Opcode] = []
    if pre:
        ops.append(("equal", 0, pre, 0, pre))
    for tag, i1, i2, j1, j2 in core:
        ops.append((tag, i1 + pre, i2 + pre, j1 + pre, j2 + pre))
    if suf:
        ops.append(("equal", n - suf, n, m - suf, m))
    return _merge(ops)


def _myers(a: Sequence[object], b: Sequence[object], max_edits: int) -> list[Opcode] | None:
    n, m = len(a), len(b)
    if n == 0 and m == 0:
        return []
    if n == 0:
        return [("insert", 0, 0, 0, m)]
    if m == 0:
        return [("delete", 0, n, 0, 0)]
    limit = min(max_edits, n + m)
    off = limit + 1
    v = [0] * (2 * limit + 3)
    trace: list[list[int]] = []
    for d in range(limit + 1):
        trace.append(v[off - d - 1: off + d + 2])  # the slice of v that step d reads
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[off + k - 1] < v[off + k + 1]):
                x = v[off + k + 1]
            else:
                x = v[off + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[off + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m, d)
    return None


def _backtrack(trace: list[list[int]], n: int, m: int, d_end: int) -> list[Opcode]:
    """Walk the saved frontiers back from (n, m) into a path, then into opcodes."""
    moves: list[tuple[str, int, int]] = []  # (kind, x, y) of each edit, from the end
    x, y = n, m
    for d in range(d_end, 0, -1):
        vd = trace[d]  # v before step d: index k maps to vd[k + d + 1]
        k = x - y

        def get(kk: int) -> int:
            return vd[kk + d + 1]

        if k == -d or (k != d and get(k - 1) < get(k + 1)):
            prev_k = k + 1  # came down: an insertion of b[prev_y]
        else:
            prev_k = k - 1  # came right: a deletion of a[prev_x]
        prev_x = get(prev_k)
        prev_y = prev_x - prev_k
        # the snake from the edit's end to (x, y) is a run of equal elements
        if prev_k == k + 1:
            moves.append(("insert", prev_x, prev_y))
        else:
            moves.append(("delete", prev_x, prev_y))
        x, y = prev_x, prev_y
    moves.reverse()
    ops: list[Opcode] = []
    cx = cy = 0
    for kind, px, py in moves:
        if px > cx:  # equal run before this edit (px - cx == py - cy)
            ops.append(("equal", cx, px, cy, py))
        if kind == "insert":
            ops.append(("insert", px, px, py, py + 1))
            cx, cy = px, py + 1
        else:
            ops.append(("delete", px, px + 1, py, py))
            cx, cy = px + 1, py
    if cx < n or cy < m:
        ops.append(("equal", cx, n, cy, m))
    return ops


def _merge(ops: list[Opcode]) -> list[Opcode]:
    """Adjacent edits become one ``delete`` / ``insert`` / ``replace``; adjacent equals one equal."""
    out: list[Opcode] = []
    for tag, i1, i2, j1, j2 in ops:
        if i1 == i2 and j1 == j2:
            continue
        if out:
            ptag, pi1, pi2, pj1, pj2 = out[-1]
            if tag == "equal" and ptag == "equal":
                out[-1] = ("equal", pi1, i2, pj1, j2)
                continue
            if tag != "equal" and ptag != "equal":
                ni1, ni2, nj1, nj2 = pi1, i2, pj1, j2
                ntag = "replace" if (ni2 > ni1 and nj2 > nj1) else ("delete" if ni2 > ni1 else "insert")
                out[-1] = (ntag, ni1, ni2, nj1, nj2)
                continue
        out.append((tag, i1, i2, j1, j2))
    return out
