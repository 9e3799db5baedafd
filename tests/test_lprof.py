"""The line_profiler parser: genuine kernprof files, source lookup, and hostile pickles refused."""

from __future__ import annotations

import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from line_profiler.line_profiler import LineStats

from profreport.errors import InputError
from profreport.parsers import lprof

KERNPROF = Path(sys.executable).with_name("kernprof")
LOADER_BATCHES = 25
COMPUTE_ROWS = 30

# A slow pure-Python "loader" (each batch sleeps) feeding a light compute step.
LOADER_SCRIPT = f"""\
import time


class SlowDataset:
    def __len__(self):
        return {LOADER_BATCHES}

    def __getitem__(self, index):
        time.sleep(0.004)
        return index, 2 * index


class Loader:
    def __init__(self, dataset):
        self.dataset = dataset

    def __iter__(self):
        for index in range(len(self.dataset)):
            yield self.dataset[index]


@profile
def train(train_loader):
    total = 0
    for batch_idx, (data, target) in enumerate(train_loader):
        total += data * target
    return total


train(Loader(SlowDataset()))
"""


def line_of(script: str, text: str) -> int:
    """The 1-based number of the first line of ``script`` that contains ``text``."""
    return next(n for n, line in enumerate(script.splitlines(), 1) if text in line)


LOADER_LOOP_LINE = line_of(LOADER_SCRIPT, "for batch_idx, (data, target) in")

# A compute-heavy loop over plain rows: its loop line must not be taken for a DataLoader.
COMPUTE_SCRIPT = f"""\
@profile
def compute(rows):
    acc = 0
    for row in rows:
        acc += sum(k * k for k in range(row))
    return acc


compute([20000] * {COMPUTE_ROWS})
"""


def run_kernprof(kernprof: Path, script: Path, out: Path) -> Path:
    """Profile ``script`` (by absolute path) with ``kernprof -l`` and return the .lprof."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(kernprof), "-l", "-o", str(out), str(script)], check=True,
                   capture_output=True, timeout=120, cwd=out.parent)
    return out


def profiled(root: Path, name: str, code: str, kernprof: Path = KERNPROF) -> tuple[Path, Path]:
    """Write ``code`` as ``root/src/pkg/<name>.py``, profile it into ``root/out``."""
    script = root / "src" / "pkg" / f"{name}.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(code)
    return script, run_kernprof(kernprof, script, root / "out" / f"{name}.lprof")


@pytest.fixture(scope="session")
def loader_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A genuine .lprof of the slow-loader training loop, with its script in place."""
    return profiled(tmp_path_factory.mktemp("loader"), "train_loop", LOADER_SCRIPT)


@pytest.fixture(scope="session")
def compute_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A genuine .lprof of the compute-heavy function, with its script in place."""
    return profiled(tmp_path_factory.mktemp("compute"), "compute", COMPUTE_SCRIPT)


def by_line(profile: lprof.Profile) -> dict[int, dict]:
    """The lines table as {lineno: row}."""
    return {row["lineno"]: row for row in profile.table("lines").to_dict("records")}


def test_loader_line_is_flagged_and_carries_the_time(loader_run: tuple[Path, Path]) -> None:
    script, path = loader_run
    profile = lprof.parse(path)
    lines = by_line(profile)
    loop = lines[LOADER_LOOP_LINE]
    assert loop["source"].strip().startswith("for batch_idx, (data, target) in enumerate(")
    assert loop["is_dataloader_loop"]
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [LOADER_LOOP_LINE]
    # 25 batches, each a 4 ms sleep inside the loader: the loop line takes >= 100 ms, nearly all.
    assert loop["time_ns"] >= LOADER_BATCHES * 4_000_000
    assert loop["function_share"] > 0.9
    assert loop["hits"] == LOADER_BATCHES + 1  # the last hit finds the loader exhausted
    assert lines[LOADER_LOOP_LINE + 1]["hits"] == LOADER_BATCHES
    assert lines[LOADER_LOOP_LINE - 1]["hits"] == 1
    assert profile.kind == "lprof"
    assert profile.tool_version == "line_profiler 3.x or 5.1+"
    first = line_of(LOADER_SCRIPT, "@profile")  # a decorated function starts at its decorator
    assert profile.meta["functions"] == [{"file": str(script), "function": "train",
                                          "first_lineno": first, "source_path": str(script)}]


def test_compute_loop_is_not_a_loader(compute_run: tuple[Path, Path]) -> None:
    profile = lprof.parse(compute_run[1])
    lines = by_line(profile)
    assert not profile.table("lines")["is_dataloader_loop"].any()
    assert lines[4]["source"] == "    for row in rows:"
    assert lines[4]["hits"] == COMPUTE_ROWS + 1
    assert lines[5]["hits"] == COMPUTE_ROWS
    assert lines[5]["function_share"] > 0.9
    assert lines[4]["function_share"] < 0.05


def test_times_are_ticks_times_unit_in_ns(loader_run: tuple[Path, Path]) -> None:
    path = loader_run[1]
    with open(path, "rb") as handle:  # our own file, so line_profiler's loader is fine here
        stats = pickle.load(handle)
    ((key, rows),) = stats.timings.items()
    table = lprof.parse(path).table("lines")
    assert table["lineno"].tolist() == [row[0] for row in rows]
    assert table["time_ns"].tolist() == [round(row[2] * stats.unit * 1e9) for row in rows]
    assert table["function_share"].sum() == pytest.approx(1.0)
    assert (table["time_per_hit_ns"] == table["time_ns"] // table["hits"]).all()
    assert table["function"].unique().tolist() == [key[2]]


def test_hits_agree_with_line_profilers_own_report(loader_run: tuple[Path, Path]) -> None:
    path = loader_run[1]
    shown = subprocess.run([sys.executable, "-m", "line_profiler", str(path)], check=True,
                           capture_output=True, text=True, timeout=120).stdout
    # Rows of the report: line number, hits, time, per hit, % time, then the source line.
    report = {int(m[1]): int(m[2]) for m in
              re.finditer(r"^\s*(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+[\d.]+\s", shown, re.M)}
    table = lprof.parse(path).table("lines")
    assert report == dict(zip(table["lineno"], table["hits"], strict=True))


def test_source_found_beside_the_lprof(tmp_path: Path) -> None:
    script, path = profiled(tmp_path / "run", "train_loop", LOADER_SCRIPT)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.move(script, moved / script.name)
    shutil.move(path, moved / path.name)
    shutil.rmtree(tmp_path / "run")
    profile = lprof.parse(moved / path.name)
    assert by_line(profile)[LOADER_LOOP_LINE]["is_dataloader_loop"]
    assert profile.meta["functions"][0]["source_path"] == str(moved / script.name)


def test_relative_recorded_path_resolves_beside_the_lprof(tmp_path: Path) -> None:
    (tmp_path / "compute.py").write_text(COMPUTE_SCRIPT)  # ``cd dir && kernprof -l compute.py``
    subprocess.run([str(KERNPROF), "-l", "compute.py"], check=True, capture_output=True,
                   timeout=120, cwd=tmp_path)
    profile = lprof.parse(tmp_path / "compute.py.lprof")
    assert profile.meta["functions"][0]["file"] == "compute.py"
    assert by_line(profile)[4]["source"] == "    for row in rows:"


def test_profile_of_no_function_has_an_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "empty.lprof"
    path.write_bytes(pickle.dumps(LineStats({}, 1e-9), protocol=5))
    profile = lprof.parse(path)
    assert profile.table("lines").empty and profile.meta["functions"] == []
    assert profile.table("lines")["time_ns"].dtype == "int64"


def test_source_found_under_source_root_then_nowhere(tmp_path: Path) -> None:
    script, path = profiled(tmp_path / "run", "train_loop", LOADER_SCRIPT)
    root = tmp_path / "checkout"
    (root / "pkg").mkdir(parents=True)
    (root / "other").mkdir()
    (root / "other" / script.name).write_text("decoy\n")  # fewer trailing parts match
    shutil.move(script, root / "pkg" / script.name)
    assert lprof.parse(path).table("lines")["source"].isna().all()
    found = lprof.parse(path, source_root=root)
    assert found.meta["functions"][0]["source_path"] == str(root / "pkg" / script.name)
    assert by_line(found)[LOADER_LOOP_LINE]["is_dataloader_loop"]
    shutil.rmtree(root)
    gone = lprof.parse(path, source_root=tmp_path)
    assert gone.table("lines")["source"].tolist() == [None] * 4
    assert not gone.table("lines")["is_dataloader_loop"].any()
    assert gone.table("lines")["hits"].tolist() == [1, LOADER_BATCHES + 1, LOADER_BATCHES, 1]


def test_line_profiler_4_file_is_read(tmp_path: Path) -> None:
    """Needs a kernprof from line_profiler 4.x: PROFREPORT_KERNPROF4=/path/to/kernprof."""
    kernprof4 = os.environ.get("PROFREPORT_KERNPROF4")
    if not kernprof4:
        pytest.skip("set PROFREPORT_KERNPROF4 to a line_profiler 4.x kernprof to run this")
    _, path = profiled(tmp_path, "train_loop", LOADER_SCRIPT, Path(kernprof4))
    profile = lprof.parse(path)
    assert profile.tool_version == "line_profiler 4.x/5.0"
    assert profile.meta["class_path"] == "line_profiler._line_profiler.LineStats"
    loop = by_line(profile)[LOADER_LOOP_LINE]
    assert loop["is_dataloader_loop"] and loop["hits"] == LOADER_BATCHES + 1


# --- hostile and damaged files, crafted here (tmp_path/data), never committed as blobs ---


class RunsOnLoad:
    """Pickles as a call of ``func(*args)``: what a malicious .lprof would carry."""

    def __init__(self, func: object, *args: object) -> None:
        self.call = (func, args)

    def __reduce__(self) -> tuple:
        return self.call


def attacks(marker: Path) -> dict[str, object]:
    """Objects whose unpickling would create ``marker`` by running code from the file."""
    return {
        "os.system": RunsOnLoad(os.system, f"touch {marker}"),
        "builtins.exec": RunsOnLoad(exec, f"open({str(marker)!r}, 'w').close()"),
        "subprocess": RunsOnLoad(subprocess.call, ["touch", str(marker)]),
        "inside LineStats": LineStats({("a.py", 1, "f"): [(2, 1, 10)]},
                                      RunsOnLoad(os.system, f"touch {marker}")),
    }


@pytest.mark.parametrize("attack", ["os.system", "builtins.exec", "subprocess",
                                    "inside LineStats"])
def test_code_in_the_pickle_is_refused_and_never_runs(tmp_path: Path, attack: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    control = tmp_path / "control-marker"
    pickle.loads(pickle.dumps(attacks(control)[attack]))  # the crafted payload is live
    assert control.exists()
    marker = tmp_path / "marker"
    path = data / "evil.lprof"
    path.write_bytes(pickle.dumps(attacks(marker)[attack], protocol=5))
    with pytest.raises(InputError, match=r"refused: the file asks to load \S+\.\S+, which a "
                                         r"\.lprof never holds") as caught:
        lprof.parse(path)
    assert not marker.exists()
    assert caught.value.path == str(path)


def test_harmless_foreign_class_is_refused(tmp_path: Path) -> None:
    from collections import OrderedDict

    path = tmp_path / "ordered.lprof"
    path.write_bytes(pickle.dumps(OrderedDict(a=1), protocol=4))
    with pytest.raises(InputError, match="collections.OrderedDict"):
        lprof.parse(path)


@pytest.mark.parametrize(("timings", "unit", "complaint"), [
    ({("a.py", "1", "f"): [(2, 1, 10)]}, 1e-6, "function key"),
    ({("a.py", 1): [(2, 1, 10)]}, 1e-6, "function key"),
    ({("a.py", 1, "f"): [(2, 1.5, 10)]}, 1e-6, "integer triples"),
    ({("a.py", 1, "f"): [(2, True, 10)]}, 1e-6, "integer triples"),
    ({("a.py", 1, "f"): [(2, 1)]}, 1e-6, "integer triples"),
    ({("a.py", 1, "f"): ((2, 1, 10),)}, 1e-6, "integer triples"),
    ({("a.py", 1, "f"): [(2, 1, 10)]}, -1e-6, "positive float"),
    ({("a.py", 1, "f"): [(2, 1, 10)]}, "1e-6", "positive float"),
    ([("a.py", 1, "f")], 1e-6, "not a dict"),
])
def test_linestats_with_wrong_field_types_is_refused(tmp_path: Path, timings: object,
                                                     unit: object, complaint: str) -> None:
    path = tmp_path / "wrong.lprof"
    path.write_bytes(pickle.dumps(LineStats(timings, unit), protocol=5))
    with pytest.raises(InputError, match=complaint):
        lprof.parse(path)


def test_damaged_and_foreign_files_are_one_line_errors(tmp_path: Path,
                                                       loader_run: tuple[Path, Path]) -> None:
    genuine = loader_run[1].read_bytes()
    cases = {
        "text.lprof": b"Timer unit: 1e-06 s\n",
        "truncated.lprof": genuine[: len(genuine) // 2],
        "list.lprof": pickle.dumps([1, 2, 3], protocol=5),
        "old-protocol.lprof": pickle.dumps({"timings": {}}, protocol=0),
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError) as caught:
            lprof.parse(tmp_path / name)
        assert "\n" not in caught.value.one_line()
        assert caught.value.path == str(tmp_path / name)


def test_absurd_sizes_are_refused(tmp_path: Path, loader_run: tuple[Path, Path],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    huge = tmp_path / "huge.lprof"
    with open(huge, "wb") as handle:  # sparse: costs no disk
        handle.truncate(lprof.MAX_LPROF_BYTES + 1)
    with pytest.raises(InputError, match="larger than 64 MiB"):
        lprof.parse(huge)
    monkeypatch.setattr(lprof, "MAX_LINES", 3)
    with pytest.raises(InputError, match="more than 3 profiled lines"):
        lprof.parse(loader_run[1])
