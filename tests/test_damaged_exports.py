"""Corrupt or oddly typed real exports (issue 15 item 7): bad input in one line, never a traceback.

Each case starts from a real corpus file and damages it in one stated way (SQL on a copy of an
nsys export; one flipped byte of a real .ncu-rep), then runs `forensics analyze` on it.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from forensics.capture.directory import new_manifest, write_manifest
from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.judge.analysis import analyze

K = "CUPTI_ACTIVITY_KIND_KERNEL"
# (case, SQL, expected: "bad" = BadInput, "ok" = analysed)
CASES = [
    ("grid as text", f"UPDATE {K} SET gridX='abc'", "bad"),
    ("start as text", f"UPDATE {K} SET start='x'", "bad"),
    ("start as real", f"UPDATE {K} SET start=1.5", "bad"),
    ("correlation id as text", f"UPDATE {K} SET correlationId='a'", "bad"),
    ("short name id as text", f"UPDATE {K} SET shortName='abc'", "bad"),
    ("name id as real", f"UPDATE {K} SET demangledName=1.5", "bad"),
    ("name id StringIds lacks", f"UPDATE {K} SET demangledName=999999", "bad"),
    ("pid as text", f"UPDATE {K} SET globalPid='p'", "bad"),
    ("device as text", f"UPDATE {K} SET deviceId='d'", "bad"),
    ("stream as blob", f"UPDATE {K} SET streamId=x'00ff'", "bad"),
    ("grid beyond CUDA's limit", f"UPDATE {K} SET gridY=99999999", "bad"),
    ("negative block", f"UPDATE {K} SET blockX=-1", "bad"),
    ("string as blob", "UPDATE StringIds SET value=x'00ff80'", "bad"),
    ("runtime start as text", "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start='x'", "bad"),
    ("no StringIds", "DROP TABLE StringIds", "bad"),
    ("runtime column renamed", "ALTER TABLE CUPTI_ACTIVITY_KIND_RUNTIME RENAME COLUMN correlationId TO x", "bad"),
    ("kernel table a view", f"ALTER TABLE {K} RENAME TO K2; CREATE VIEW {K} AS SELECT * FROM K2", "ok"),
    ("no launches", f"DELETE FROM {K}", "ok"),
    ("NULL correlation id", f"UPDATE {K} SET correlationId=NULL", "ok"),
]


def _capture(root: Path, name: str, instrument: str) -> Path:
    write_manifest(root, new_manifest(files=[{"path": name, "instrument": instrument, "arm": "a1", "rank": 0}]))
    return root


@pytest.mark.parametrize("case,sql,expected", CASES, ids=[c[0] for c in CASES])
def test_oddly_typed_nsys_export(corpus, tmp_path, capsys, case, sql, expected):
    db = tmp_path / "x.sqlite"
    shutil.copy(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite", db)
    with sqlite3.connect(db) as conn:
        conn.executescript(sql)
    root = _capture(tmp_path, db.name, "nsys")
    if expected == "ok":
        analyze(root)
        return
    with pytest.raises(BadInput):
        analyze(root)
    assert main(["analyze", str(root), "-q", "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.sqlite" in err[0] and "Traceback" not in err[0]


def test_one_flipped_byte_in_a_real_ncu_rep_gives_a_name_that_is_no_text(corpus, tmp_path, capsys):
    """Seen in the mutation sweep: byte 83941 of the ex-gpu report, XOR 0xFF, makes ncu_report hand
    over a kernel name with undecodable bytes (it raised UnicodeEncodeError before)."""
    data = bytearray((corpus / "ncu" / "extrap_ex-gpu.s10.ncu-rep").read_bytes())
    data[83941] ^= 0xFF
    rep = tmp_path / "x.ncu-rep"
    rep.write_bytes(bytes(data))
    root = _capture(tmp_path, rep.name, "ncu")
    assert main(["analyze", str(root), "-q", "--out", str(tmp_path / "out")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "x.ncu-rep" in err[0] and "not valid text" in err[0]
