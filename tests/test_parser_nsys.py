"""parsers.nsys on the real nsys SQLite exports in ../shared/corpus/nsys (read in place).

Expected numbers were computed once by hand with the sqlite3 CLI on the corpus files.
"""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS
from parsers import nsys

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
NSYS = CORPUS / "nsys"
OLD = NSYS / "extrap_ex-gpu.s10.sqlite"  # nsys 2021 export: no mangledName, no EXPORT_META_DATA
CON = NSYS / "extrap_con_kernel.sqlite"  # nsys 2022.1.1.61, schema 2.9.1
NVTX = NSYS / "extrap_concurrent_profile1.sqlite"  # 2022 + 76 push/pop NVTX ranges

pytestmark = pytest.mark.skipif(not OLD.exists(), reason=f"corpus not found at {NSYS}")

EX_GPU = ["init_array", "init_array", "vector_add", "vector_add1", "vector_mul", "vector_dot"]
CON_SHORT = ["test0", "test1", "test1", "test0", "test0", "test2", "test3", "test4", "test4"]
NVTX_SHORT = ["test"] * 5 + ["test0", "test1", "test2", "test3", "test4", "test0", "test4"]


def test_old_schema_ex_gpu_six_launches():
    k = nsys.read_kernels(OLD)
    assert list(k.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert k["short_name"].tolist() == EX_GPU
    assert k["kernel"].tolist() == [
        "init_array(double*, unsigned long)",
        "init_array(double*, unsigned long)",
        "vector_add(double const*, double const*, unsigned long, double*)",
        "vector_add1(double const*, double const*, unsigned long, double*)",
        "vector_mul(double const*, double const*, unsigned long, double*)",
        "vector_dot(double const*, double const*, unsigned long, double*)",
    ]
    assert k["mangled"].isna().all()  # the 2021 schema has no mangledName
    assert k["correlation_id"].tolist() == [415, 417, 419, 421, 423, 425]
    assert set(k["grid"]) == {"(1, 1, 1)"} and set(k["block"]) == {"(10, 1, 1)"}
    assert k["start_ns"].tolist() == [352103962, 352137146, 352157434, 352177723, 352198138, 355183117]
    assert set(k["pid"]) == {868881} and set(k["tid"]) == {868881}
    assert set(k["stream_id"]) == {7} and set(k["instrument"]) == {"nsys"}


def test_old_schema_runtime_join_takes_the_earliest_of_duplicate_correlation_ids():
    # 2021: each launch appears twice in RUNTIME (eventClass 67 'cudaLaunchKernel' at 352044764,
    # eventClass 0 'cudaLaunchKernel_v7000' at 352044799 for correlationId 415): one row per kernel
    k = nsys.read_kernels(OLD)
    assert len(k) == 6
    assert k["launch_ns"].tolist() == [352044764, 352127704, 352149329, 352169964, 352189679, 352213950]
    assert set(k["api_name"]) == {"cudaLaunchKernel"}
    rt = nsys.read_runtime(OLD)
    assert len(rt) == 36 and rt["correlation_id"].nunique() == 18
    assert set(rt.loc[rt["correlation_id"] == 415, "name"]) == {"cudaLaunchKernel", "cudaLaunchKernel_v7000"}


def test_new_schema_con_kernel():
    k = nsys.read_kernels(CON)
    assert k["short_name"].tolist() == CON_SHORT
    assert k["mangled"].tolist()[:2] == ["_Z5test0Pdyy", "_Z5test1Pdyy"]
    # kernel = cxxfilt(mangled); nsys's own spelling has a space before '*'
    assert k["kernel"][0] == "test0(double*, unsigned long long, unsigned long long)"
    assert k["demangled_nsys"][0] == "test0(double *, unsigned long long, unsigned long long)"
    assert k["grid"].tolist()[2] == "(32, 1, 1)" and k["grid"].tolist()[5] == "(18, 1, 1)"
    assert k["stream_id"].tolist() == [14, 15, 15, 14, 14, 16, 17, 18, 18]
    assert set(k["pid"]) == {32084}
    # correlationIds 1124 and 1135 have no launching call in the export: launch_ns unknown
    no_launch = k[k["launch_ns"].isna()]
    assert no_launch["correlation_id"].tolist() == [1124, 1135]
    assert k["launch_ns"].tolist()[0] == 529153951 and k["tid"].tolist()[0] == 33680
    assert "registersPerThread" in k.columns  # unknown columns kept


def test_runtime_join_concurrent():
    k = nsys.read_kernels(NVTX)
    assert k["short_name"].tolist() == NVTX_SHORT
    assert k["correlation_id"].tolist()[0] == 120 and k["launch_ns"].tolist()[0] == 552889147
    assert set(k["api_name"]) == {"cudaLaunchKernel_v7000"}
    assert set(k["pid"]) == {5360} and set(k["tid"]) == {3848}  # globalTid 72057683963809544
    assert len(nsys.read_runtime(NVTX)) == 184


def test_nvtx_ranges_and_domain():
    r = nsys.read_ranges(NVTX)
    assert list(r.columns[: len(RANGE_COLUMNS)]) == list(RANGE_COLUMNS)
    assert len(r) == 76 and set(r["kind"]) == {"pushpop"}
    assert set(r["domain"]) == {"de.tu-darmstadt.parallel.extra_prof"}
    first = r.iloc[0]
    assert (first["name"], first["start_ns"], first["end_ns"]) == ("main", 146301581, 623746591)
    assert (first["pid"], first["tid"]) == (5360, 3848)
    assert r["end_ns"].notna().all()
    assert nsys.read_ranges(OLD).empty  # no NVTX_EVENTS table


def test_attribute_innermost_range_by_launch_time():
    k, r = nsys.read_kernels(NVTX), nsys.read_ranges(NVTX)
    assert nsys.attribute(k, r)["site_label"].isna().all()  # no range is named SITE#N
    a = nsys.attribute(k, r, pattern=r"main->.*")
    assert a["site_label"].tolist() == [
        "main->test_max_par->phase->kernel0", "main->test_max_par->phase->kernel1",
        "main->test_max_par->phase->kernel2", "main->test_max_par->phase->kernel3",
        "main->test_max_par->phase->kernel4", "main->process->phase1->kernel0",
        "main->process->phase1->kernel1", "main->process->phase2->kernel2",
        "main->process->phase1->kernel3", "main->process->phase1->kernel4",
        "main->process->phase2->kernel0", "main->process->phase2->kernel4",
    ]
    # another thread's push/pop range claims nothing
    other = r.assign(tid=r["tid"] + 1)
    assert nsys.attribute(k, other, pattern=r"main->.*")["site_label"].isna().all()


def test_attribute_site_occurrences_startend_process_wide():
    # SYNTHETIC ranges over the real kernels of extrap_concurrent_profile1.sqlite
    k = nsys.read_kernels(NVTX)
    r = pd.DataFrame(
        {
            "name": ["gemm:NT:acc0:grad1#1", "gemm:NT:acc0:grad1#2", "not a site", "index_add:acc1:grad0#1"],
            "kind": ["startend", "startend", "startend", "pushpop"],
            "start_ns": [552000000, 594000000, 552000000, 594100000],
            "end_ns": [553300000, None, 553400000, 594200000],
            "pid": [5360, 5360, 5360, 5360],
            "tid": [999, 999, 999, 3848],
        }
    )
    labels = nsys.attribute(k, r)["site_label"].tolist()
    assert labels[:4] == ["gemm:NT:acc0:grad1#1"] * 4  # launched before 553300000, other thread ok
    assert pd.isna(labels[4])  # 553320194: after #1 ended; 'not a site' is ignored
    assert labels[5:] == [
        "gemm:NT:acc0:grad1#2", "gemm:NT:acc0:grad1#2", "gemm:NT:acc0:grad1#2",
        "index_add:acc1:grad0#1", "index_add:acc1:grad0#1", "gemm:NT:acc0:grad1#2", "gemm:NT:acc0:grad1#2",
    ]  # innermost wins; the unended #2 is open to the right
    assert pd.isna(nsys.attribute(k, r.assign(pid=1))["site_label"]).all()  # another process


def test_schema_info_old_and_new():
    new, old = nsys.schema_info(CON), nsys.schema_info(OLD)
    assert new["schema_version"] == "2.9.1" and new["product_version"] == "2022.1.1.61"
    assert new["has_mangled_name"] and not old["has_mangled_name"]
    assert old["meta"] == {} and "EXPORT_META_DATA" not in old["tables"]
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in old["tables"]
    # the real export carries invalid UTF-8 (EXPORT_USER): decoded with a replacement character
    assert new["meta"]["EXPORT_USER"] == "Alexander Gei\ufffd"


def test_invalid_utf8_in_string_ids(tmp_path):
    p = tmp_path / "bad_utf8.sqlite"
    shutil.copyfile(CON, p)
    with sqlite3.connect(p) as c:  # a modified copy: a kernel name with a stray 0xFF byte
        sid = c.execute("SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()[0]
        c.execute("UPDATE StringIds SET value = CAST(x'746573ff30' AS TEXT) WHERE id = ?", (sid,))
    k = nsys.read_kernels(p)
    assert k["short_name"][0] == "tes\ufffd0"


# ----------------------------------------------------------------------------- bad input
def _bad(path, *fragments, fn=nsys.read_kernels):
    with pytest.raises(BadInput) as e:
        fn(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    for f in fragments:
        assert f in msg, msg


def test_truncated_mid_page(tmp_path):
    p = tmp_path / "cut.sqlite"
    data = OLD.read_bytes()
    p.write_bytes(data[: len(data) // 2 + 123])
    _bad(p, "truncated SQLite")


def test_truncated_at_page_boundary(tmp_path):
    p = tmp_path / "cut.sqlite"
    data = OLD.read_bytes()
    p.write_bytes(data[: 4096 * 100])
    _bad(p, "truncated SQLite", "pages")


def test_empty_and_foreign_files(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    _bad(empty, "empty file")
    _bad(CORPUS / "kineto" / "hta_triton_example__triton_example.json.gz", "not an SQLite database")
    _bad(CORPUS / "ncu" / "extrap_ex-gpu.s10.ncu-rep", "not an SQLite database", fn=nsys.read_ranges)


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    p = tmp_path / "other.sqlite"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE t (x INTEGER)")
    _bad(p, "not an nsys SQLite export")
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    _bad(p, "no CUPTI_ACTIVITY_KIND_KERNEL")
    assert nsys.read_ranges(p).empty  # an export without NVTX is fine for ranges


def test_foreign_kernel_schema(tmp_path):
    p = tmp_path / "foreign.sqlite"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
        c.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (startNs INTEGER, kernelName TEXT)")
    _bad(p, "foreign nsys schema", "demangledName")


def test_no_write_and_read_only_open(tmp_path):
    p = tmp_path / "ro.sqlite"
    shutil.copyfile(CON, p)
    before = p.read_bytes()
    nsys.read_kernels(p), nsys.read_ranges(p), nsys.schema_info(p)
    assert p.read_bytes() == before and sorted(x.name for x in tmp_path.iterdir()) == ["ro.sqlite"]


def test_registered_strings_default_domain_and_no_kernels(tmp_path):
    # a modified copy: two ranges switched to registered strings (textId), one to the default
    # domain (domainId 0), and every kernel row removed
    p = tmp_path / "modified.sqlite"
    shutil.copyfile(NVTX, p)
    with sqlite3.connect(p) as c:
        sid = c.execute("SELECT id FROM StringIds WHERE value = 'cudaLaunchKernel_v7000'").fetchone()[0]
        first = [r[0] for r in c.execute("SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start LIMIT 2")]
        c.execute(f"UPDATE NVTX_EVENTS SET text = NULL, textId = ? WHERE rowid IN ({first[0]}, {first[1]})", (sid,))
        c.execute("UPDATE NVTX_EVENTS SET domainId = 0 WHERE rowid = ?", (first[0],))
        c.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    r = nsys.read_ranges(p)
    assert r["name"].tolist()[:3] == ["cudaLaunchKernel_v7000", "cudaLaunchKernel_v7000", "main->test_max_par->init_data"]
    assert pd.isna(r["domain"][0]) and r["domain"][1] == "de.tu-darmstadt.parallel.extra_prof"
    k = nsys.read_kernels(p)
    assert k.empty and list(k.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert nsys.attribute(k, r).empty
