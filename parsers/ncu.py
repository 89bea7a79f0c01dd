"""Nsight Compute: ``.ncu-rep`` reports (through the ``ncu_report`` package) and ``--csv`` exports.

Both readers return launch frames (``forensics.core.model.LAUNCH_COLUMNS``): one row per profiled
kernel launch (ncu "action" / CSV ``ID``), in profiling order. ncu replays kernels, so it has no
GPU timestamps (``start_ns``/``end_ns`` None) and no correlation ids; ``duration_ns`` is
``gpu__time_duration.sum`` in ns. docs/parsers/ncu.md describes the columns.
"""
from __future__ import annotations

import csv
import io
import re
import struct
from os import PathLike
from pathlib import Path

import pandas as pd

from forensics.core.errors import BadInput, Unavailable
from forensics.core.model import LAUNCH_COLUMNS, conform, dim3, empty_frame
from forensics.core.site import is_occurrence_label
from forensics.core.demangle import canonical_kernel, short_name

REPORT_MAGIC = b"NVR\x00"
#: Metrics turned into launch-frame columns (name in the report -> column).
LAUNCH_METRICS = {
    "launch__stream_id": "stream_id",
    "launch__device_id": "device_id",
    "launch__context_id": "context_id",
    "launch__registers_per_thread": "registers_per_thread",
    "launch__shared_mem_per_block_static": "static_shared_memory",
    "launch__shared_mem_per_block_dynamic": "dynamic_shared_memory",
    "launch__grid_size": "grid_size",
    "launch__block_size": "block_size",
    "launch__thread_count": "thread_count",
}
_TIME_UNITS_NS = {
    "ns": 1, "nsecond": 1, "nsec": 1, "us": 1_000, "usecond": 1_000, "usec": 1_000,
    "ms": 1_000_000, "msecond": 1_000_000, "msec": 1_000_000, "s": 1_000_000_000, "second": 1_000_000_000,
}




def _matcher(pattern):
    if pattern is None:
        return is_occurrence_label
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    return lambda name: rx.fullmatch(name) is not None


# --------------------------------------------------------------------------- .ncu-rep integrity
def _varint(buf: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("varint past the end")
        c = buf[i]
        i += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return value, i


def _varint_fields(msg: bytes) -> dict[int, int]:
    """Top-level varint fields of a protobuf message (other wire types skipped)."""
    out, i = {}, 0
    while i < len(msg):
        key, i = _varint(msg, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            out[field], i = _varint(msg, i)
        elif wire == 2:
            n, i = _varint(msg, i)
            i += n
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wire}")
    if i != len(msg):
        raise ValueError("message overruns its length")
    return out


def check_report_file(path: str | PathLike[str]) -> int:
    """Walk a ``.ncu-rep`` block by block; return the number of results it declares.

    Layout (read from real reports; the ncu_report package has no integrity check and silently
    loads a cut file's leading actions): ``NVR\\0``, uint32 size + FileHeader message, then blocks
    of uint32 size + BlockHeader message (field 2 = number of results, field 5 = payload size) +
    payload. A file that does not end exactly at a block boundary is truncated.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(path, "file not found") from None
    except IsADirectoryError:
        raise BadInput(path, "is a directory, not an Nsight Compute report") from None
    if not data:
        raise BadInput(path, "empty file: expected an Nsight Compute report (.ncu-rep)")
    if not data.startswith(REPORT_MAGIC):
        raise BadInput(path, "not an Nsight Compute report: no NVR header (a .ncu-rep from ncu -o)")
    pos, results, block = 4, 0, 0
    try:
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4 + size
        while pos < len(data):
            if pos + 4 > len(data):
                raise EOFError
            (size,) = struct.unpack_from("<I", data, pos)
            if pos + 4 + size > len(data):
                raise EOFError
            header = _varint_fields(data[pos + 4 : pos + 4 + size])
            pos += 4 + size + header.get(5, 0)
            results += header.get(2, 0)
            block += 1
    except (EOFError, struct.error):
        raise BadInput(path, f"truncated Nsight Compute report: block {block + 1} runs past the end ({len(data)} bytes)") from None
    except ValueError as e:
        raise BadInput(path, f"corrupt Nsight Compute report: block {block + 1} header does not decode ({e})") from None
    if pos != len(data):
        raise BadInput(path, f"truncated Nsight Compute report: block {block} runs past the end ({len(data)} bytes)")
    return results


# --------------------------------------------------------------------------- .ncu-rep
def _ncu_report():
    try:
        import ncu_report
    except ImportError:
        raise Unavailable("ncu_report is not installed: pip install ncu-report (or forensics[ncu]) to read .ncu-rep files") from None
    return ncu_report


def _metric(action, name: str):
    m = action.metric_by_name(name)
    return None if m is None else m.value()


def _time_ns(action, name: str) -> int | None:
    m = action.metric_by_name(name)
    if m is None or m.value() is None:
        return None
    factor = _TIME_UNITS_NS.get((m.unit() or "ns").strip())
    return None if factor is None else int(round(float(m.value()) * factor))


def _text(path: Path, action: int, name: str | None) -> str | None:
    """A name from the report, None when empty; text that is not valid Unicode (a damaged report:
    ncu_report hands undecodable bytes over as surrogates) is BadInput."""
    if not name:
        return None
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise BadInput(path, f"profiled action {action} has a kernel name that is not valid text: a damaged report") from None
    return name


def _int_or_none(v):
    try:
        return None if v is None else int(v)
    except (TypeError, ValueError):
        return None


def _nvtx(action) -> list[tuple[str | None, str, str]]:
    """``(domain, kind, name)`` of every NVTX range active at the action: start/end ranges, then
    push/pop ranges from the bottom of the stack to the top."""
    state = action.nvtx_state()
    if state is None:
        return []
    out = []
    for dom_id in state.domains():
        info = state.domain_by_id(dom_id)
        if info is None:
            continue
        domain = info.name()
        domain = None if domain in ("<default domain>", "") else domain
        for i in range(len(info.start_end_ranges())):
            r = info.start_end_range(i)
            if r is not None:
                out.append((domain, "startend", r.name()))
        for i in range(len(info.push_pop_ranges())):
            r = info.push_pop_range(i)
            if r is not None:
                out.append((domain, "pushpop", r.name()))
    return out


def read_report(path: str | PathLike[str], pattern: str | re.Pattern | None = None, all_metrics: bool = False) -> pd.DataFrame:
    """Launch frame of a ``.ncu-rep``: one row per profiled action, in profiling order.

    ``kernel`` = cxxfilt(NameBase_MANGLED) when it demangles, else NameBase_DEMANGLED;
    ``mangled``; ``short_name`` = NameBase_FUNCTION; ``grid``/``block`` from
    ``launch__grid_dim_*``/``launch__block_dim_*``; ``stream_id``, ``device_id``,
    ``duration_ns`` (``gpu__time_duration.sum``); ``site_label`` = the innermost active NVTX range
    named ``SITE#N`` (or matching ``pattern``): the top-most push/pop match, else the last
    start/end match (``site_matches`` lists every match); ``nvtx_ranges`` = every active range
    name; ``action_index``, ``range_index``. ``all_metrics`` adds one column per metric.
    """
    path = Path(path)
    declared = check_report_file(path)
    ncu_report = _ncu_report()
    try:
        ctx = ncu_report.load_report(str(path))
    except Exception as e:  # the SWIG layer raises plain exceptions
        raise BadInput(path, f"ncu_report cannot load the report: {e}") from None
    if ctx is None or ctx.num_ranges() == 0:
        raise BadInput(path, "not a readable Nsight Compute report (ncu_report loads an empty context)")
    matches = _matcher(pattern)
    rows = []
    for ri in range(ctx.num_ranges()):
        rng = ctx.range_by_idx(ri)
        for ai in range(rng.num_actions()):
            a = rng.action_by_idx(ai)
            mangled = _text(path, ai, a.name(ncu_report.IAction.NameBase_MANGLED))
            demangled = _text(path, ai, a.name(ncu_report.IAction.NameBase_DEMANGLED))
            if mangled is None and demangled is None:
                raise BadInput(path, f"profiled action {ai} of range {ri} has no kernel name: a damaged report")
            dims = [_int_or_none(_metric(a, f"launch__{w}_dim_{c}")) for w in ("grid", "block") for c in "xyz"]
            nvtx = _nvtx(a)
            hits = [n for _, _, n in nvtx if matches(n)]
            pushpop_hits = [n for _, k, n in nvtx if k == "pushpop" and matches(n)]
            row = {
                "kernel": canonical_kernel(mangled, demangled),
                "mangled": mangled,
                "short_name": _text(path, ai, a.name(ncu_report.IAction.NameBase_FUNCTION)),
                "demangled_ncu": demangled,
                "grid": dim3(*dims[:3]) if None not in dims[:3] else None,
                "block": dim3(*dims[3:]) if None not in dims[3:] else None,
                "duration_ns": _time_ns(a, "gpu__time_duration.sum"),
                "site_label": (pushpop_hits or hits or [None])[-1],
                "site_matches": hits,
                "nvtx_ranges": [n for _, _, n in nvtx],
                "nvtx_domains": [d for d, _, _ in nvtx],
                "action_index": ai,
                "range_index": ri,
                "workload_type": a.workload_type(),
            }
            for metric, col in LAUNCH_METRICS.items():
                row[col] = _int_or_none(_metric(a, metric))
            if all_metrics:
                for name in a.metric_names():
                    row.setdefault(name, _metric(a, name))
            rows.append(row)
    if not rows:
        raise BadInput(path, "Nsight Compute report has no profiled actions")
    if declared and len(rows) != declared:
        raise BadInput(path, f"Nsight Compute report declares {declared} results but ncu_report loads {len(rows)}")
    df = pd.DataFrame.from_records(rows)
    for col in ("duration_ns", "action_index", "range_index", "workload_type", *LAUNCH_METRICS.values()):
        df[col] = df[col].astype("Int64")
    df["demangled_ncu"] = df["demangled_ncu"].astype("string")
    df["instrument"] = "ncu"
    df["file"] = str(path)
    return conform(df, LAUNCH_COLUMNS)


# --------------------------------------------------------------------------- --csv exports
_GROUPED = re.compile(r"^-?\d{1,3}(,\d{3})+(\.\d+)?$")
_EURO_GROUPED = re.compile(r"^-?\d{1,3}(\.\d{3}){2,}(,\d+)?$")
_NUMBER = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
_DIM3 = re.compile(r"^\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)$")
_OCCURRENCE_TEXT = re.compile(r"[A-Za-z_][\w.:]*#\d+")


def parse_number(text):
    """``"13,485"`` -> 13485, ``"9,495.42"`` -> 9495.42, ``"27.595.520"`` -> 27595520,
    ``"n/a"``/``""`` -> None; anything else non-numeric is returned as the string."""
    if text is None:
        return None
    s = str(text).strip()
    if s == "" or s.lower() == "n/a":
        return None
    if _GROUPED.match(s):
        s = s.replace(",", "")
    elif _EURO_GROUPED.match(s):
        s = s.replace(".", "").replace(",", ".")
    if _NUMBER.match(s):
        value = float(s)
        return int(value) if value.is_integer() and "." not in s and "e" not in s.lower() else value
    return text


#: The CSV reader's refusal of a file with no ncu header row (forensics.instruments.ncu says what it is).
NO_HEADER = 'not an ncu --csv export: no header row starting with "ID"'


def _csv_rows(path: Path) -> tuple[list[str], list[list[str]], int]:
    """(header, data rows, header line number): tool chatter (``==PROF==``, ``$ cmd``) skipped."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BadInput(path, "file not found") from None
    if not raw.strip():
        raise BadInput(path, "empty file: expected an ncu --csv export")
    text = raw.decode("utf-8", errors="replace")
    lines = text.splitlines()
    errors = [ln.strip() for ln in lines if ln.startswith("==ERROR==")]
    header_at = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if header_at is None:
        if errors:
            raise BadInput(path, f"the ncu run failed, no CSV header: {errors[0]}")
        # what the file is instead (an `nsys stats` report) is said by the ncu_csv instrument's reader
        raise BadInput(path, NO_HEADER)
    body = [ln for ln in lines[header_at:] if not ln.startswith("==")]
    try:
        rows = list(csv.reader(io.StringIO("\n".join(body))))
    except csv.Error as e:
        raise BadInput(path, f"malformed CSV: {e}", header_at + 1) from None
    last = body[-1] if body else ""
    complete = (len(rows[0]), len(rows[0]) - 5, len(rows[0]) - 4)  # details metric rows are ragged
    if not text.endswith("\n") and len(rows) > 1 and (last.count('"') % 2 or len(rows[-1]) not in complete):
        raise BadInput(path, "truncated last line of the ncu CSV export", len(lines))
    return rows[0], rows[1:], header_at + 1


def _dims(text):
    m = _DIM3.match(str(text or "").strip())
    return dim3(*m.groups()) if m else None


def _nvtx_site(cells: list[str], matches) -> tuple[str | None, list[str]]:
    """Best effort: site occurrences named in ncu's NVTX columns (their cell layout is not documented)."""
    found = []
    for cell in cells:
        for text in _OCCURRENCE_TEXT.findall(cell or ""):
            parts = text.split(":")  # the cell joins fields with ':'; try the longest valid tail
            hit = next((t for t in (":".join(parts[i:]) for i in range(len(parts))) if matches(t)), None)
            if hit:
                found.append(hit)
    return (found[-1] if found else None), found


def _whole(value):
    """An int for an integral number (``128.0`` -> 128), else the value unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _launch_row(fixed: dict[str, str], metrics: dict[str, tuple[str, object]], matches) -> dict:
    """One launch-frame row from a CSV launch's fixed columns and ``metric -> (unit, value)``."""
    name = fixed.get("Kernel Name") or None
    row: dict = {
        "kernel": name,
        "mangled": name if name and name.startswith("_Z") else None,
        "short_name": short_name(name) if name else None,
        "block": _dims(fixed.get("Block Size")),
        "grid": _dims(fixed.get("Grid Size")),
        "pid": parse_number(fixed.get("Process ID")),
        "stream_id": parse_number(fixed.get("Stream")),
        "context_id": parse_number(fixed.get("Context")),
        "action_index": parse_number(fixed.get("ID")),
        "process_name": fixed.get("Process Name"),
        "device": fixed.get("Device"),
    }
    if row["mangled"]:
        row["kernel"] = canonical_kernel(name, None)
        row["short_name"] = short_name(row["kernel"])
    # ncu 2022.3's raw page prints launch__block_dim_* as "128.000000" (grid dims as "32"): an
    # integral float is the integer it prints.
    dims = [_whole(metrics.get(f"launch__{w}_dim_{c}", (None, None))[1]) for w in ("grid", "block") for c in "xyz"]
    if row["grid"] is None and all(isinstance(d, int) for d in dims[:3]):
        row["grid"] = dim3(*dims[:3])
    if row["block"] is None and all(isinstance(d, int) for d in dims[3:]):
        row["block"] = dim3(*dims[3:])
    for key in ("gpu__time_duration.sum", "Duration"):
        unit, value = metrics.get(key, (None, None))
        factor = _TIME_UNITS_NS.get((unit or "").strip())
        if isinstance(value, (int, float)) and factor:
            row["duration_ns"] = int(round(value * factor))
            break
    device_id = metrics.get("launch__device_id", (None, None))[1]
    device = parse_number(fixed.get("Device"))
    row["device_id"] = device_id if isinstance(device_id, int) else (device if isinstance(device, int) else None)
    nvtx_cells = [v for k, v in fixed.items() if "Push/Pop_Range" in k or "Start/Stop_Range" in k]
    row["site_label"], row["site_matches"] = _nvtx_site(nvtx_cells, matches)
    for metric, (_, value) in metrics.items():
        row.setdefault(metric, value)
    return row


_FIXED_DETAILS_END = ("Section Name", "Metric Name", "Metric Unit", "Metric Value")


#: Columns every row of one launch repeats on the details page.
_SAME_IN_A_LAUNCH = ("Process ID", "Kernel Name")


#: The typed border of an ``ncu --csv`` export: columns (and the one metric) that become integer ids.
#: Each holds a whole number within int64, or nothing (empty, ``n/a``); anything else is a damaged row.
NCU_INT_COLUMNS = ("ID", "Process ID", "Context", "Stream", "launch__device_id")


def _check_ints(path: Path, cells: dict[str, str], line: int) -> None:
    for col in NCU_INT_COLUMNS:
        text = cells.get(col)
        if text is None or not text.strip() or text.strip().lower() == "n/a":
            continue
        v = parse_number(text)
        if isinstance(v, float) and v.is_integer() and abs(v) < 2 ** 53:
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or not -(1 << 63) <= v < (1 << 63):
            raise BadInput(path, f"{col} {text[:40]!r} is not a 64-bit integer (a damaged export?)", line)


def _check_id(path: Path, value: str, line: int) -> None:
    """ncu numbers launches 0, 1, 2...: an ID that is no such number is a damaged row."""
    if not value.strip().isdigit():
        raise BadInput(path, f"launch ID {value!r} is not a number (a damaged export?)", line)


def read_csv(path: str | PathLike[str], pattern: str | re.Pattern | None = None) -> pd.DataFrame:
    """Launch frame from an ``ncu --csv`` export, ``--page raw`` or ``--page details`` (detected).

    raw: header row, units row, one row per launch (one column per metric). details: one row per
    (launch, section, metric); rule rows skipped; pivoted to one row per ``ID``. Numbers with
    locale digit grouping are parsed; ``n/a`` is None; ``duration_ns`` from
    ``gpu__time_duration.sum`` (or the ``Duration`` label) in any time unit. ``site_label`` is a
    best-effort match of ``SITE#N`` inside the NVTX state columns when ncu ran with ``--nvtx``.
    """
    path = Path(path)
    header, rows, header_line = _csv_rows(path)
    matches = _matcher(pattern)
    width = len(header)
    for i, r in enumerate(rows):
        if len(r) > width:  # a newline lost between two rows, or a quote damaged: never cut to fit
            raise BadInput(path, f"row has {len(r)} cells, the header {width} (a damaged export?)", header_line + 1 + i)
    padded = [(header_line + 1 + i, r + [""] * (width - len(r)))
              for i, r in enumerate(rows) if any(c.strip() for c in r)]
    out = []
    if "Metric Name" in header and "Metric Value" in header:  # details page
        idx = {h: i for i, h in enumerate(header)}
        fixed_cols = [h for h in header[: idx["Section Name"]]] + [h for h in header if h in ("Block Size", "Grid Size", "Device", "CC")]
        launches: dict[str, tuple[dict, dict]] = {}
        n_rows: dict[str, int] = {}
        last_line: dict[str, int] = {}
        previous = None
        for line, r in padded:
            launch_id = r[idx["ID"]]
            metric = r[idx["Metric Name"]]
            _check_id(path, launch_id, line)
            fixed = {h: r[idx[h]] for h in fixed_cols}
            _check_ints(path, {**fixed, metric: r[idx["Metric Value"]]}, line)
            if launch_id not in launches:
                launches[launch_id] = (fixed, {})
            elif launch_id != previous:
                raise BadInput(path, f"rows of launch ID {launch_id} are not together (a damaged export?)", line)
            else:  # rule rows print their own Stream (ncu 2022.3): compare what names the launch
                differs = [h for h in _SAME_IN_A_LAUNCH if h in idx and fixed.get(h) != launches[launch_id][0].get(h)]
                if differs:
                    raise BadInput(path, f"launch ID {launch_id}: its rows disagree on {differs[0]} (a damaged export?)", line)
            previous = launch_id
            n_rows[launch_id] = n_rows.get(launch_id, 0) + 1
            last_line[launch_id] = line
            if not metric:
                continue  # a rule row
            value = parse_number(r[idx["Metric Value"]])
            launches[launch_id][1][metric] = (r[idx["Metric Unit"]], value)
        counts = list(n_rows.values())
        if len(counts) > 1 and len(set(counts[:-1])) == 1 and counts[-1] < counts[0]:
            last = list(n_rows)[-1]
            raise BadInput(path, f"the last launch (ID {last}) has {counts[-1]} of the {counts[0]} rows every other "
                           "launch has: the export is cut short", last_line[last])
        out = [_launch_row(fixed, metrics, matches) for fixed, metrics in launches.values()]
        page = "details"
    else:  # raw page: the first data row holds units
        if not rows:
            raise BadInput(path, "ncu raw CSV has a header but no units row", header_line)
        units = padded[0][1] if padded else [""] * width
        metric_cols = [i for i, h in enumerate(header) if "__" in h or "." in h]
        fixed_cols = [i for i in range(width) if i not in metric_cols]
        id_col = header.index("ID")
        widths = {line: len(r) for line, r in zip(range(header_line + 1, header_line + 1 + len(rows)), rows)}
        for line, r in padded[1:]:
            if widths.get(line, width) != width:  # one launch per row, one cell per column
                raise BadInput(path, f"row has {widths[line]} cells, the header {width} (a damaged export?)", line)
            _check_id(path, r[id_col], line)
            fixed = {header[i]: r[i] for i in fixed_cols}
            _check_ints(path, {h: r[i] for i, h in enumerate(header) if h in NCU_INT_COLUMNS}, line)
            metrics = {header[i]: (units[i], parse_number(r[i])) for i in metric_cols}
            out.append(_launch_row(fixed, metrics, matches))
        page = "raw"
    if not out:
        return conform(empty_frame(LAUNCH_COLUMNS), LAUNCH_COLUMNS)
    df = pd.DataFrame.from_records(out)
    for col in ("duration_ns", "action_index", "context_id"):
        if col in df.columns:
            df[col] = pd.array([v if isinstance(v, int) else None for v in df[col]], dtype="Int64")
    for col in ("pid", "stream_id", "device_id"):
        df[col] = pd.array([v if isinstance(v, int) else None for v in df[col]], dtype="Int64")
    df["csv_page"] = page
    df["instrument"] = "ncu"
    df["file"] = str(path)
    return conform(df, LAUNCH_COLUMNS)
