"""parsers.rocprofv3 on real rocprofv3 kernel traces (tests/fixtures/amd, PROVENANCE.md): one file per
header version seen in public output, each with its ground truth (names and counts read from the
file by eye and grep), plus border cases cut or changed from them."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS
from parsers import rocprofv3

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"

# file -> (header version, {short name: launches}, grid in workgroups, first correlation ids, device)
TRUTH = {
    "rocprofv3_v1_kernel_trace.csv": (
        "rocprofv3 2024-07 (no Thread_Id, Dispatch_Id)", {"matrixTranspose": 1}, {"(256, 256, 1)"}, [0], {1}),
    "rocprofv3_v2_kernel_trace.csv": (
        "rocprofv3 2024-08 (+ Thread_Id, Dispatch_Id)",
        {"addition_kernel": 4, "subtract_kernel": 2, "multiply_kernel": 1}, {"(16, 1024, 1)"}, [1451, 1484, 1459], {1}),
    "rocprofv3_v3_kernel_trace.csv": (
        "rocprofv3 (+ Stream_Id)",
        {"addition_kernel": 2, "subtract_kernel": 2, "multiply_kernel": 2, "divide_kernel": 2}, {"(16, 1024, 1)"},
        [1937, 1945, 1953], {2}),
    "rocprofv3_truncated_names_kernel_trace.csv": (
        "rocprofv3 (+ Stream_Id)", {"addition_kernel": 2, "subtract_kernel": 1, "divide_kernel": 1},
        {"(16, 1024, 1)"}, [1, 6, 5], {4}),
    "rocprofv3_v4_agent_index_kernel_trace.csv": (
        "rocprofv3 (+ LDS_Block_Size, Scratch_Size, register counts)", {"addition_kernel": 1},
        {"(16, 1024, 1)"}, [101], {7}),
    "rocprofv3_v4_type_relative_kernel_trace.csv": (
        "rocprofv3 (+ LDS_Block_Size, Scratch_Size, register counts)", {"addition_kernel": 1},
        {"(16, 1024, 1)"}, [113], {3}),
    "rocpd_convert_kernel_trace.csv": (
        "rocpd convert / rocpd2csv, ROCm 7 (+ Guid)",
        {"__omp_offloading_30_57b9f__QMnorm_modPnorm_l23": 3,
         "__omp_offloading_30_57b8c__QMlaplacian_modPlaplacian_l22": 2,
         "__omp_offloading_30_57b7d__QMboundary_modPboundary_conditions_l24": 2,
         "__omp_offloading_30_57ba0__QMupdate_modPupdate_l22": 2},
        {"(912, 1, 1)", "(128, 1, 1)"}, [1, 2, 3], {4}),
}


@pytest.mark.parametrize("name", sorted(TRUTH))
def test_every_real_header_version_gives_its_ground_truth(name):
    version, counts, grids, first_ids, devices = TRUTH[name]
    df = rocprofv3.read_kernel_trace(AMD / name)
    assert list(df.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert df.attrs["header_version"] == version
    assert df["short_name"].value_counts().to_dict() == counts
    assert set(df["grid"]) == grids
    assert df["correlation_id"].tolist()[:3] == first_ids
    assert set(df["device_id"]) == devices
    assert set(df["instrument"]) == {"rocprofv3"}
    assert df["start_ns"].notna().all() and (df["end_ns"] >= df["start_ns"]).all()


def test_grid_is_workgroups_and_grid_size_work_items():
    df = rocprofv3.read_kernel_trace(AMD / "rocprofv3_v3_kernel_trace.csv")
    row = df.iloc[0]
    assert row["kernel"] == "void addition_kernel<float>(float*, float const*, float const*, int, int)"
    assert row["block"] == "(64, 1, 1)" and row["grid_size"] == "(1024, 1024, 1)" and row["grid"] == "(16, 1024, 1)"
    assert row["stream_id"] == 1 and row["queue_id"] == 1 and row["thread_id"] == 21228 and row["dispatch_id"] == 1
    assert row["start_ns"] == 2414192765353337 and row["end_ns"] == 2414192765369494


def test_v1_queue_id_is_a_handle_not_a_small_number():
    df = rocprofv3.read_kernel_trace(AMD / "rocprofv3_v1_kernel_trace.csv")
    assert df["queue_id"].tolist() == [139690710949888] and df["stream_id"].isna().all()


def test_a_last_row_without_newline_is_read_and_said(tmp_path):
    df = rocprofv3.read_kernel_trace(AMD / "rocprofv3_truncated_names_kernel_trace.csv")
    assert len(df) == 4 and any("no newline" in p for p in df.attrs["problems"])


def test_pid_comes_from_the_default_file_name(tmp_path):
    f = tmp_path / "21228_kernel_trace.csv"
    f.write_bytes((AMD / "rocprofv3_v3_kernel_trace.csv").read_bytes())
    assert set(rocprofv3.read_kernel_trace(f)["pid"]) == {21228}


def _text(name: str) -> str:
    return (AMD / name).read_text()


def test_a_cut_row_is_bad_input_naming_its_line(tmp_path):
    text = _text("rocprofv3_v3_kernel_trace.csv")
    f = tmp_path / "cut.csv"
    f.write_text(text[: text.index("\n", 600) - 20])
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(f)
    assert e.value.line == 3 and "fields where the header has 19" in str(e.value) and "cut short" in str(e.value)


def test_a_row_cut_inside_a_quoted_name_is_bad_input(tmp_path):
    text = _text("rocprofv3_v3_kernel_trace.csv")
    f = tmp_path / "cut.csv"
    f.write_text(text[: text.index("subtract_kernel(float*")])
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(f)
    assert e.value.line == 3


def test_a_missing_required_column_is_bad_input(tmp_path):
    text = _text("rocprofv3_v3_kernel_trace.csv").replace('"Grid_Size_Z"', '"Grid_Depth"')
    f = tmp_path / "renamed.csv"
    f.write_text(text)
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(f)
    assert e.value.line == 1 and "lacks grid_size_z" in str(e.value)


def test_an_unknown_header_is_read_by_name_and_said(tmp_path):
    lines = _text("rocprofv3_v3_kernel_trace.csv").splitlines()
    lines = [line + ',"Extra"' if i == 0 else line + ",7" for i, line in enumerate(lines)]
    f = tmp_path / "extra.csv"
    f.write_text("\n".join(lines) + "\n")
    df = rocprofv3.read_kernel_trace(f)
    assert len(df) == 8 and df.attrs["header_version"] == "unknown (20 columns)"


def test_a_non_integer_value_names_line_and_column(tmp_path):
    text = _text("rocprofv3_v3_kernel_trace.csv").replace(",1945,", ",19x5,")
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(f)
    assert e.value.line == 3 and "correlation_id='19x5'" in str(e.value)


@pytest.mark.parametrize("content, says", [
    (b"", "empty file"),
    (b"SQLite format 3\x00" + b"\x00" * 100, "rocpd2csv"),
    (b'{"rocprofiler-sdk-tool": []}', "JSON"),
    (b'"Kind","Agent_Id","Queue_Id","Kernel_Id","Correlation_Id"\n', "no Kind, Kernel_Name"),
    (b"[2025-02-28 11:24:46][HIPBLASLT][1][Api][rocblaslt_create] handle[out]=0x1\n", "not a rocprofv3 kernel trace"),
])
def test_foreign_or_empty_files_are_refused_in_one_line(tmp_path, content, says):
    f = tmp_path / "x.csv"
    f.write_bytes(content)
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(f)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_other_kinds_are_counted_as_losses(tmp_path):
    text = _text("rocprofv3_v3_kernel_trace.csv").replace('"KERNEL_DISPATCH",2,2,2', '"MEMORY_COPY",2,2,2', 1)
    f = tmp_path / "kinds.csv"
    f.write_text(text)
    df = rocprofv3.read_kernel_trace(f)
    assert len(df) == 7 and df.attrs["losses"] == ["1 row(s) of Kind 'MEMORY_COPY' are not kernel dispatches; skipped"]


def test_rocprof_v1_results_csv_of_rocm_5_3():
    df = rocprofv3.read_kernel_trace(AMD / "rocprof_v1_rocm5.3_results.csv")
    assert df.attrs["header_version"] == "rocprof v1 results.csv (ROCm 5.3)" and df.attrs["problems"] == []
    assert len(df) == 10 and set(df["kernel"]) == {"bodyForce(Body*, float, int)"}
    assert set(df["kernel_printed"]) == {"bodyForce(Body*, float, int) [clone .kd]"} and set(df["short_name"]) == {"bodyForce"}
    assert df["dispatch_id"].tolist() == list(range(10)) and set(df["pid"]) == {3670615} and set(df["device_id"]) == {0}
    # grd/wgr are totals, not per dimension: no grid is claimed, the totals are kept
    assert df["grid"].isna().all() and set(df["grd"]) == {65536} and set(df["wgr"]) == {256}
    assert df["correlation_id"].isna().all()
    assert (df["end_ns"] - df["start_ns"]).tolist()[0] == 26316649 == df["durationns"].iloc[0]


def test_summaries_are_refused_with_what_to_read_instead():
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(AMD / "rocprof_v1_rocm5.3_results.stats.csv")
    assert e.value.line == 1 and "per-kernel summary" in str(e.value) and "results.csv" in str(e.value)


def test_unmapped_columns_are_kept():
    df = rocprofv3.read_kernel_trace(AMD / "rocpd_convert_kernel_trace.csv")
    assert set(df["guid"]) == {"00006409-00d1-70d1-a5cb-b5ab88214544"}
    assert df["lds_block_size"].tolist()[:2] == [8456, 0] and df["vgpr_count"].tolist()[:2] == [16, 32]


MARKERS = AMD / "rocprofv3_marker_api_trace.csv"


def test_roctx_ranges_of_a_real_marker_trace():
    df = rocprofv3.read_marker_trace(MARKERS)
    assert list(df.columns[: len(RANGE_COLUMNS)]) == list(RANGE_COLUMNS)
    assert df["name"].tolist() == ["hipMemcpy", "hipLaunchKernel", "hipLaunchKernel range"]
    assert df["tid"].tolist() == [717, 717, 0] and set(df["pid"]) == {717}
    assert (df["end_ns"] - df["start_ns"]).tolist() == [1342308, 1806657, 1813674]
    assert df["domain"].isna().all() and set(df["api_domain"]) == {"MARKER_CORE_API"} and df["kind"].isna().all()
    assert df.attrs["problems"] == ["2 roctxMark point(s) (start = end): not ranges; left out",
                                    "line 6: the last row has no newline: it may be cut short "
                                    "(a shorter number reads as a value)"]  # the real file ends without one


def test_marker_and_kernel_traces_refuse_each_other():
    with pytest.raises(BadInput) as e:
        rocprofv3.read_marker_trace(AMD / "rocprofv3_v3_kernel_trace.csv")
    assert e.value.line == 1 and "marker trace header" in str(e.value)
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(MARKERS)
    assert e.value.line == 1 and "no Kind, Kernel_Name" in str(e.value)


def test_a_range_that_ends_before_it_starts_is_bad_input(tmp_path):
    f = tmp_path / "m.csv"
    f.write_text(MARKERS.read_text().replace("1520113900141100,1520113901483408", "1520113901483408,1520113900141100"))
    with pytest.raises(BadInput) as e:
        rocprofv3.read_marker_trace(f)
    assert e.value.line == 4 and "ends before it starts" in str(e.value)


def test_a_hip_api_trace_is_not_read_as_roctx_ranges():
    # same columns as a marker trace (Domain, Function, ... Start/End): the Domain tells them apart
    with pytest.raises(BadInput) as e:
        rocprofv3.read_marker_trace(AMD / "rocprofv3_hip_runtime_api_trace.csv")
    assert e.value.line == 2 and "'HIP_RUNTIME_API': this is an API trace" in str(e.value)


API = AMD / "rocprofv3_hip_runtime_api_trace.csv"


def test_hip_runtime_api_calls_of_a_real_trace():
    api = rocprofv3.read_api_trace(API)
    assert api["name"].value_counts().to_dict() == {"hipMalloc": 2, "hipMemcpy": 2, "hipFree": 2,
                                                    "hipGetDevicePropertiesR0600": 1, "hipLaunchKernel": 1}
    assert api["correlation_id"].tolist() == list(range(1, 9)) and set(api["pid"]) == {238}
    assert api.loc[api["name"] == "hipLaunchKernel", "start_ns"].tolist() == [1191916547842972]
    with pytest.raises(BadInput) as e:
        rocprofv3.read_api_trace(MARKERS)
    assert e.value.line == 2 and "ROCTx marker trace" in str(e.value)


def test_launch_times_join_the_api_call_of_the_same_correlation_id(tmp_path):
    """SYNTHETIC kernel rows in the real v3 format (header and a row of rocprofv3_v3_kernel_trace.csv),
    given correlation ids 5 (the real API trace's hipLaunchKernel) and 99 (no call), in a file named
    like rocprofv3's default for process 238, joined to the real HIP runtime API trace."""
    lines = (AMD / "rocprofv3_v3_kernel_trace.csv").read_text().splitlines()[:3]
    lines[1] = lines[1].replace(",1937,", ",5,")
    lines[2] = lines[2].replace(",1945,", ",99,")
    f = tmp_path / "238_kernel_trace.csv"
    f.write_text("\n".join(lines) + "\n")
    joined = rocprofv3.with_launch_times(rocprofv3.read_kernel_trace(f), rocprofv3.read_api_trace(API))
    assert joined["launch_ns"].tolist()[0] == 1191916547842972 and pd.isna(joined["launch_ns"].tolist()[1])
    assert joined.attrs["problems"][-1].startswith("1 launch(es) without an API call of the same correlation id")
    other = tmp_path / "239_kernel_trace.csv"  # another process: correlation id 5 is not this one's
    other.write_text(f.read_text())
    assert rocprofv3.with_launch_times(rocprofv3.read_kernel_trace(other), rocprofv3.read_api_trace(API))["launch_ns"].isna().all()
