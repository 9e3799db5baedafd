"""parsers/nsys.py on the real sc22 tutorial reports (Nsight Systems 2022.4) and their exports."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from profreport.errors import InputError, MissingToolError, UnsupportedFormatError
from profreport.model import Profile, distinct_ids
from profreport.parsers import ParseOptions, nsys, parse_file
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.steps import phases_text
from profreport.reports.render.display import metric_rows

sys.path.insert(0, str(Path(__file__).parent))
from conftest import write_nsys_export  # noqa: E402

STEMS = ("sc22_1gpu_baseline", "sc22_4gpu_baseline")
NCCL_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float"
A100 = "NVIDIA A100-SXM4-40GB"
#: Set to a folder of <stem>.sqlite exports made by a newer nsys (scripts/nsys_newer_export.sh).
NEWER_EXPORTS_ENV = "PROFREPORT_NSYS_NEWER_EXPORTS"


@pytest.fixture(scope="session")
def reports(corpus: Path) -> dict[str, Path]:
    """The corpus .nsys-rep reports by stem."""
    return {stem: corpus / "nsys" / f"{stem}.nsys-rep" for stem in STEMS}


@pytest.fixture(scope="session")
def exports(reports: dict[str, Path], nsys_available: str,
            nsys_cache_dir: Path) -> dict[str, Path]:
    """Each corpus report exported once per session into the shared cache."""
    return {stem: nsys.export_report(report, cache_dir=nsys_cache_dir)
            for stem, report in reports.items()}


@pytest.fixture(scope="session")
def profiles(reports: dict[str, Path], exports: dict[str, Path],
             nsys_cache_dir: Path) -> dict[str, Profile]:
    """Each corpus report parsed from its .nsys-rep (through the session's export cache)."""
    return {stem: nsys.parse(report, cache_dir=nsys_cache_dir)
            for stem, report in reports.items()}


def _mean_ms(frame: pd.DataFrame) -> float:
    """Mean duration of a start/end table in milliseconds."""
    return float((frame["end"] - frame["start"]).mean()) / 1e6


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    """A table in a canonical row order, to compare tables from two exports."""
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


def test_4gpu_nccl_kernels(profiles: dict[str, Profile]) -> None:
    """472 NCCL all-reduce kernels, all communication, 8 per step over 59 steps."""
    kernels = profiles["sc22_4gpu_baseline"].table("kernels")
    nccl = kernels[kernels["short_name"] == NCCL_KERNEL]
    assert len(kernels) == 22564
    assert len(nccl) == 472
    assert nccl["is_comm"].all()
    assert kernels["is_comm"].sum() == 472
    assert len(nccl) / len(profiles["sc22_4gpu_baseline"].table("steps")) == 8


def test_4gpu_steps(profiles: dict[str, Profile]) -> None:
    """59 ``step N`` ranges averaging 29.9 ms, numbered 0..58 on one thread."""
    steps = profiles["sc22_4gpu_baseline"].table("steps")
    assert len(steps) == 59
    assert steps["number"].tolist() == list(range(59))
    assert set(steps["origin"]) == {"nvtx"}
    assert steps[["pid", "tid"]].drop_duplicates().shape[0] == 1
    assert _mean_ms(steps) == pytest.approx(29.89, abs=0.01)


def test_4gpu_nccl_ranges_come_from_text_ids(profiles: dict[str, Profile],
                                             exports: dict[str, Path]) -> None:
    """NCCL's ranges have no text, only textId; they are named, in domain NCCL, off-step-thread."""
    with sqlite3.connect(exports["sc22_4gpu_baseline"]) as conn:
        (by_id_only,) = conn.execute(
            "SELECT count(*) FROM NVTX_EVENTS AS e JOIN StringIds AS s ON s.id = e.textId "
            "WHERE e.text IS NULL AND s.value = 'ncclAllReduce'").fetchone()
    profile = profiles["sc22_4gpu_baseline"]
    ranges = profile.table("ranges")
    nccl = ranges[ranges["name"] == "ncclAllReduce"]
    assert by_id_only == 472
    assert len(nccl) == 472
    assert set(nccl["domain"]) == {"NCCL"}
    step_threads = set(profile.table("steps")["tid"])
    assert step_threads.isdisjoint(set(nccl["tid"]))
    assert set(ranges.loc[ranges["name"] == "step 0", "domain"]) == {""}


def test_1gpu_steps_and_copies(profiles: dict[str, Profile]) -> None:
    """59 steps averaging 88.6 ms; pinned HtoD input copies and tiny pageable DtoH copies."""
    profile = profiles["sc22_1gpu_baseline"]
    steps = profile.table("steps")
    assert len(steps) == 59
    assert _mean_ms(steps) == pytest.approx(88.63, abs=0.01)
    copies = profile.table("memcpy").groupby(["kind", "src_kind", "dst_kind"])["bytes"]
    summary = copies.agg(["count", "sum"]).to_dict("index")
    assert summary == {("DtoH", "Device", "Pageable"): {"count": 59, "sum": 236},
                       ("HtoD", "Pinned", "Device"): {"count": 118, "sum": 35_634_806_784}}
    assert profile.table("kernels")["is_comm"].sum() == 0


def test_version_devices_runtime_and_sync(profiles: dict[str, Profile]) -> None:
    """Exporter version and schema, four A100s, suffix-free CUDA API names, named sync kinds."""
    profile = profiles["sc22_4gpu_baseline"]
    assert profile.kind == "nsys"
    assert profile.tool_version == "2022.4.2.1"
    assert profile.meta.export_schema == "3.0.0"
    assert profile.meta.export_meta_table == "EXPORT_META_DATA"
    devices = profile.table("devices")
    assert devices["device"].tolist() == [0, 1, 2, 3]
    assert set(devices["name"]) == {A100}
    assert set(devices["sm_count"]) == {108}
    assert set(devices["memory_bytes"]) == {42_350_739_456}
    assert set(profile.table("kernels")["device"]) == {0}
    runtime = profile.table("runtime")
    assert not runtime["name"].str.contains(r"_v\d{4,}$", regex=True).any()
    assert "cudaStreamGetCaptureInfo_v2" in set(runtime["name"])  # the API's own _v2 stays
    assert (runtime["name"] == "cudaLaunchKernel").sum() == 21004
    assert set(runtime["pid"]) == {79184}
    assert profile.table("sync")["kind"].value_counts().to_dict() == {
        "stream_synchronize": 2242, "stream_wait_event": 186, "event_synchronize": 1}
    threads = profile.table("threads")
    assert len(threads) == 35
    assert "[NSys Comms]" in set(threads["name"])
    assert not profile.has("cpu_collectives")


def test_sqlite_export_is_read_without_nsys(exports: dict[str, Path], profiles: dict[str, Profile],
                                            monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    """A .sqlite export is read directly: same tables, and nsys is not needed for it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    direct = nsys.parse(exports["sc22_4gpu_baseline"])
    via_report = profiles["sc22_4gpu_baseline"]
    assert direct.path == exports["sc22_4gpu_baseline"]
    assert set(direct.tables) == set(via_report.tables)
    for name, table in via_report.tables.items():
        pd.testing.assert_frame_equal(direct.table(name), table)


def test_report_from_read_only_folder_is_exported_once(reports: dict[str, Path],
                                                       nsys_available: str,
                                                       tmp_path: Path) -> None:
    """Nothing is written beside the report; the second parse reuses the cached export."""
    folder = tmp_path / "readonly"
    folder.mkdir()
    report = Path(shutil.copy2(reports["sc22_4gpu_baseline"], folder))
    folder.chmod(0o555)
    cache = tmp_path / "cache"
    try:
        first = nsys.parse(report, cache_dir=cache)
        exported = Path(first.meta.export_path)
        stamp = exported.stat().st_mtime_ns
        second = nsys.parse(report, cache_dir=cache)
    finally:
        folder.chmod(0o755)
    assert sorted(path.name for path in folder.iterdir()) == [report.name]
    assert [path.name for path in cache.iterdir()] == [exported.name]
    assert second.meta.export_path == str(exported)
    assert exported.stat().st_mtime_ns == stamp
    assert len(second.table("kernels")) == 22564


def test_cache_key_follows_report_content(reports: dict[str, Path], tmp_path: Path) -> None:
    """A rewritten report or another nsys version gets another cache entry."""
    report = Path(shutil.copy2(reports["sc22_1gpu_baseline"], tmp_path / "run.nsys-rep"))
    name = nsys.cache_name(report, "2022.4.2.1")
    assert name.startswith("run-") and name.endswith(".sqlite")
    assert nsys.cache_name(report, "2023.4.4.54") != name
    with open(report, "r+b") as handle:
        handle.seek(-1, os.SEEK_END)
        last = handle.read(1)
        handle.seek(-1, os.SEEK_END)
        handle.write(bytes([last[0] ^ 0xFF]))
    os.utime(report, ns=(0, 0))
    assert nsys.cache_name(report, "2022.4.2.1") != name


def test_default_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """$XDG_CACHE_HOME/profreport/nsys when set."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert nsys.default_cache_dir() == tmp_path / "profreport" / "nsys"


def test_export_without_enum_and_sync_tables(exports: dict[str, Path],
                                             profiles: dict[str, Profile],
                                             tmp_path: Path) -> None:
    """Without ENUM_* tables the documented codes give the same names; absent tables are empty."""
    copy = Path(shutil.copy2(exports["sc22_4gpu_baseline"], tmp_path / "stripped.sqlite"))
    with sqlite3.connect(copy) as conn:
        for table in ("ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_CUPTI_SYNC_TYPE",
                      "CUPTI_ACTIVITY_KIND_MEMSET"):
            conn.execute(f"DROP TABLE {table}")
    stripped = nsys.parse(copy)
    original = profiles["sc22_4gpu_baseline"]
    pd.testing.assert_frame_equal(stripped.table("memcpy"), original.table("memcpy"))
    pd.testing.assert_frame_equal(stripped.table("sync"), original.table("sync"))
    assert not stripped.has("memset")
    assert list(stripped.table("memset").columns) == list(original.table("memset").columns)


def test_text_file_named_sqlite(tmp_path: Path) -> None:
    """A text file named x.sqlite is refused in one line naming the file."""
    path = tmp_path / "x.sqlite"
    path.write_text("step,ms\n1,30\n")
    with pytest.raises(InputError) as caught:
        nsys.parse(path)
    assert "x.sqlite" in caught.value.one_line()


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    """Any other SQLite database is refused."""
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE results (step INTEGER, ms REAL)")
    with pytest.raises(InputError, match="not an Nsight Systems export") as caught:
        nsys.parse(path)
    assert "other.sqlite" in caught.value.one_line()


def test_truncated_report(reports: dict[str, Path], nsys_available: str, tmp_path: Path) -> None:
    """A truncated .nsys-rep fails with nsys's own error line, and leaves no cache file behind."""
    path = tmp_path / "cut.nsys-rep"
    path.write_bytes(reports["sc22_1gpu_baseline"].read_bytes()[: 1 << 20])
    cache = tmp_path / "cache"
    with pytest.raises(InputError, match="nsys export failed: .*mismatch") as caught:
        nsys.parse(path, cache_dir=cache)
    assert "cut.nsys-rep" in caught.value.one_line()
    assert list(cache.iterdir()) == []


def test_report_without_nsys(reports: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                             tmp_path: Path) -> None:
    """Reading a .nsys-rep without nsys says how to get it."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # no unpacked nsys either
    with pytest.raises(MissingToolError, match="nsys is not installed"):
        nsys.parse(reports["sc22_1gpu_baseline"], cache_dir=tmp_path)


@pytest.mark.parametrize("stem", STEMS)
def test_newer_nsys_export_gives_the_same_tables(stem: str, profiles: dict[str, Profile]) -> None:
    """An export by a newer nsys (2023.4 or 2024.2: CI uses 2024.2) yields the same tables."""
    folder = os.environ.get(NEWER_EXPORTS_ENV)
    if not folder:
        pytest.skip(f"{NEWER_EXPORTS_ENV} is not set (scripts/nsys_newer_export.sh makes them)")
    newer = nsys.parse(Path(folder) / f"{stem}.sqlite")
    older = profiles[stem]
    assert newer.tool_version != older.tool_version
    assert newer.meta.export_schema != older.meta.export_schema
    assert set(newer.tables) == set(older.tables)
    for name, table in older.tables.items():
        pd.testing.assert_frame_equal(_sorted(newer.table(name)), _sorted(table))
    assert len(newer.table("steps")) == 59


# --- impossible values and damaged exports (issue #12) ---

INT64_MAX = 2**63 - 1


def _hostile_copy(exports: dict[str, Path], tmp_path: Path) -> Path:
    """The 4-GPU export with impossible times written into a few kernel, runtime, sync, memcpy
    and NVTX rows (what a damaged or crafted file holds)."""
    copy = Path(shutil.copy2(exports["sc22_4gpu_baseline"], tmp_path / "hostile.sqlite"))
    with sqlite3.connect(copy) as conn:
        kernels = "CUPTI_ACTIVITY_KIND_KERNEL"
        conn.execute(f"UPDATE {kernels} SET end = ? WHERE rowid = 1", (INT64_MAX,))
        conn.execute(f"UPDATE {kernels} SET start = 1e30, end = 2e30 WHERE rowid = 2")
        conn.execute(f"UPDATE {kernels} SET end = start - 100 WHERE rowid = 3")
        conn.execute(f"UPDATE {kernels} SET start = -5 WHERE rowid = 4")
        conn.execute(f"UPDATE {kernels} SET end = 'soon' WHERE rowid = 5")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = ? WHERE rowid = 1",
                     (INT64_MAX,))
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION SET end = start - 1 "
                     "WHERE rowid = 1")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = 1e30 WHERE rowid = 1")
        conn.execute("UPDATE NVTX_EVENTS SET end = ? WHERE text = 'step 10'", (INT64_MAX,))
    return copy


def test_impossible_times_are_dropped_and_counted(exports: dict[str, Path],
                                                  profiles: dict[str, Profile],
                                                  tmp_path: Path) -> None:
    original = profiles["sc22_4gpu_baseline"]
    hostile = nsys.parse(_hostile_copy(exports, tmp_path))
    assert hostile.meta.dropped == {"kernels": 5, "memcpy": 1, "runtime": 1, "sync": 1,
                                       "ranges": 1}
    assert len(hostile.table("kernels")) == len(original.table("kernels")) - 5
    assert len(hostile.table("runtime")) == len(original.table("runtime")) - 1
    assert 10 not in set(hostile.table("steps")["number"])
    assert len(hostile.table("steps")) == len(original.table("steps")) - 1
    for name in ("kernels", "memcpy", "memset", "runtime", "sync", "ranges"):
        table = hostile.table(name)
        assert (table["end"] >= table["start"]).all() and (table["start"] >= 0).all()
        assert table["end"].max() <= original.table(name)["end"].max()
    assert any("5 kernels rows dropped" in note for note in hostile.meta.notes)
    assert original.meta.dropped == {} and original.meta.notes == [
        "the 59 steps are NVTX ranges named as steps"]


def test_impossible_times_never_give_impossible_fractions(exports: dict[str, Path],
                                                          tmp_path: Path) -> None:
    from profreport.reports.analysis.metrics import compute_run_metrics

    metrics = compute_run_metrics([nsys.parse(_hostile_copy(exports, tmp_path))])
    assert 0.9 < metrics.gpu.busy_fraction <= 1.0  # ~97% busy, as without the bad rows
    assert all(0.0 <= share <= 1.0 for share in metrics.gpu.per_device.values())
    assert 0.0 <= metrics.dataloader_fraction <= 1.0


def test_sync_events_carry_the_correlation_of_their_call(profiles: dict[str, Profile]) -> None:
    """The correlation id joins each CUPTI sync record to the API call that waited. nsys 2022.4
    records a syncType that disagrees with that call (cudaStreamWaitEvent as a stream sync):
    the call's name is the evidence to use."""
    profile = profiles["sc22_4gpu_baseline"]
    sync = profile.table("sync")
    calls = sync.merge(profile.table("runtime"), on="correlation")
    # Every sync event but one names the API call that waited (2428 of 2429).
    assert (len(sync), len(calls)) == (2429, 2428)
    assert calls.groupby(["kind", "name"]).size().to_dict() == {
        ("stream_synchronize", "cudaStreamSynchronize"): 118,
        ("stream_synchronize", "cudaStreamWaitEvent"): 2124,
        ("stream_wait_event", "cudaEventQuery"): 1,
        ("stream_wait_event", "cudaEventSynchronize"): 185}
    # CUPTI records 0xFFFFFFFF as the stream of a sync that waited on none: read as -1, none,
    # so the column holds the few real stream ids in one byte.
    assert sync[sync["stream"] < 0].groupby("kind", observed=True).size().to_dict() == {
        "stream_wait_event": 186, "event_synchronize": 1}
    assert (sync["stream"].dtype, int(sync["stream"].max())) == (np.int8, 84)


def test_a_column_of_one_value_is_held_once(profiles: dict[str, Profile]) -> None:
    """A one-GPU process's device column and a one-process capture's pid codes hold one value
    throughout: each is that value broadcast to the rows (read-only, no byte a row); a column
    of several values (the streams) is an array as before."""
    profile = profiles["sc22_4gpu_baseline"]
    kernels, runtime = profile.table("kernels"), profile.table("runtime")
    assert kernels["device"].to_numpy().strides == (0,)
    assert kernels["device"].value_counts().to_dict() == {0: len(kernels)}
    assert runtime["pid"].array.codes.strides == (0,)
    assert runtime["pid"].value_counts().to_dict() == {79184: len(runtime)}
    assert kernels["stream"].to_numpy().strides == (1,) and kernels["stream"].nunique() > 1


@pytest.mark.parametrize("damage", ["truncated", "garbage-pages", "wrong-column-type"])
def test_damaged_exports_give_one_line(exports: dict[str, Path], tmp_path: Path,
                                       damage: str) -> None:
    path = tmp_path / f"{damage}.sqlite"
    data = bytearray(exports["sc22_4gpu_baseline"].read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 3]
    elif damage == "garbage-pages":
        data[len(data) // 2: len(data) // 2 + 65536] = os.urandom(65536)
    path.write_bytes(bytes(data))
    if damage == "wrong-column-type":
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 'gpu0' "
                         "WHERE rowid = 7")
    with pytest.raises(InputError) as caught:
        nsys.parse(path)
    line = caught.value.one_line()
    assert line.startswith(str(path)) and "\n" not in line and len(line) < 800


def test_damaged_kernel_pages_name_the_table(exports: dict[str, Path], tmp_path: Path) -> None:
    """Bytes flipped in the kernel table's leaf pages: the page reader gives the table to SQL,
    whose error is SQLite's reason and the table, not the query pandas ran."""
    import random

    from profreport.parsers import sqlite_pages

    source = exports["sc22_4gpu_baseline"]
    with sqlite3.connect(source) as conn:
        root = conn.execute("SELECT rootpage FROM sqlite_master "
                            "WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    reader = sqlite_pages.PageReader(source)
    leaves = reader.leaf_pages(root)
    reader.close()
    lines = []
    for seed in range(8):
        rng, data = random.Random(seed), bytearray(source.read_bytes())
        for _ in range(50):
            page = int(leaves[rng.randrange(len(leaves))])
            data[(page - 1) * page_size + rng.randrange(page_size)] = rng.randrange(256)
        path = tmp_path / f"flipped{seed}.sqlite"
        path.write_bytes(bytes(data))
        try:
            nsys.parse(path)
        except InputError as caught:
            lines.append(caught.one_line().removeprefix(f"{path}: "))
    table = "table CUPTI_ACTIVITY_KIND_KERNEL"
    malformed = [line for line in lines if line == f"damaged nsys export ({table}): "
                 "database disk image is malformed"]
    wrong_type = [line for line in lines if re.fullmatch(
        rf"damaged nsys export: a column holds values of the wrong type \({table}: \w+ holds "
        r"text or real values\)", line)]
    # Which of the two a flip gives depends on where the export's bytes lie (nsys version):
    # every damaged file gives one of them, and at least one is damaged.
    assert lines and len(malformed) + len(wrong_type) == len(lines)


# --- the page reader (parsers/sqlite_pages.py) gives exactly what SQL gives ---


@pytest.mark.parametrize("stem", STEMS)
def test_page_reader_tables_equal_sql_tables(stem: str, exports: dict[str, Path],
                                             page_decoder: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Every table the page reader gives (by each decoder) equals what SQL gives."""
    native = nsys.parse(exports[stem])
    monkeypatch.setattr(nsys, "NATIVE_READER", False)
    through_sql = nsys.parse(exports[stem])
    for name in ("kernels", "runtime", "memcpy", "memset", "sync", "steps", "dataloader"):
        pd.testing.assert_frame_equal(native.table(name), through_sql.table(name))
    pd.testing.assert_frame_equal(_sorted(native.table("ranges")),  # ties: any order in SQL
                                  _sorted(through_sql.table("ranges")))
    assert len(native.table("kernels")) == {"sc22_1gpu_baseline": 28674,
                                            "sc22_4gpu_baseline": 22564}[stem]


def test_page_reader_drops_what_sql_drops(exports: dict[str, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = _hostile_copy(exports, tmp_path)
    native = nsys.parse(path)
    monkeypatch.setattr(nsys, "NATIVE_READER", False)
    through_sql = nsys.parse(path)
    assert native.meta.dropped == through_sql.meta.dropped
    for name in ("kernels", "runtime", "memcpy", "memset", "sync", "steps"):
        pd.testing.assert_frame_equal(native.table(name), through_sql.table(name))


def _varint(value: int) -> bytes:
    """``value`` (0 to 2**64 - 1) as an SQLite varint (file format, section 1.6)."""
    if value >= 1 << 56:  # eight 7-bit bytes, then all eight bits of the last
        high = [(value >> (8 + 7 * k)) & 0x7F for k in reversed(range(8))]
        return bytes(b | 0x80 for b in high) + bytes([value & 0xFF])
    groups = [value & 0x7F]
    while value := value >> 7:
        groups.append(value & 0x7F | 0x80)
    return bytes(reversed(groups))


def test_varint_lengths_without_values_match_decoded_varints() -> None:
    """The rowid's length read without its value (sqlite_pages._varint_lengths) agrees with the
    full decoding for varints of every length, 1 to 9 bytes."""
    from profreport.parsers import sqlite_pages

    values = [0, 1, 127, 128, 2**14 - 1, 2**14, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56 - 1,
              2**56, 2**63 - 1, 2**64 - 1]
    encoded = [_varint(v) for v in values]
    starts = np.cumsum([0] + [len(e) for e in encoded[:-1]])
    buf = np.frombuffer(b"".join(encoded) + bytes(16), dtype=np.uint8)
    decoded, lengths = sqlite_pages._varints(buf, starts)
    assert decoded.astype(np.uint64).tolist() == values
    assert lengths.tolist() == [1, 1, 1, 2, 2, 3, 4, 5, 6, 7, 8, 8, 9, 9, 9]
    windows = sqlite_pages._windows(buf)
    assert sqlite_pages._varint_lengths(windows, starts).tolist() == lengths.tolist()


@pytest.fixture(params=["C", "numpy"])
def page_decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each of the page reader's two decoders in turn: the C extension (parsers/_pages.c),
    skipped where it is not built, and numpy."""
    from profreport.parsers import sqlite_pages

    if request.param == "numpy":
        monkeypatch.setattr(sqlite_pages, "_pages", None)
    elif sqlite_pages._pages is None:
        pytest.skip("the C page decoder is not built (no C compiler at install)")
    return request.param


def test_the_c_page_decoder_is_built_where_a_compiler_is() -> None:
    """An install on a machine with a C compiler builds the page reader's C decoder (the
    extension is optional: a failed build would leave nsys exports to the slower numpy one
    without a word)."""
    import shutil
    import sysconfig

    from profreport.parsers import sqlite_pages

    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}) here")
    assert sqlite_pages._pages is not None, f"{compiler} is here but parsers/_pages.c is not built"


def test_page_reader_reads_every_integer_width(tmp_path: Path, page_decoder: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Integers of 1 to 8 bytes, negatives, the constants 0 and 1, NULL, reals and text, over
    many pages (a B-tree of interior pages), with rows that spill onto overflow pages; by
    each decoder."""
    from profreport.parsers import sqlite_pages

    path = tmp_path / "widths.sqlite"
    values = [0, 1, -1, 127, -128, 32767, -32768, 2**23 - 1, -(2**23), 2**31 - 1, -(2**31),
              2**47 - 1, -(2**47), 2**63 - 1, -(2**63), None, 1.5, "text"]
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (a INTEGER, pad TEXT, b INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?)",
                         [(v, "x" * (i % 300), i) for i, v in enumerate(values * 400)])
        conn.execute("INSERT INTO t VALUES (5, ?, 7)", ("y" * 10_000,))  # spills
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    reader = sqlite_pages.PageReader(path)
    chunks = list(reader.columns(root, [0, 1, 2], text_columns=(0, 1)))
    leaves = reader.leaf_pages(root)
    reader.close()
    assert len(leaves) > 100  # a tree of interior pages over many leaves
    a = np.concatenate([c.values[0] for c in chunks])
    kinds = np.concatenate([c.kinds[0] for c in chunks])
    b = np.concatenate([c.values[2] for c in chunks])
    assert np.array_equal(b, np.arange(len(values) * 400))
    ints = [v for v in values if type(v) is int]
    expected_kinds = [sqlite_pages.INTEGER if type(v) is int else sqlite_pages.NULL if v is None
                      else sqlite_pages.TEXT if type(v) is str else sqlite_pages.OTHER
                      for v in values]
    assert kinds.tolist() == expected_kinds * 400
    assert a[kinds == sqlite_pages.INTEGER].tolist() == ints * 400
    assert np.concatenate([c.spilled for c in chunks]).tolist() == [len(values) * 400 + 1]
    texts = np.concatenate([c.texts[0] for c in chunks])
    assert texts.tolist() == [v if type(v) is str else None for v in values] * 400
    pads = np.concatenate([c.texts[1] for c in chunks])  # "" to 299 chars: grouped and not
    assert pads.tolist() == ["x" * (i % 300) for i in range(len(values) * 400)]
    # Chunks reduced by several threads come back in row order, as on one thread.
    monkeypatch.setattr(sqlite_pages, "CHUNK_PAGES", 16)
    reader = sqlite_pages.PageReader(path)
    for threads in (1, 3):
        rows = list(reader.reduced(leaves, [0, 2], (), lambda chunk: chunk.values[2], threads))
        assert len(rows) == sqlite_pages.chunk_count(leaves) > 1
        assert np.array_equal(np.concatenate(rows), b)
    reader.close()


def test_a_record_running_past_its_page_is_refused(tmp_path: Path, page_decoder: str) -> None:
    """A cell whose payload size says more bytes than its page holds past it (a damaged size,
    still small enough to be stored on the page): each decoder refuses the chunk, naming it,
    and reads nothing past the page (the caller reads the table through SQL instead)."""
    from profreport.parsers import sqlite_pages

    path = tmp_path / "damaged.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (a INTEGER, b TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, "x" * 200) for i in range(100)])
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    reader = sqlite_pages.PageReader(path)
    first_leaf = int(reader.leaf_pages(root)[0])
    reader.close()
    data = bytearray(path.read_bytes())
    page = (first_leaf - 1) * page_size
    cell = page + int.from_bytes(data[page + 8: page + 10], "big")  # the first cell: at the end
    assert data[cell] & 0x80 and not data[cell + 1] & 0x80  # a two-byte payload size (~205)
    data[cell: cell + 2] = bytes([0x9F, 0x00])  # 3,968 bytes: stored locally, past the page
    path.write_bytes(bytes(data))
    reader = sqlite_pages.PageReader(path)
    with pytest.raises(sqlite_pages.PageFormatError, match="a record runs past its page"):
        list(reader.columns(root, [0, 1], text_columns=(1,)))
    reader.close()


def test_nvtx_ranges_alone_are_the_structure(tmp_path: Path) -> None:
    """A capture with NVTX ranges only (no CUDA, no range named ``step N``): the range that
    repeats (its counters masked) is the step, over its own extent, and the ranges inside it
    are its phases, named with their time per step in a note."""
    ms = 10**6
    ranges = []
    for i in range(5):
        base = i * 100 * ms
        ranges += [(base, base + 80 * ms, f"epoch 0 batch {i}"),
                   (base + 5 * ms, base + 40 * ms, "forward"),
                   (base + 40 * ms, base + 70 * ms, "backward"),
                   (base + 70 * ms, base + 78 * ms, "optimizer")]
    profile = nsys.parse(write_nsys_export(tmp_path / "nvtx.sqlite", [], ranges))
    steps = profile.table("steps")
    assert steps[["number", "start", "end"]].values.tolist() == [
        [i + 1, i * 100 * ms, i * 100 * ms + 80 * ms] for i in range(5)]
    assert set(steps["origin"]) == {"nvtx"} and profile.meta.step_span == "epoch # batch #"
    assert profile.meta.empty is None
    assert profile.meta.notes == [
        "no NVTX range is named as a step: the 5 steps are the repeated range 'epoch # batch #'"]
    assert phases_text(profile) == (
        "; inside each: forward 35.0 ms, backward 30.0 ms, optimizer 8.0 ms per step")


def test_ranges_inside_step_ranges_are_their_phases(tmp_path: Path) -> None:
    """A CPU capture (no CUDA) whose ``step N`` ranges each hold a 2 ms ``load`` range, a
    ``compute 0``/``compute 1`` pair and an ``optimizer`` range: the steps are the ``step N``
    ranges and the ranges inside them their phases, named with their time per step in a note
    (the capture said nothing of them: its steps read as unattributed). A range outside the
    steps is no phase."""
    ms = 10**6
    ranges = [(0, 3 * ms, "setup")]
    for i in range(4):
        base = 10 * ms + i * 20 * ms
        ranges += [(base, base + 15 * ms, f"step {i}"),
                   (base + 1 * ms, base + 3 * ms, "load"),
                   (base + 3 * ms, base + 6 * ms, "compute 0"),
                   (base + 6 * ms, base + 10 * ms, "compute 1"),
                   (base + 10 * ms, base + 11 * ms, "optimizer")]
    profile = nsys.parse(write_nsys_export(tmp_path / "cpu.sqlite", [], ranges))
    assert profile.table("steps")[["number", "start", "end"]].values.tolist() == [
        [i, 10 * ms + i * 20 * ms, 25 * ms + i * 20 * ms] for i in range(4)]
    assert profile.meta.step_span is None
    assert profile.meta.notes == ["the 4 steps are NVTX ranges named as steps"]
    assert phases_text(profile) == (
        "; inside each: compute # 7.0 ms, load 2.0 ms, optimizer 1.0 ms per step")


@pytest.mark.parametrize("native", [True, False])
def test_nvtx_event_types_are_read_from_the_exports_enum(tmp_path: Path, native: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The eventType codes of NVTX ranges are those the export's ENUM_NSYS_EVENT_TYPE names, not
    2022.4's numbers: in an export that numbers push/pop ranges 159 and names no start/end
    range, its ranges of 159 are the steps, and events of 59 and 60 (other types there) are not
    ranges (page reader and SQL alike)."""
    monkeypatch.setattr(nsys, "NATIVE_READER", native)
    ms = 10**6
    path = write_nsys_export(tmp_path / "renumbered.sqlite", [],
                             [(i * 10 * ms, i * 10 * ms + 8 * ms, f"step {i}") for i in range(4)])
    renumbered = {"NvtxPushPopRange": 159, "NvtxtPushPopRange": 170, "NvtxtStartEndRange": 171,
                  "NvtxMark": 134, "NvtxDomainCreate": 175, "OtherEvent": 59,
                  "AnotherEvent": 60}
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?)",
                         [(code, name) for name, code in renumbered.items()])
        conn.execute("UPDATE NVTX_EVENTS SET eventType = 159")
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (0, 50000000, ?, 16777217, 0, "
                         "'not a range', NULL)", [(59,), (60,)])
    profile = nsys.parse(path)
    assert profile.table("ranges")["name"].tolist() == [f"step {i}" for i in range(4)]
    assert profile.table("steps")[["start", "end"]].values.tolist() == [
        [i * 10 * ms, i * 10 * ms + 8 * ms] for i in range(4)]


def test_steps_nested_in_epoch_ranges_are_found(tmp_path: Path) -> None:
    """A training loop annotated as most are: two ``epoch`` ranges, each around 10 ``step``
    ranges of 19 ms holding ``forward`` and ``backward``. The outermost range repeats only
    twice, so the steps are the ranges of the first level that repeats, over their own extent
    (the capture had no steps: 'unknown (no step markers ...)')."""
    ms = 10**6
    ranges, at = [], 0
    for _epoch in range(2):
        first = at
        for _step in range(10):
            ranges += [(at + 1 * ms, at + 11 * ms, "forward"),
                       (at + 11 * ms, at + 18 * ms, "backward"), (at, at + 19 * ms, "step")]
            at += 20 * ms
        ranges.append((first, at, "epoch"))
    profile = nsys.parse(write_nsys_export(tmp_path / "nvtx.sqlite", [], ranges))
    steps = profile.table("steps")
    assert len(steps) == 20 and profile.meta.step_span == "step"
    assert ((steps["end"] - steps["start"]) == 19 * ms).all()
    assert profile.meta.notes == [
        "no NVTX range is named as a step: the 20 steps are the repeated range 'step'"]
    assert phases_text(profile) == "; inside each: forward 10.0 ms, backward 7.0 ms per step"


def test_the_range_that_counts_the_passes_is_the_step(tmp_path: Path) -> None:
    """A loop annotates its batch loading (``load batch``, 40 ms, no counter) and each pass
    (``iteration N``, 10 ms): the range whose name carries the loop's counter is the step,
    although the unnumbered one takes more time; the loading falls between the steps."""
    ms = 10**6
    ranges = []
    for i in range(5):
        base = i * 50 * ms
        ranges += [(base, base + 40 * ms, "load batch"),
                   (base + 40 * ms, base + 50 * ms, f"iteration {i}"),
                   (base + 41 * ms, base + 45 * ms, "fwd")]
    profile = nsys.parse(write_nsys_export(tmp_path / "counted.sqlite", [], ranges))
    assert profile.meta.step_span == "iteration #"
    assert profile.table("steps")[["start", "end"]].values.tolist() == [
        [i * 50 * ms + 40 * ms, (i + 1) * 50 * ms] for i in range(5)]


def test_report_written_by_a_newer_nsys_says_what_to_do(tmp_path: Path, fixtures_dir: Path,
                                                        nsys_available: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's version is read from the report itself; an older nsys than that is not
    asked to export it, and the line says which versions and how to get an export."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # only the installed nsys
    original = fixtures_dir / "loader_heavy" / "nsys.nsys-rep"
    assert nsys.writer_version(original) == "2022.4.2.1-df9881f"
    newer = tmp_path / "newer.nsys-rep"
    newer.write_bytes(original.read_bytes().replace(b"2022.4.2.1-df9881f",
                                                     b"2023.4.1.97-0a1b2c"))
    assert nsys.writer_version(newer) == "2023.4.1.97-0a1b2c"
    installed = nsys.nsys_version(nsys_available)
    if nsys.version_key(installed)[:2] >= (2023, 4):
        pytest.skip(f"the installed nsys {installed} can read 2023.4 reports")
    with pytest.raises(UnsupportedFormatError) as caught:
        nsys.parse(newer, cache_dir=tmp_path / "cache")
    release = ".".join(installed.split(".")[:2])
    assert caught.value.one_line() == (
        f"{newer}: written by nsys 2023.4; this nsys is {release}: export it with a newer "
        "nsys, `nsys export --type sqlite`, and pass the .sqlite (or unpack a newer one with "
        "scripts/nsys_newer_export.sh, or name one with --nsys PATH)")
    assert not (tmp_path / "cache").exists()  # nsys was never run on it


def test_nsys_named_on_the_command_line_is_the_one_used(tmp_path: Path, fixtures_dir: Path,
                                                        nsys_available: str) -> None:
    """``--nsys PATH`` exports with that nsys; a path that runs nothing is one line."""
    report = fixtures_dir / "loader_heavy" / "nsys.nsys-rep"
    profile = parse_file(report, ParseOptions(cache_dir=tmp_path, nsys=Path(nsys_available)))
    assert not profile.table("steps").empty
    assert profile.meta.exporter_version == nsys.nsys_version(nsys_available).split("-")[0]
    with pytest.raises(MissingToolError, match="cannot run nsys"):
        parse_file(report, ParseOptions(cache_dir=tmp_path / "other",
                                        nsys=tmp_path / "no-such-nsys"))


def test_qdrep_report_is_exported_and_read(tmp_path: Path, fixtures_dir: Path,
                                           nsys_available: str) -> None:
    """``.qdrep``, the name Nsight Systems gave its reports before 2021.3, is read like a
    ``.nsys-rep``: same content, same tables."""
    original = fixtures_dir / "loader_heavy" / "nsys.nsys-rep"
    old_name = tmp_path / "capture.qdrep"
    old_name.write_bytes(original.read_bytes())
    options = ParseOptions(cache_dir=tmp_path / "cache")
    qdrep, rep = parse_file(old_name, options), parse_file(original, options)
    assert qdrep.kind == "nsys" and len(qdrep.table("steps")) == len(rep.table("steps")) == 6
    pd.testing.assert_frame_equal(qdrep.table("ranges"), rep.table("ranges"))


#: Set to the nsys of a newer Nsight Systems unpacked by scripts/nsys_newer_export.sh.
NEWER_NSYS_ENV = "PROFREPORT_NSYS_NEWER_TOOL"


def test_newest_nsys_found_exports_a_newer_report(tmp_path: Path, fixtures_dir: Path,
                                                  nsys_available: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """With a newer nsys unpacked into the tools folder, profreport picks it over the one on
    PATH, and a report that the installed nsys refuses is exported by it."""
    newer_tool = os.environ.get(NEWER_NSYS_ENV)
    if not newer_tool:
        pytest.skip(f"{NEWER_NSYS_ENV} is not set (scripts/nsys_newer_export.sh prints it)")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    place = nsys.default_tools_dir() / "newer" / "target-linux-x64"
    place.parent.mkdir(parents=True)
    place.symlink_to(Path(newer_tool).parent)
    newer_version = nsys.nsys_version(newer_tool)
    assert nsys.version_key(newer_version) > nsys.version_key(nsys.nsys_version(nsys_available))
    report = tmp_path / "written-by-newer.nsys-rep"
    original = fixtures_dir / "loader_heavy" / "nsys.nsys-rep"
    report.write_bytes(original.read_bytes().replace(b"2022.4.2.1-df9881f",
                                                     newer_version[:18].encode()))
    assert nsys.exporting_nsys(report) == str(place / "nsys")
    assert nsys.exporting_nsys(original) == shutil.which("nsys")  # the installed one suffices
    profile = nsys.parse(report, cache_dir=tmp_path / "cache")
    assert str(profile.meta.exporter_version).startswith(newer_version.split("-")[0][:6])
    assert not profile.table("steps").empty


# --- two processes in one capture: CUPTI numbers correlation ids per process ---


def _two_process_copy(exports: dict[str, Path], tmp_path: Path) -> Path:
    """The 1-GPU export with a second process beside the first: every activity row and NVTX
    event copied with the next pid (globalPid, globalTid) and, for GPU work, the next device;
    the copies keep their correlation ids and times, as two ranks traced together do."""
    copy = Path(shutil.copy2(exports["sc22_1gpu_baseline"], tmp_path / "two_processes.sqlite"))
    moved = {"globalPid": "globalPid + 16777216", "globalTid": "globalTid + 16777216",
             "deviceId": "deviceId + 1"}
    with sqlite3.connect(copy) as conn:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
                      "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
                      "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"):
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            select = ", ".join(moved.get(column, column) for column in columns)
            conn.execute(f"INSERT INTO {table} ({', '.join(columns)}) "
                         f"SELECT {select} FROM {table}")
    return copy


def test_two_processes_keep_their_own_launches(exports: dict[str, Path],
                                               profiles: dict[str, Profile], tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Both processes use correlation ids 1, 2, 3...: each kernel is joined to the launch of its
    own process, so no process seems to drive both GPUs (which would read as nn.DataParallel)."""
    from profreport.reports.analysis.gpu import max_devices_per_process

    path = _two_process_copy(exports, tmp_path)
    profile = nsys.parse(path)
    kernels, runtime = profile.table("kernels"), profile.table("runtime")
    assert sorted(kernels["device"].unique()) == [0, 1]
    assert runtime["pid"].nunique() == 2
    assert len(kernels) == 2 * 28674
    launched = kernels[["correlation", "device"]].merge(runtime[["correlation", "pid"]])
    assert len(launched) == len(kernels)  # one launch per kernel, not two
    assert launched.groupby("device")["pid"].nunique().tolist() == [1, 1]
    assert launched.groupby("pid")["device"].nunique().tolist() == [1, 1]
    assert max_devices_per_process(profile) == (1, None)
    # Each process's kernels are the 1-GPU export's, joined to the same calls as there.
    single = profiles["sc22_1gpu_baseline"]
    assert single.table("kernels")["correlation"].max() < 2**32  # one process: ids as recorded
    first = kernels[kernels["device"] == 0].reset_index(drop=True)
    assert np.array_equal(first["start"], single.table("kernels")["start"])
    assert np.array_equal(first["correlation"] % 2**32, single.table("kernels")["correlation"])
    # SQL qualifies the ids as the page reader does, a kernel without its process included.
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = NULL WHERE rowid = 1")
    profile = nsys.parse(path)
    monkeypatch.setattr(nsys, "NATIVE_READER", False)
    through_sql = nsys.parse(path)
    for name in ("kernels", "runtime", "memcpy", "memset", "sync"):
        pd.testing.assert_frame_equal(profile.table(name), through_sql.table(name))


def test_a_call_of_unknown_process_is_no_second_process(exports: dict[str, Path],
                                                         tmp_path: Path) -> None:
    """One process, one of its runtime calls without a thread (NULL globalTid, pid -1): the
    ids stay as CUPTI recorded them, not qualified as if a second process had launched."""
    copy = Path(shutil.copy2(exports["sc22_1gpu_baseline"], tmp_path / "one_unknown.sqlite"))
    with sqlite3.connect(copy) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET globalTid = NULL WHERE rowid = 1")
    profile = nsys.parse(copy)
    assert (profile.table("runtime")["pid"] == -1).sum() == 1
    assert profile.table("kernels")["correlation"].max() < 2**32


def test_id_columns_take_the_narrowest_dtype_that_holds_them() -> None:
    """conform narrows device, stream, correlation, pid and tid to the least signed width
    that holds their values, -1 (unknown) included, and keeps the values; times stay int64;
    a missing id is refused, not cast to some integer."""
    from profreport.model import conform

    frame = pd.DataFrame({"start": [0, 5], "end": [1, 2**40], "device": [-1, 7],
                          "stream": [-1, 300], "correlation": [-1, 2**31],
                          "name": ["a", "b"], "short_name": ["a", "b"], "is_comm": [False] * 2})
    kernels = conform("kernels", frame)
    assert dict(kernels.dtypes.astype(str)) == {
        "start": "int64", "end": "int64", "device": "int8", "stream": "int16",
        "correlation": "int64", "name": "object", "short_name": "object", "is_comm": "bool"}
    assert kernels["correlation"].tolist() == [-1, 2**31]
    assert conform("kernels", frame.iloc[:0])["device"].dtype == "int64"  # nothing to narrow
    ops = pd.DataFrame({"start": [0, 1], "end": [1, 2], "pid": [1.0, np.nan], "tid": [3, 4],
                        "name": ["a", "b"]})
    with pytest.raises(ValueError, match="pid: cannot convert non-finite"):
        conform("cpu_ops", ops)


def test_exported_ids_take_the_narrowest_dtype(profiles: dict[str, Profile]) -> None:
    """The sc22 export's correlation ids and thread ids fit 32 bits, and are held so; the
    runtime calls' pid and tid as categoricals of those ids, a one-byte code a row (its
    39,309 calls come from 5 threads of one process)."""
    read = profiles["sc22_4gpu_baseline"]
    assert str(read.table("kernels")["correlation"].dtype) == "int32"
    runtime = read.table("runtime")
    for column in ("pid", "tid"):
        assert str(runtime[column].to_numpy().dtype) == "int32"
        assert runtime[column].array.codes.dtype == np.int8
    assert len(runtime) == 39309
    assert distinct_ids(runtime["tid"]).tolist() == [79184, 79416, 79417, 79418, 79542]
    assert distinct_ids(runtime["pid"]).tolist() == [79184]


def test_two_processes_in_one_capture_keep_their_own_dataloader_wait(tmp_path: Path) -> None:
    """torchrun under nsys: both ranks write 'step N' and 'dataloader' ranges into one capture.
    The steps are process 1's (its thread first on a tie), so only its DataLoader ranges count
    (10 ms between its steps); process 2's 50 ms waits inside process 1's steps are not in
    them; read as processes (process_profiles), each has its own."""
    ms = 10**6
    ranges = []
    for i in range(5):
        base = i * 100 * ms
        ranges += [(base, base + 90 * ms, f"step {i}"),
                   (base + 90 * ms, base + 100 * ms, "dataloader")]
    path = write_nsys_export(tmp_path / "two_ranks.sqlite", [], ranges)
    second = (2 << 24) | 2  # pid 2, tid 2
    with sqlite3.connect(path) as conn:
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, 0, ?, NULL)",
                         [row for i in range(5) for row in (
                             (i * 100 * ms, i * 100 * ms + 90 * ms, second, f"step {i}"),
                             (i * 100 * ms + 10 * ms, i * 100 * ms + 60 * ms, second,
                              "dataloader"))])
    profile = nsys.parse(path)
    assert set(profile.table("steps")["pid"]) == {1}
    loader = profile.table("dataloader")
    assert set(loader["pid"]) == {1} and len(loader) == 5
    # Read as two ranks, each process keeps its own DataLoader ranges.
    parts = nsys.process_profiles(profile)
    assert [len(part.table("dataloader")) for part in parts] == [5, 5]
    assert [set(part.table("dataloader")["pid"]) for part in parts] == [{1}, {2}]


def test_steps_come_from_profiler_steps_alone_beside_a_users_step_ranges(
        tmp_path: Path) -> None:
    """torch.profiler's ProfilerStep#3-#5 recorded as NVTX ranges (emit_nvtx) around a loop's
    own 'step 0'-'step 2' ranges: the steps are the 3 ProfilerStep ranges alone (one marker,
    see concepts.step_marks), not 6 overlapping steps numbered 0-5."""
    ms = 10**6
    ranges = [row for i in range(3) for row in (
        (i * 10 * ms, (i + 1) * 10 * ms, f"ProfilerStep#{i + 3}"),
        (i * 10 * ms + 2 * ms, (i + 1) * 10 * ms, f"step {i}"))]
    steps = nsys.parse(write_nsys_export(tmp_path / "both.sqlite", [], ranges)).table("steps")
    assert steps["number"].tolist() == [3, 4, 5]
    assert steps["start"].tolist() == [0, 10 * ms, 20 * ms]


def test_an_export_of_kernels_without_runtime_calls_is_analysed(tmp_path: Path) -> None:
    """An export recording 4 kernels of 5 ms (2-7 ms into each 10 ms step, the steps 9 ms NVTX
    ranges) and no CUDA runtime call: each kernel counts from its own start, as a kernel whose
    call was not recorded does; the GPU is busy 4 x 5 = 20 ms of the windows' 0-39 ms, and
    each step launches one kernel. It had failed whole: 'cannot read (IndexError: index -1 is
    out of bounds for axis 0 with size 0)', the missing calls' -1 used as an index."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    ms = 1_000_000
    kernels = [(i * 10 * ms + 2 * ms, i * 10 * ms + 7 * ms, i, "gemm_kernel") for i in range(4)]
    steps = [(i * 10 * ms, i * 10 * ms + 9 * ms, f"step {i}") for i in range(4)]
    report = analyze_paths([write_nsys_export(tmp_path / "no_calls.sqlite", kernels, steps)],
                           AnalyzeOptions())
    assert report.failures == []
    metrics = report.runs[0].metrics
    assert (metrics.gpu.busy_ns, metrics.gpu.window_ns) == (20 * ms, 39 * ms)
    assert metrics.launch.kernels_per_step == 1


def test_phases_are_timed_over_the_steps_the_step_figures_count(tmp_path: Path) -> None:
    """6 ``step N`` ranges: step 0 is start-up (9 ms, cudaMalloc and cudnnFind in it, a 6 ms
    forward), the others 1.5 ms of forward 0.5, backward 0.7 and optimizer 0.2 ms. The mean
    step leaves step 0 out (1.5 ms over 5 steps), but the phases were averaged over all 6
    steps: 'forward 1.4 ms, backward 0.7 ms, optimizer 0.2 ms per step', 2.3 ms of phases in a
    1.5 ms step. They are now timed over the same 5 steps, step 0 named as left out."""
    us = 1000
    ranges, runtime = [], [(100 * us, 300 * us, 1, "cudaMalloc"),
                           (400 * us, 2000 * us, 2, "cudnnFindConvolutionForwardAlgorithm")]
    starts = [0] + [10_000 * us + i * 2000 * us for i in range(5)]
    for i, base in enumerate(starts):
        forward = 6000 * us if i == 0 else 500 * us
        ranges += [(base, base + forward + 1000 * us if i == 0 else base + 1500 * us, f"step {i}"),
                   (base + 50 * us, base + 50 * us + forward, "forward"),
                   (base + 50 * us + forward, base + 750 * us + forward, "backward"),
                   (base + 750 * us + forward, base + 950 * us + forward, "optimizer")]
    path = write_nsys_export(tmp_path / "startup.sqlite", [], ranges, runtime)
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert (run.metrics.steps.count, run.metrics.steps.mean_ns) == (5, 1500 * us)
    assert ("startup.sqlite: the 6 steps are NVTX ranges named as steps; inside each of the 5 "
            "steps the per-step figures count (step 0, start-up, left out): backward 0.7 ms, "
            "forward 0.5 ms, optimizer 0.2 ms per step") in run.notes


def test_an_export_without_nvtx_domains_reads_its_ranges(tmp_path: Path) -> None:
    """NVTX_EVENTS without domainId (another nsys version's schema): the ranges and the steps
    they name are read, each range's domain unknown (empty), and a note says so; the export
    is not refused."""
    ms = 10**6
    path = write_nsys_export(tmp_path / "nodomain.sqlite", [],
                             [(i * 100 * ms, i * 100 * ms + 80 * ms, f"step {i}")
                              for i in range(3)])
    with sqlite3.connect(path) as conn:
        conn.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN domainId")
    profile = nsys.parse(path)
    assert profile.table("steps")[["number", "start", "end"]].values.tolist() == [
        [i, i * 100 * ms, i * 100 * ms + 80 * ms] for i in range(3)]
    assert set(profile.table("ranges")["domain"]) == {""}
    assert ("nsys export schema 2.7.1: table NVTX_EVENTS lacks ['domainId']: the NVTX domain of "
            "each range (and the rank marks of domain profreport) is unknown"
            in profile.meta.notes)


def test_copies_of_unrecorded_memory_keep_the_blocking_calls(tmp_path: Path) -> None:
    """CUPTI_ACTIVITY_KIND_MEMCPY without srcKind/dstKind (another nsys version's schema), 4
    steps of 100 ms: each copies 1 MiB host-to-device, runs a 55 ms kernel, reads 4 bytes back
    with a cudaMemcpyAsync that returns at 61 ms, after its copy ended at 60.5 ms (it waited
    for the GPU 55 ms), syncs for 1 ms, and makes a second DtoH cudaMemcpyAsync that returns
    before its copy starts (it did not wait). Without the memory kinds the waiting copy was no
    blocking call: 1% of the step blocked, no SYNC_STALL. Now that copy counts (56% blocked),
    the other does not, and whether host memory was pageable is unknown, with the reason."""
    ms, us = 1_000_000, 1000
    kernels, runtime, copies = [], [], []
    for i in range(4):
        t, c = i * 100 * ms, i * 10
        runtime += [(t + 1 * ms, t + 1 * ms + 20 * us, c + 1, "cudaMemcpyAsync_v3020"),
                    (t + 4 * ms, t + 4 * ms + 10 * us, c + 2, "cudaLaunchKernel_v7000"),
                    (t + 6 * ms, t + 61 * ms, c + 3, "cudaMemcpyAsync_v3020"),
                    (t + 62 * ms, t + 63 * ms, c + 4, "cudaStreamSynchronize_v3020"),
                    (t + 70 * ms, t + 70 * ms + 10 * us, c + 5, "cudaMemcpyAsync_v3020")]
        kernels.append((t + 5 * ms, t + 60 * ms, c + 2, "conv_kernel"))
        copies += [(t + 1 * ms, t + 3 * ms, c + 1, 2**20, 1),
                   (t + 60 * ms, t + 60 * ms + 500 * us, c + 3, 4, 2),
                   (t + 70 * ms + 20 * us, t + 70 * ms + 30 * us, c + 5, 4, 2)]
    steps = [(i * 100 * ms, i * 100 * ms + 90 * ms, f"step {i}") for i in range(4)]
    path = write_nsys_export(tmp_path / "nokinds.sqlite", kernels, steps, runtime)
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, "
                     "streamId INT, correlationId INT, bytes INT, copyKind INT)")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, 0, 7, ?, ?, ?)",
                         copies)
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    syncs = run.metrics.syncs
    assert [(call.name, call.calls_per_step, call.ns_per_step) for call in syncs.calls] == [
        ("cudaMemcpyAsync DtoH (returned after its copy ended; host memory kind unrecorded)",
         1, 55 * ms), ("cudaStreamSynchronize", 1, 1 * ms)]
    assert [f.id for f in run.findings if f.id == "SYNC_STALL"] == ["SYNC_STALL"]
    copied = run.metrics.copies
    assert (copied.h2d_bytes, copied.h2d_pageable_bytes, copied.h2d_kinds_unknown) == (
        4 * 2**20, None, "the profile records no source memory kind for 4 of its 4 "
                         "host-to-device copies")
    assert ("nokinds.sqlite: nsys export schema 2.7.1: table CUPTI_ACTIVITY_KIND_MEMCPY lacks "
            "['dstKind', 'srcKind']: whether host memory was pageable or pinned is unknown"
            in run.notes)


@pytest.mark.parametrize(("table", "column", "unknown"), [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId", "which runtime call launched each kernel"),
    ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId",
     "which GPU work each runtime call launched"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "correlationId", "which runtime call launched each copy"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "bytes", "the bytes of each copy are"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "copyKind", "the direction of each copy is"),
    ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "syncType", "what each sync waited for is")])
def test_a_column_only_some_figures_need_is_not_required(tmp_path: Path, table: str,
                                                         column: str, unknown: str) -> None:
    """An export whose table lacks a column only some figures need (other nsys versions export
    other columns) was refused whole ('table ... lacks [...]'). It is read: the column's
    figures unknown (NULL: -1 or 'unknown'), a note saying which and why, the other tables
    and the rest of that table as before (2 steps, 2 kernels, 1 copy of 4 bytes, 1 sync)."""
    ms = 1_000_000
    path = write_nsys_export(
        tmp_path / "lacking.sqlite",
        [(k * 10 * ms + 1 * ms, k * 10 * ms + 5 * ms, 2 * k + 1, "gemm") for k in range(2)],
        [(k * 10 * ms, k * 10 * ms + 9 * ms, f"step {k}") for k in range(2)],
        [(k * 10 * ms, k * 10 * ms + 10_000, 2 * k + 1, "cudaLaunchKernel_v7000")
         for k in range(2)] + [(6 * ms, 7 * ms, 2, "cudaMemcpyAsync_v3020")])
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, "
            "streamId INT, correlationId INT, bytes INT, copyKind INT, srcKind INT, "
            "dstKind INT);"
            "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (6500000, 6600000, 0, 7, 2, 4, 2, 2, "
            "0);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INT, end INT, deviceId INT, "
            "streamId INT, correlationId INT, syncType INT);"
            "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES (7000000, 8000000, 0, 7, 3, "
            "3);"
            f"ALTER TABLE {table} DROP COLUMN {column};")
    profile = nsys.parse(path)
    assert [len(profile.table(name)) for name in ("steps", "kernels", "memcpy", "sync")] == [
        2, 2, 1, 1]
    assert (f"nsys export schema 2.7.1: table {table} lacks ['{column}']: {unknown}"
            in " ".join(profile.meta.notes))
    copy = profile.table("memcpy").iloc[0]
    assert (copy["bytes"], copy["kind"]) == ({"bytes": -1}.get(column, 4),
                                             {"copyKind": "unknown"}.get(column, "DtoH"))


def test_a_launch_wait_without_cpu_operators_is_not_said_to_be_python(tmp_path: Path) -> None:
    """4 back-to-back 10 ms ``step N`` ranges, each launching a 2 ms kernel 1 ms in that starts
    1 ms later: the GPU waits for those launches 2 + 3 x 8 = 26 ms (6.5 ms per step, 65%). An
    nsys export records no CPU operators, so what the CPU ran meanwhile is unknown; the finding
    said '6.5 ms per step (100% of the wait) lies outside every recorded CPU operator: Python
    code between operators' and advised cutting that Python."""
    ms = 10**6
    path = write_nsys_export(
        tmp_path / "launch_wait.sqlite",
        [(i * 10 * ms + 2 * ms, i * 10 * ms + 4 * ms, i + 1, "gemm_kernel") for i in range(4)],
        [(i * 10 * ms, (i + 1) * 10 * ms, f"step {i}") for i in range(4)],
        [(i * 10 * ms + 1 * ms, i * 10 * ms + 1 * ms + 10_000, i + 1, "cudaLaunchKernel_v7000")
         for i in range(4)])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    idle = run.metrics.gpu_idle
    assert (idle.launch_wait_ns, idle.launch_wait_outside_ops_ns) == (6_500_000, None)
    (bound,) = [f for f in run.findings if f.id == "HOST_LAUNCH_BOUND"]
    texts = [e.text for e in bound.evidence]
    assert ("what the CPU ran while the GPU waited is unknown: the profile records no CPU "
            "operators") in texts
    assert not any("Python code between operators" in text for text in texts)
    assert "Python between operators" not in bound.recommendation


def test_copies_of_unrecorded_direction_leave_the_host_to_device_bytes_unknown(
        tmp_path: Path) -> None:
    """4 steps each copying 1 MiB in a row whose copyKind, srcKind and dstKind are NULL (CUPTI's
    UNKNOWN): any of them may be a host-to-device copy from pageable memory. The report said
    'Host-to-device copies: none recorded' and 0 pageable bytes, as if none had been made; the
    pageable and pinned bytes are now unknown, and the reason counts the copies and bytes."""
    ms = 10**6
    path = write_nsys_export(
        tmp_path / "undirected.sqlite",
        [(i * 10 * ms + 2 * ms, i * 10 * ms + 7 * ms, i + 1, "gemm_kernel") for i in range(4)],
        [(i * 10 * ms, i * 10 * ms + 9 * ms, f"step {i}") for i in range(4)],
        [(i * 10 * ms + 1 * ms, i * 10 * ms + 1 * ms + 10_000, i + 1, "cudaLaunchKernel_v7000")
         for i in range(4)] + [(i * 10 * ms + 8 * ms, i * 10 * ms + 8 * ms + 5000, 100 + i,
                                "cudaMemcpyAsync_v3020") for i in range(4)])
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, "
                     "streamId INT, correlationId INT, bytes INT, copyKind INT, srcKind INT, "
                     "dstKind INT)")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES "
                         "(?, ?, 0, 7, ?, 1048576, NULL, NULL, NULL)",
                         [(i * 10 * ms + 8 * ms + 100, i * 10 * ms + 8 * ms + 200_000, 100 + i)
                          for i in range(4)])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    copies = run.metrics.copies
    assert (copies.h2d_bytes, copies.h2d_pageable_bytes, copies.h2d_pinned_bytes) == (0, None,
                                                                                      None)
    assert copies.h2d_kinds_unknown == ("the profile records no direction for 4 of its 4 copies "
                                        "(4.0 MiB), which may be host-to-device")
    rows = {row.label: row.value for row in metric_rows(run.metrics)}
    assert rows["Host-to-device copies"] == (
        "0 B in 0 ms (from pageable or pinned memory: unknown, the profile records no direction "
        "for 4 of its 4 copies (4.0 MiB), which may be host-to-device)")


def test_a_capture_without_fetch_or_step_ranges_leaves_the_dataloader_part_unmeasured(
        tmp_path: Path) -> None:
    """A GPU capture whose NVTX ranges are 3 'load' ranges 10 ms apart (the repeated range, so
    the steps) and an 'eval' range: nothing records when the loop fetched, so the DataLoader
    share is unknown (null); the breakdown gave the DataLoader wait as a measured 0 ms beside
    it. It is now unmeasured, the steps' 3.7 ms of compute and 4.0 ms of rest as before."""
    ms = 10**6
    path = write_nsys_export(
        tmp_path / "no_fetches.sqlite",
        [(i * 10 * ms + 2 * ms, i * 10 * ms + 7 * ms, i + 1, "gemm_kernel") for i in range(6)],
        [(i * 10 * ms, i * 10 * ms + 3 * ms, "load") for i in range(3)] + [(40 * ms, 45 * ms,
                                                                           "eval")],
        [(i * 10 * ms + 1 * ms, i * 10 * ms + 1 * ms + 10_000, i + 1, "cudaLaunchKernel_v7000")
         for i in range(6)])
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.dataloader_fraction is None
    breakdown = run.metrics.breakdown
    assert "dataloader" not in breakdown.measured
    assert (breakdown.parts_ns["compute"], breakdown.parts_ns["other"]) == (11 * ms // 3,
                                                                            3_990_000)


def test_ranges_still_open_when_the_capture_stopped_are_left_out(tmp_path: Path) -> None:
    """nsys ends a range still open when the capture stops at the capture's end (2022.4, seen
    on a real capture whose last range was never popped: its end is ANALYSIS_DETAILS.duration).
    4 steps of 9 ms, 10 ms apart, then 'step 4' and a 'forward' inside it cut by the capture's
    end at 100 ms: step 4 read as a 60 ms step (mean 19.2 ms, 5 steps, a 60 ms 'forward'). Both
    are left out and named in a note; the 4 steps keep their 9 ms."""
    ms = 10**6
    ranges = [(i * 10 * ms, i * 10 * ms + 9 * ms, f"step {i}") for i in range(4)] + [
        (40 * ms, 100 * ms, "step 4"), (41 * ms, 100 * ms, "forward")]
    path = write_nsys_export(tmp_path / "cut.sqlite", [], ranges)
    with sqlite3.connect(path) as conn:
        conn.executescript("CREATE TABLE ANALYSIS_DETAILS (globalVid INT, duration INT, "
                           "startTime INT, stopTime INT);"
                           f"INSERT INTO ANALYSIS_DETAILS VALUES (0, {100 * ms}, 0, {100 * ms});")
    profile = nsys.parse(path)
    steps = profile.table("steps")
    assert steps["number"].tolist() == [0, 1, 2, 3]
    assert (steps["end"] - steps["start"]).tolist() == [9 * ms] * 4
    assert "forward" not in set(profile.table("ranges")["name"])
    assert ("nsys: 2 NVTX ranges still open when the capture stopped ('step 4', 'forward'), "
            "which nsys ends at the capture's end: their end is unknown, so they are left out"
            in profile.meta.notes)


def test_a_librarys_ranges_are_no_steps(tmp_path: Path) -> None:
    """A DDP capture with no range of its own, only NCCL's: 6 iterations 20 ms apart, each 3
    gradient buckets of a GEMM then an ``ncclAllReduce`` (50 µs, NCCL's domain, its name by
    textId as nsys records it) launching the all-reduce kernel. The range that repeats was read
    as the step: 18 steps of 50 µs. A range in a library's domain is one call of it, no pass of
    the loop: the steps are unknown, and a note says why."""
    ms, us = 10**6, 1000
    kernels, runtime, calls = [], [], []
    for step in range(6):
        for bucket in range(3):
            at, gemm = step * 20 * ms + bucket * 5 * ms, 2 * (step * 3 + bucket) + 1
            runtime += [(at, at + 10 * us, gemm, "cudaLaunchKernel_v7000"),
                        (at + 110 * us, at + 120 * us, gemm + 1, "cudaLaunchKernel_v7000")]
            kernels += [(at + 50 * us, at + 3 * ms, gemm, "gemm_kernel"),
                        (at + 3 * ms, at + 4 * ms, gemm + 1, NCCL_KERNEL)]
            calls.append((at + 100 * us, at + 150 * us))
    path = write_nsys_export(tmp_path / "nccl.sqlite", kernels, [], runtime)
    global_tid = (1 << 24) | 1
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO StringIds VALUES (1000, 'ncclAllReduce')")
        conn.execute("INSERT INTO NVTX_EVENTS VALUES (0, NULL, 75, ?, 1, 'NCCL', NULL)",
                     (global_tid,))
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, 1, NULL, 1000)",
                         [(start, end, global_tid) for start, end in calls])
    profile = nsys.parse(path)
    ranges = profile.table("ranges")
    assert len(ranges) == 18 and set(ranges["name"]) == {"ncclAllReduce"}
    assert set(ranges["domain"]) == {"NCCL"}
    assert profile.table("steps").empty and profile.meta.step_span is None
    assert profile.meta.notes == [
        "no NVTX range is named as a step and none of the program's own repeats as one: the 18 "
        "ranges in the NVTX domain of a library (NCCL) are each one call of it, not a pass of "
        "the training loop, so the steps are unknown"]


@pytest.mark.parametrize("native", [True, False])
def test_a_range_of_unrecorded_name_is_no_step(tmp_path: Path, native: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """No range named as a step: 10 ``train_step`` ranges 1 ms apart and, after each, 3 of
    NULL text (named '(name unrecorded)', as nsys records nothing for them) taking more time
    (4.2 ms against 4 ms). A range whose name the capture did not record is no evidence of a
    pass of the loop: the steps are the ``train_step`` ranges; with the unnamed ranges alone
    the steps are unknown, a note saying why; the page reader and SQL alike. The 30 unnamed
    ranges were the steps (the repeated range '', as the reader named them then)."""
    monkeypatch.setattr(nsys, "NATIVE_READER", native)
    us = 1000
    named = [(step * 1000 * us, (step * 1000 + 400) * us, "train_step") for step in range(10)]
    unnamed = [((step * 1000 + 450 + 150 * index) * us, (step * 1000 + 590 + 150 * index) * us,
                None) for step in range(10) for index in range(3)]
    profile = nsys.parse(write_nsys_export(tmp_path / "named.sqlite", [],
                                           sorted(named + unnamed, key=lambda row: row[0])))
    steps = profile.table("steps")
    assert profile.meta.step_span == "train_step"
    assert steps["start"].tolist() == [start for start, _, _ in named]
    assert profile.meta.notes == [
        "no NVTX range is named as a step: the 10 steps are the repeated range 'train_step'"]
    alone = nsys.parse(write_nsys_export(tmp_path / "unnamed.sqlite", [], unnamed))
    assert alone.table("steps").empty and alone.meta.step_span is None
    assert alone.meta.notes == [
        "no NVTX range is named as a step and none of the program's own repeats as one: the 30 "
        "ranges whose name the profiler did not record are no evidence of a pass of the "
        "training loop, so the steps are unknown"]


@pytest.mark.parametrize("reader", ["native", "sql", "domainless"])
def test_a_range_of_no_text_is_named_unrecorded(tmp_path: Path, reader: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside each of 4 ``step N`` ranges: a range of NULL text and NULL textId (3 ms), one of
    NULL text whose textId StringIds lacks (2 ms) and a ``forward`` range (1 ms). The two of
    no name are named '(name unrecorded)' (concepts.UNRECORDED_NAME, as a Kineto event without
    a name and an nsys kernel without one are), in the ranges table and the phases note; the
    page reader, SQL and SQL without domainId alike. They were named '' (a phase ' 5.0 ms')."""
    from profreport.concepts import UNRECORDED_NAME

    monkeypatch.setattr(nsys, "NATIVE_READER", reader == "native")
    ms = 10**6
    ranges = []
    for i in range(4):
        base = i * 10 * ms
        ranges += [(base, base + 8 * ms, f"step {i}"), (base + 1 * ms, base + 4 * ms, None),
                   (base + 4 * ms, base + 6 * ms, "missing id"),
                   (base + 6 * ms, base + 7 * ms, "forward")]
    path = write_nsys_export(tmp_path / "untexted.sqlite", [], ranges)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE NVTX_EVENTS SET text = NULL, textId = 999 WHERE text = 'missing id'")
        if reader == "domainless":
            conn.execute("ALTER TABLE NVTX_EVENTS DROP COLUMN domainId")
    profile = nsys.parse(path)
    assert profile.table("ranges")["name"].astype(str).tolist() == [
        name for i in range(4) for name in (f"step {i}", UNRECORDED_NAME, UNRECORDED_NAME,
                                            "forward")]
    assert phases_text(profile) == (
        f"; inside each: {UNRECORDED_NAME} 5.0 ms, forward 1.0 ms per step")


@pytest.mark.parametrize("native", [True, False])
def test_a_kernel_of_unrecorded_name_says_so(tmp_path: Path, native: bool,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernel rows whose demangledName and shortName are NULL, or ids missing from StringIds,
    are named '(name unrecorded)' (concepts.UNRECORDED_NAME, as a Kineto event without a name
    is), in the kernels table and the top kernels, and are no communication kernel or
    collective by that name; the page reader and SQL alike. They were named '' (an empty row
    in the top-kernels table)."""
    from profreport.concepts import UNRECORDED_NAME, collective_kind

    monkeypatch.setattr(nsys, "NATIVE_READER", native)
    ms = 1_000_000
    names = ["gemm_kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "null", "missing"]
    kernels = [(i * 10 * ms + 2 * ms, i * 10 * ms + 3 * ms + i * ms, i, name)
               for i, name in enumerate(names)]
    steps = [(i * 10 * ms, i * 10 * ms + 9 * ms, f"step {i}") for i in range(4)]
    path = write_nsys_export(tmp_path / "unnamed.sqlite", kernels, steps)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = NULL, "
                     "shortName = NULL WHERE correlationId = 2")
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 999, "
                     "shortName = 998 WHERE correlationId = 3")
    table = nsys.parse(path).table("kernels")
    assert table["name"].astype(str).tolist() == [*names[:2], UNRECORDED_NAME, UNRECORDED_NAME]
    assert table["short_name"].astype(str).tolist()[2:] == [UNRECORDED_NAME] * 2
    assert table["is_comm"].tolist() == [False, True, False, False]
    assert collective_kind(table["name"]).isna().tolist() == [True, False, True, True]
    report = analyze_paths([path], AnalyzeOptions())
    assert [(item.name, item.total_ns) for item in report.runs[0].metrics.top_kernels] == [
        (UNRECORDED_NAME, 7 * ms), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2 * ms),
        ("gemm_kernel", 1 * ms)]


@pytest.mark.parametrize("native", [True, False])
def test_calls_and_threads_of_unrecorded_name_say_so(tmp_path: Path, native: bool,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA runtime calls, OS runtime calls and threads whose nameId is NULL or missing from
    StringIds are named '(name unrecorded)' (concepts.UNRECORDED_NAME), as a range or kernel
    of no name is; one whose name StringIds records as '' keeps '' (a recorded name); the
    page reader and SQL alike (OS runtime calls and threads are read by SQL alone). They were
    named ''."""
    from profreport.concepts import UNRECORDED_NAME

    monkeypatch.setattr(nsys, "NATIVE_READER", native)
    names = ["cudaLaunchKernel_v7000", "", "null", "missing"]
    runtime = [(i * 100, i * 100 + 10, i, name) for i, name in enumerate(names)]
    osrt = [(i * 100 + 20, i * 100 + 30, name) for i, name in enumerate(["poll", *names[1:]])]
    path = write_nsys_export(tmp_path / "unnamed.sqlite", [], [], runtime, osrt)
    tids = [(1 << 24) | tid for tid in range(1, 5)]  # pid 1, tids 1-4 as nsys packs them
    with sqlite3.connect(path) as conn:
        for table in ("CUPTI_ACTIVITY_KIND_RUNTIME", "OSRT_API"):
            conn.execute(f"UPDATE {table} SET nameId = NULL WHERE nameId = "
                         "(SELECT id FROM StringIds WHERE value = 'null')")
            conn.execute(f"UPDATE {table} SET nameId = 999 WHERE nameId = "
                         "(SELECT id FROM StringIds WHERE value = 'missing')")
        conn.execute("CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, "
                     "globalTid INTEGER)")
        conn.executemany("INSERT INTO ThreadNames VALUES ((SELECT id FROM StringIds WHERE "
                         "value = ?), 0, ?)", zip(["poll", "", "null", "missing"], tids,
                                                  strict=True))
        conn.execute("UPDATE ThreadNames SET nameId = NULL WHERE globalTid = ?", (tids[2],))
        conn.execute("UPDATE ThreadNames SET nameId = 999 WHERE globalTid = ?", (tids[3],))
    profile = nsys.parse(path)
    unnamed = ["", UNRECORDED_NAME, UNRECORDED_NAME]
    assert profile.table("runtime")["name"].astype(str).tolist() == ["cudaLaunchKernel",
                                                                     *unnamed]
    assert profile.table("osrt")["name"].tolist() == ["poll", *unnamed]
    threads = profile.table("threads").sort_values("tid")
    assert threads["name"].tolist() == ["poll", *unnamed]


@pytest.mark.parametrize(("named_ms", "said"), [
    (2, "which kernel takes the most time is unknown: kernels whose names the profile does not "
        "record take 75% of kernel time together (the largest named one, gemm_kernel, 25%)"),
    (8, "top kernel gemm_kernel takes 57% of kernel time")])
def test_top_kernel_of_unrecorded_names_is_not_one_kernel(tmp_path: Path, named_ms: int,
                                                          said: str) -> None:
    """Kernels whose name ids StringIds lacks share the name '(name unrecorded)' in the top
    kernels, however many distinct kernels (distinct ids) they are: three 2 ms kernels of three
    missing ids are no one kernel taking 75% of kernel time, so the compute-bound finding says
    the top kernel is unknown, naming the largest named one; a named kernel with more time than
    all of them together is the top kernel. It said 'top kernel (name unrecorded) takes 75%'."""
    ms = 1_000_000
    kernels, steps = [], []
    step_ns = (8 + named_ms) * ms  # 1 ms idle, the three 2 ms kernels, the named one, 1 ms idle
    for step in range(4):
        at = step * step_ns
        steps.append((at, at + step_ns, f"step {step}"))
        kernels += [(at + (1 + 2 * k) * ms, at + (3 + 2 * k) * ms, 10 * step + k, f"k{k}")
                    for k in range(3)]
        kernels.append((at + 7 * ms, at + (7 + named_ms) * ms, 10 * step + 3, "gemm_kernel"))
    path = write_nsys_export(tmp_path / "unnamed.sqlite", kernels, steps)
    with sqlite3.connect(path) as conn:  # k0, k1, k2: ids StringIds lacks, one per kernel
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = 900 + "
                     "correlationId % 10, shortName = NULL WHERE correlationId % 10 < 3")
        conn.execute("DELETE FROM StringIds WHERE value IN ('k0', 'k1', 'k2')")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    finding = next(f for f in run.findings if f.id == "COMPUTE_BOUND")
    assert said in [e.text for e in finding.evidence]


def _half_unnamed_export(path: Path, named: bool,
                         gemm: str = "volta_h884gemm_fp16_128x128_nn") -> Path:
    """Four 12 ms steps of back-to-back kernels: a 5 ms one whose name ids are NULL (unrecorded
    name), then 3 ms of ``gemm`` (fp16), 1 ms of an elementwise kernel and 1 ms of an NCHW ->
    NHWC conversion, those three also unnamed unless ``named``."""
    ms = 1_000_000
    parts = [(5, "k_unnamed"), (3, gemm),
             (1, "vectorized_elementwise_kernel<float>"), (1, "nchwToNhwcKernel")]
    kernels, steps = [], []
    for step in range(4):
        at = step * 12 * ms
        steps.append((at, at + 12 * ms, f"step {step}"))
        start = at + 1 * ms
        for k, (length, name) in enumerate(parts):
            kernels.append((start, start + length * ms, 10 * step + k, name))
            start += length * ms
    write_nsys_export(path, kernels, steps)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = NULL, "
                     f"shortName = NULL WHERE correlationId % 10 {'= 0' if named else '>= 0'}")
    return path


def test_shares_by_kernel_name_are_of_the_named_kernels(tmp_path: Path) -> None:
    """Half the compute-kernel time in kernels of unrecorded name: the shares by name are of the
    named half (fp16 60%, elementwise 20%, layout conversions 20%), the evidence says how much
    is unnamed, and the unnamed half is no fp32: no mixed-precision advice (it said 30% of
    kernel time fp16/bf16 and advised autocast), torch.compile advised for the elementwise
    kernels (10% of all, below the threshold, before). The summary line's top kernel is
    unknown, as the finding's is (it printed 'top kernel: (name unrecorded) 20.0 ms (50%)')."""
    import json

    from profreport.commands import _summary_lines
    from profreport.reports.render.json import render_json

    report = analyze_paths([_half_unnamed_export(tmp_path / "half.sqlite", True)],
                           AnalyzeOptions())
    run = report.runs[0]
    mix = run.metrics.kernel_mix
    assert (mix.compute_kernel_ns, mix.unnamed_kernel_ns) == (40_000_000, 20_000_000)
    assert mix.reduced_precision_fraction == pytest.approx(0.6)
    assert mix.elementwise_fraction == pytest.approx(0.2)
    assert mix.layout_conversion_fraction == pytest.approx(0.2)
    assert mix.names_unknown is None
    finding = next(f for f in run.findings if f.id == "COMPUTE_BOUND")
    evidence = [e.text for e in finding.evidence]
    assert ("60% of the named compute-kernel time (50% of compute-kernel time has no recorded "
            "name) is in kernels named fp16/bf16 (kernel names only: the profiles record no "
            "input dtypes, and a name need not carry one)") in evidence
    assert ("NCHW/NHWC layout conversion kernels (nchwToNhwc, nhwcToNchw) take 20% of the named "
            "compute-kernel time (50% of compute-kernel time has no recorded name)") in evidence
    assert "mixed precision" not in finding.recommendation
    assert ("try torch.compile to fuse the elementwise kernels (20% of named kernel time)"
            in finding.recommendation)
    assert ("layout conversions take 20% of named kernel time" in finding.recommendation)
    rows = {row.label: row.value for row in metric_rows(run.metrics)}
    assert rows["Compute-kernel time of unrecorded name"] == "50.0%"
    assert rows["Named compute-kernel time in fp16/bf16 kernels"] == "60.0%"
    mixed = json.loads(render_json(report))["runs"][0]["metrics"]["kernel_mix"]
    assert (mixed["reduced_precision_fraction"], mixed["unnamed_kernel_fraction"],
            mixed["names_unknown"]) == (0.6, 0.5, None)
    assert _summary_lines(run)[-1] == (
        "  top kernel: unknown (kernels whose names the profile does not record take 20.0 ms "
        "(50%) together; the largest named one, volta_h884gemm_fp16_128x128_nn, 12.0 ms (30%))")


def test_mixed_precision_advice_by_kernel_name_says_the_unnamed_share(tmp_path: Path) -> None:
    """The named half mostly fp32 (an sgemm): mixed precision is advised on the named kernels'
    share, saying how much kernel time has no recorded name (it said '0.0% ... no kernel is
    named fp16/bf16 now', nothing of the unnamed half)."""
    path = _half_unnamed_export(tmp_path / "fp32.sqlite", True, "volta_sgemm_128x64_nn")
    finding = next(f for f in analyze_paths([path], AnalyzeOptions()).runs[0].findings
                   if f.id == "COMPUTE_BOUND")
    assert ("enable mixed precision (torch.autocast + GradScaler; no kernel is named fp16/bf16 "
            "now, 50% of compute-kernel time has no recorded name)") in finding.recommendation


def test_shares_by_kernel_name_are_unknown_without_names(tmp_path: Path) -> None:
    """No compute kernel's name recorded: the shares by name are unknown, with the reason, and
    no advice reads them (it said '0.0% of compute-kernel time is in kernels named fp16/bf16'
    and advised mixed precision as 'no kernel is named fp16/bf16 now')."""
    report = analyze_paths([_half_unnamed_export(tmp_path / "none.sqlite", False)],
                           AnalyzeOptions())
    run = report.runs[0]
    mix = run.metrics.kernel_mix
    assert (mix.reduced_precision_fraction, mix.elementwise_fraction,
            mix.layout_conversion_fraction) == (None, None, None)
    assert mix.unnamed_kernel_fraction == 1.0
    assert mix.names_unknown == "the profile records no compute kernel's name"
    finding = next(f for f in run.findings if f.id == "COMPUTE_BOUND")
    evidence = [e.text for e in finding.evidence]
    assert ("the kernels' precision, layout conversions and elementwise share by name: unknown, "
            "the profile records no compute kernel's name") in evidence
    assert not any("named fp16/bf16" in text for text in evidence)
    assert finding.recommendation == (
        "To go faster: enable mixed precision (torch.autocast + GradScaler) if the model trains "
        "in fp32 (the profiles cannot tell: no profile records the matmuls' and convolutions' "
        "input dtypes (torch.profiler with record_shapes=True does); the profile records no "
        "compute kernel's name).")
    rows = {row.label: row.value for row in metric_rows(run.metrics)}
    assert rows["Named compute-kernel time in fp16/bf16 kernels"] == (
        "unknown: the profile records no compute kernel's name")


def test_one_process_on_two_gpus_without_operators_is_not_called_dataparallel(
        tmp_path: Path) -> None:
    """An nsys capture of one process launching kernels on GPU 0 then GPU 1 each step, no CPU
    operator recorded: nn.DataParallel and a model split over the two GPUs (layers on cuda:1, a
    device_map) both look so, and the capture cannot tell them apart (a torch.profiler trace
    can: DataParallel's Scatter and Gather). The finding said 'The model uses
    nn.DataParallel' and advised DDP outright; it now says what was recorded and both."""
    ms = 1_000_000
    kernels, runtime, steps = [], [], []
    for step in range(4):
        at = step * 10 * ms
        steps.append((at, at + 9 * ms, f"step {step}"))
        for device in (0, 1):
            correlation = 10 * step + device
            start = at + (1 + 4 * device) * ms
            runtime.append((start - 100_000, start - 90_000, correlation, "cudaLaunchKernel"))
            kernels.append((start, start + 3 * ms, correlation, "gemm_kernel"))
    path = write_nsys_export(tmp_path / "split.sqlite", kernels, steps, runtime)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = correlationId % 10")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.max_devices_per_process == 2
    finding = next(f for f in run.findings if f.id == "DATAPARALLEL_NOT_DDP")
    assert finding.title == ("One process drives 2 GPUs: nn.DataParallel, or one model split "
                             "over them (the profile records no CPU operator to tell which).")
    assert finding.recommendation.startswith("If it is nn.DataParallel: switch to "
                                             "DistributedDataParallel")
    assert finding.recommendation.endswith("A model split over the GPUs (model parallelism, a "
                                           "device_map) is no DataParallel: DDP does not "
                                           "replace it.")
