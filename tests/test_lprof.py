"""The line_profiler parser: genuine kernprof files, source lookup, and hostile pickles refused."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from html import escape as html_escape
from pathlib import Path

import pytest
from line_profiler.line_profiler import LineStats

from profreport import pysource
from profreport.errors import InputError
from profreport.inputs import Limit
from profreport.model import LprofFunction
from profreport.parsers import lprof
from profreport.reports.analysis.lines import line_table, lprof_step_stats, top_lines

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
    profile = lprof.parse(path, source_root=script.parent)
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
    assert profile.meta.functions == [LprofFunction(file=str(script), function="train",
                                                    first_lineno=first, source_path=str(script),
                                                    source_hidden=None)]


def test_compute_loop_is_not_a_loader(compute_run: tuple[Path, Path]) -> None:
    profile = lprof.parse(compute_run[1], source_root=compute_run[0].parent)
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
    assert profile.meta.functions[0].source_path == str(moved / script.name)


def test_relative_recorded_path_resolves_beside_the_lprof(tmp_path: Path) -> None:
    (tmp_path / "compute.py").write_text(COMPUTE_SCRIPT)  # ``cd dir && kernprof -l compute.py``
    subprocess.run([str(KERNPROF), "-l", "compute.py"], check=True, capture_output=True,
                   timeout=120, cwd=tmp_path)
    profile = lprof.parse(tmp_path / "compute.py.lprof")
    assert profile.meta.functions[0].file == "compute.py"
    assert by_line(profile)[4]["source"] == "    for row in rows:"


def test_source_beside_an_lprof_named_by_a_relative_path_is_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``profreport analyze run/train.py.lprof`` from the folder above: the recorded
    ``train.py`` beside it was looked for at run/run/train.py ('cannot read: No such file or
    directory') and never shown; so was one under a relative ``--source-root``."""
    run = tmp_path / "run"
    run.mkdir()
    path, _ = profiled_beside(run / "train.py", "def train():\n    for i in range(5):\n"
                              "        x = i\n    return x\n", [(2, 6, 900), (3, 5, 50)],
                              "train", 1)
    monkeypatch.chdir(tmp_path)
    profile = lprof.parse(Path("run") / path.name)
    assert profile.meta.functions[0].source_path == str(run / "train.py")
    assert by_line(profile)[2]["source"] == "    for i in range(5):"
    (tmp_path / "elsewhere").mkdir()
    shutil.move(path, tmp_path / "elsewhere" / path.name)
    profile = lprof.parse(Path("elsewhere") / path.name, source_root=Path("run"))
    assert profile.meta.functions[0].source_path == str(run / "train.py")


def test_listings_start_where_line_profiler_says_each_function_does(tmp_path: Path) -> None:
    """The HTML listing's 'Function: train at line N' is the line line_profiler recorded (the
    decorator's, as its own listing says), not the first timed line (a real kernprof -l profile
    of an @profile function read 'at line 12' for line_profiler's 'at line 10'); two methods of
    one name in a file are two listings, not one."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    source = ("@profile\ndef train():\n    x = 1\n    return x\n"
              "class A:\n    def forward(self):\n        return 1\n"
              "class B:\n    def forward(self):\n        return 2\n")
    (tmp_path / "train.py").write_text(source)
    path = stats_file(tmp_path / "train.py.lprof", {
        ("train.py", 1, "train"): [(3, 1, 500), (4, 1, 100)],
        ("train.py", 6, "forward"): [(7, 2, 300)], ("train.py", 9, "forward"): [(10, 2, 200)]})
    listings = analyze_paths([path], AnalyzeOptions()).runs[0].metrics.listings
    assert [(f.function, f.first_lineno, [line.lineno for line in f.lines]) for f in listings] \
        == [("train", 1, [3, 4]), ("forward", 6, [7]), ("forward", 9, [10])]


def test_profile_of_no_function_has_an_empty_table(tmp_path: Path) -> None:
    path = tmp_path / "empty.lprof"
    path.write_bytes(pickle.dumps(LineStats({}, 1e-9), protocol=5))
    profile = lprof.parse(path)
    assert profile.table("lines").empty and profile.meta.functions == []
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
    assert found.meta.functions[0].source_path == str(root / "pkg" / script.name)
    assert by_line(found)[LOADER_LOOP_LINE]["is_dataloader_loop"]
    shutil.rmtree(root)
    gone = lprof.parse(path, source_root=tmp_path)
    assert gone.table("lines")["source"].tolist() == [None] * 4
    # Without the source the loop is still found, from the hit counts (see the tests below).
    assert gone.meta.loop.evidence == "hit counts"
    assert gone.table("lines")["hits"].tolist() == [1, LOADER_BATCHES + 1, LOADER_BATCHES, 1]


def test_line_profiler_4_file_is_read(tmp_path: Path) -> None:
    """Needs a kernprof from line_profiler 4.x: PROFREPORT_KERNPROF4=/path/to/kernprof."""
    kernprof4 = os.environ.get("PROFREPORT_KERNPROF4")
    if not kernprof4:
        pytest.skip("set PROFREPORT_KERNPROF4 to a line_profiler 4.x kernprof to run this")
    _, path = profiled(tmp_path, "train_loop", LOADER_SCRIPT, Path(kernprof4))
    profile = lprof.parse(path)
    assert profile.tool_version == "line_profiler 4.x/5.0"
    assert profile.meta.class_path == "line_profiler._line_profiler.LineStats"
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
    with pytest.raises(InputError, match="larger than 32 MiB"):
        lprof.parse(huge)
    monkeypatch.setattr(lprof, "MAX_LINE_ENTRIES", Limit("line entries", 3, "a test limit"))
    with pytest.raises(InputError, match="4 line entries where at most 3"):
        lprof.parse(loader_run[1])


# --- source containment: nothing outside the allowed folders reaches a report ---


def stats_file(path: Path, timings: dict) -> Path:
    """Write a genuine LineStats pickle with these timings (as kernprof would)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(LineStats(timings, 1e-9), protocol=5))
    return path


def profiled_beside(script: Path, source: str, lines: list[tuple[int, int, int]],
                    function: str, first: int):  # type: ignore[no-untyped-def]
    """A hand-built .lprof of ``function`` (starting at line ``first``) with these ``lines``
    (lineno, hits, ns), beside ``script`` holding ``source``; its path and the loop found."""
    script.write_text(source)
    path = stats_file(script.with_suffix(".py.lprof"), {(script.name, first, function): lines})
    return path, lprof.parse(path).meta.loop


def one_function(recorded: str) -> dict:
    """Timings of one function recorded in file ``recorded``: a loop and its body."""
    return {(recorded, 1, "train"): [(2, 1, 10), (3, 6, 900), (4, 5, 50), (5, 1, 5)]}


@pytest.mark.parametrize("recorded", [
    "/etc/passwd", "/proc/self/environ", "../../../../etc/passwd", "/dev/zero",
    "secrets.txt", "linked.py", "sub/../../outside.py"])
def test_sources_outside_the_allowed_folders_are_never_read(tmp_path: Path,
                                                            recorded: str) -> None:
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    (run / "secrets.txt").write_text("TOKEN=hunter2\n" * 5)  # inside, but not Python source
    (run / "linked.py").symlink_to("/etc/passwd")  # a Python name pointing outside
    (tmp_path / "outside.py").write_text("TOKEN = 'hunter2'\n" * 5)
    profile = lprof.parse(stats_file(run / "x.lprof", one_function(recorded)))
    lines = profile.table("lines")
    assert lines["source"].isna().all()
    assert lines["hits"].tolist() == [1, 6, 5, 1]
    (note,) = profile.meta.notes
    assert note.startswith("source of train (") and "not shown: " in note
    assert profile.meta.functions[0].source_path is None


def test_source_reasons_say_why(tmp_path: Path) -> None:
    cases = {"/etc/passwd": "outside", "../../etc/passwd": "'..'",
             "/proc/self/environ": "system folders", "nowhere.py": "--source-root"}
    for recorded, reason in cases.items():
        profile = lprof.parse(stats_file(tmp_path / "r" / "x.lprof", one_function(recorded)))
        assert reason in profile.meta.notes[0], recorded


def test_source_in_the_run_folder_is_shown(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "rank0").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (run / "train.py").write_text(COMPUTE_SCRIPT)
    recorded = str(run / "train.py")
    path = stats_file(run / "rank0" / "x.lprof",
                      {(recorded, 1, "compute"): [(3, 1, 10), (4, 6, 900), (5, 5, 50)]})
    profile = lprof.parse(path)
    assert by_line(profile)[4]["source"] == "    for row in rows:"
    assert profile.meta.notes == []


def test_a_huge_file_name_is_read_and_elided_in_notes(tmp_path: Path) -> None:
    name = "/" + "a" * 100_000 + ".py"
    profile = lprof.parse(stats_file(tmp_path / "x.lprof", one_function(name)))
    assert profile.table("lines")["file"].iloc[0] == name  # the table keeps the full name
    assert len(profile.meta.notes[0]) < 1000


def test_a_huge_file_name_in_a_bad_file_gives_a_short_error(tmp_path: Path) -> None:
    path = stats_file(tmp_path / "x.lprof", {("/" + "a" * 100_000, 1, "f"): [(1, -1, 0)]})
    with pytest.raises(InputError) as caught:
        lprof.parse(path)
    assert len(caught.value.one_line()) < 1000


def test_millions_of_line_entries_are_refused_before_any_table(tmp_path: Path) -> None:
    entry = (1, 1, 1)  # one shared tuple: 2 bytes of pickle per entry, as an attacker writes it
    path = stats_file(tmp_path / "x.lprof", {("a.py", 1, "f"): [entry] * 4_900_000})
    assert path.stat().st_size < 16 << 20
    with pytest.raises(InputError, match="4,900,000 line entries where at most 1,000,000"):
        lprof.parse(path)


# --- the training loop found from hit counts when no source is shown (issue #10) ---


def test_loader_loop_found_from_hit_counts_alone(loader_run: tuple[Path, Path]) -> None:
    profile = lprof.parse(loader_run[1])  # the script is outside every allowed folder
    lines = by_line(profile)
    assert all(row["source"] is None for row in lines.values())
    assert [n for n, row in lines.items() if row["is_loop_header"]] == [LOADER_LOOP_LINE]
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [LOADER_LOOP_LINE]
    loop = profile.meta.loop
    assert loop.lineno == LOADER_LOOP_LINE and loop.function == "train"
    assert (loop.iterations, loop.entries, loop.ended_by_break) == (LOADER_BATCHES, 1,
                                                                             False)
    assert loop.evidence == "hit counts" and loop.dataloader
    assert loop.confidence == "medium"  # the function is called train


def test_compute_loop_found_from_hit_counts_is_no_loader(compute_run: tuple[Path, Path]) -> None:
    profile = lprof.parse(compute_run[1])
    lines = by_line(profile)
    assert [n for n, row in lines.items() if row["is_loop_header"]] == [4]
    assert not profile.table("lines")["is_dataloader_loop"].any()
    loop = profile.meta.loop
    assert (loop.lineno, loop.iterations, loop.dataloader) == (4, COMPUTE_ROWS, False)
    assert loop.confidence == "none"  # small header time, "compute" says nothing of training
    # The line shown names no DataLoader: the hit counts judge it, as without the source.
    with_source = lprof.parse(compute_run[1], source_root=compute_run[0].parent).meta.loop
    assert (with_source.evidence, with_source.source_shown) == ("hit counts", True)
    assert (with_source.confidence, with_source.dataloader) == ("none", False)


def test_a_loop_shown_over_a_loader_not_named_so_is_judged_by_hit_counts(
        tmp_path: Path) -> None:
    """``for x, y in self.dl:`` inside ``for epoch in range(3):`` of ``Trainer.fit``, its
    script beside the .lprof: the line names no DataLoader, so, as without the source, the hit
    counts find the inner loop (63 hits for 60 passes) and the function's name makes it the
    training loop (low confidence); it had been no loop at all, and the verdict unknown."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    path, loop = profiled_beside(
        tmp_path / "fit.py", "class Trainer:\n    def fit(self):\n"
        "        for epoch in range(3):\n            for x, y in self.dl:\n"
        "                self.step(x, y)\n",
        [(3, 4, 50), (4, 63, 3_000_000), (5, 60, 9_000_000)], "Trainer.fit", 2)
    assert by_line(lprof.parse(path))[4]["source"] == "            for x, y in self.dl:"
    assert (loop.lineno, loop.iterations, loop.entries) == (4, 60, 3)
    assert (loop.evidence, loop.source_shown, loop.dataloader, loop.confidence) == (
        "hit counts", True, True, "low")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.steps.count == 60
    assert run.metrics.steps.mean_ns == 12_000_000 // 60
    assert run.metrics.dataloader_fraction == pytest.approx(0.25)
    assert run.metrics.loop_identification.reason.startswith(
        "the line shown names no DataLoader: fit.py:4 taken for the DataLoader loop from hit "
        "counts alone")


def test_dataloader_knobs_shown_in_the_source_are_the_runs(tmp_path: Path) -> None:
    """``loader = DataLoader(ds, batch_size=32)`` in the source shown beside a hand-built
    .lprof of a loader-bound loop, no manifest: num_workers is PyTorch's default, 0, so the
    advice raises it from 0 (it said the profile does not record num_workers), and a note says
    the knobs come from the source. Only literal arguments are read: one given as an
    expression or possibly by ``**kwargs``, or set apart by two calls, is not known."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    path, _ = profiled_beside(
        tmp_path / "train.py", "from torch.utils.data import DataLoader\n\n\ndef train(ds):\n"
        "    loader = DataLoader(ds, batch_size=32)\n    for x, y in loader:\n"
        "        step(x, y)\n", [(5, 1, 1000), (6, 61, 30_000_000), (7, 60, 6_000_000)],
        "train", 4)
    meta = lprof.parse(path).meta
    assert (meta.loader_knobs, meta.loader_calls) == (
        {"batch_size": 32, "num_workers": 0, "pin_memory": False}, "train.py line 5")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.verdict == "loader-bound"
    assert ("train.py.lprof: DataLoader knobs read from the DataLoader(...) call its source "
            "shows (train.py line 5; PyTorch's default where the call leaves one out), as no "
            "manifest records them: batch_size=32, num_workers=0, pin_memory=False") in run.notes
    advice = next(f for f in run.findings if f.id == "LOADER_BOUND").recommendation
    assert advice.startswith("Raise DataLoader num_workers from 0 to 8 ")
    other, _ = profiled_beside(
        tmp_path / "other.py", "import torch\n\n\ndef train(ds, w, kw):\n"
        "    a = torch.utils.data.DataLoader(ds, 64, num_workers=w, pin_memory=True)\n"
        "    b = torch.utils.data.DataLoader(ds, 16, num_workers=2, pin_memory=True, **kw)\n"
        "    for x, y in a:\n        step(x, y)\n",
        [(5, 1, 1000), (6, 1, 1000), (7, 61, 30_000_000), (8, 60, 6_000_000)], "train", 4)
    meta = lprof.parse(other).meta
    assert (meta.loader_knobs, meta.loader_calls) == (
        {"pin_memory": True}, "other.py line 5, other.py line 6")


def test_a_batch_sampler_given_by_place_leaves_no_batch_size_of_1(tmp_path: Path) -> None:
    """``DataLoader(ds, 1, False, None, BucketSampler(ds, 48), 4)``: the 5th positional argument
    is batch_sampler, so DataLoader's batch_size is None (the sampler's batches, 48 here, are
    what a step takes). It was read as PyTorch's default batch size, 1, and the run's knobs and
    note said batch_size=1."""
    path, _ = profiled_beside(
        tmp_path / "bucket.py", "from torch.utils.data import DataLoader\n\n\ndef train(ds):\n"
        "    loader = DataLoader(ds, 1, False, None, BucketSampler(ds, 48), 4)\n"
        "    for x, y in loader:\n        step(x, y)\n",
        [(5, 1, 1000), (6, 61, 30_000_000), (7, 60, 6_000_000)], "train", 4)
    assert lprof.parse(path).meta.loader_knobs == {
        "batch_size": None, "num_workers": 4, "pin_memory": False}
    run = analyze_paths_of(path)
    assert run.knobs["batch_size"] is None
    assert any(note.endswith("as no manifest records them: batch_size=None, num_workers=4, "
                             "pin_memory=False") for note in run.notes)


def test_loop_header_of_a_function_called_several_times(tmp_path: Path) -> None:
    # 3 calls of 4 iterations: the header runs 3 * (4 + 1) = 15 times, its body 12.
    timings = {("gone.py", 1, "run_epoch"): [(2, 3, 30), (3, 15, 9000), (4, 12, 600),
                                             (5, 12, 700), (6, 3, 10)]}
    profile = lprof.parse(stats_file(tmp_path / "x.lprof", timings))
    assert profile.table("lines")["is_loop_header"].tolist() == [False, True, False, False,
                                                                 False]
    loop = profile.meta.loop
    assert (loop.lineno, loop.entries, loop.iterations) == (3, 3, 12)
    assert loop.dataloader and loop.body_ns == 1300 and loop.confidence == "medium"


def test_loop_left_by_break_is_found(tmp_path: Path) -> None:
    # ``for ...: ...; if i + 1 >= steps: break``: the header is hit as often as its body.
    timings = {("gone.py", 1, "fit"): [(2, 1, 30), (3, 6, 200), (4, 6, 900), (5, 12, 50),
                                       (6, 6, 10), (7, 1, 5)]}
    profile = lprof.parse(stats_file(tmp_path / "x.lprof", timings))
    assert profile.table("lines")["is_loop_header"].tolist() == [False, True, False, False,
                                                                 False, False]
    loop = profile.meta.loop
    assert loop.ended_by_break and loop.iterations == 6
    # The body's line 4 outweighs the header: only the name says "training loop".
    assert loop.dataloader and loop.confidence == "low"
    assert by_line(profile)[3]["is_dataloader_loop"]


def test_runner_fixture_loops_found_without_source(fixtures_dir: Path) -> None:
    loader = lprof.parse(fixtures_dir / "loader_heavy" / "train.lprof").meta.loop
    compute = lprof.parse(fixtures_dir / "compute_heavy" / "train.lprof").meta.loop
    assert loader.function == compute.function == "train"
    assert loader.lineno == compute.lineno and loader.ended_by_break
    assert loader.header_is_largest and not compute.header_is_largest
    assert (loader.confidence, compute.confidence) == ("medium", "low")


def _py2_lineprofiler_file(filename: bytes, function: bytes, lines: list[tuple[int, int, int]],
                           unit: float) -> bytes:
    """The bytes Python 2.7's kernprof (line_profiler 2.x, 2018) writes: cPickle protocol 2 of a
    ``_line_profiler.LineStats``, names as byte strings (SHORT_BINSTRING), built opcode by
    opcode so that no Python 3 pickler has a say in it."""
    def short_string(text: bytes) -> bytes:
        return b"U" + bytes([len(text)]) + text

    def small_int(value: int) -> bytes:
        return b"K" + bytes([value]) if value < 256 else b"J" + struct.pack("<i", value)

    rows = b"".join(b"".join(small_int(v) for v in row) + b"\x87" for row in lines)
    return b"".join([
        b"\x80\x02",                                  # PROTO 2
        b"c_line_profiler\nLineStats\n", b"q\x00",   # GLOBAL _line_profiler.LineStats, BINPUT
        b")\x81", b"q\x01",                           # EMPTY_TUPLE, NEWOBJ: the instance
        b"}", b"q\x02", b"(",                         # its __dict__, MARK
        short_string(b"timings"), b"q\x03", b"}", b"q\x04",
        short_string(filename), small_int(lines[0][0] - 1), short_string(function),
        b"\x87", b"q\x05",                            # TUPLE3 key (file, first line, name)
        b"]", b"q\x06", b"(", rows, b"e",              # the line list, APPENDS
        b"s",                                         # SETITEM timings[key] = lines
        short_string(b"unit"), b"q\x07", b"G", struct.pack(">d", unit),
        b"u", b"b", b".",                             # SETITEMS, BUILD, STOP
    ])


def test_line_profiler_2_file_is_read_safely(tmp_path: Path) -> None:
    """A 2018 ``.lprof`` (a pickled ``_line_profiler.LineStats`` with byte-string names) was
    refused as if hostile; it is read through the same restricted unpickler."""
    path = tmp_path / "train.py.lprof"
    path.write_bytes(_py2_lineprofiler_file(b"/home/u/train.py", b"train",
                                            [(11, 3, 1500), (12, 300, 2_000_000), (13, 300, 70)],
                                            1e-6))
    profile = lprof.parse(path)
    assert profile.tool_version == "line_profiler 2.x"
    assert profile.meta.class_path == "_line_profiler.LineStats"
    assert profile.meta.pickle_protocol == 2
    lines = profile.table("lines")
    assert list(lines["lineno"]) == [11, 12, 13] and list(lines["hits"]) == [3, 300, 300]
    assert list(lines["time_ns"]) == [1_500_000, 2_000_000_000, 70_000]
    assert set(lines["file"]) == {"/home/u/train.py"} and set(lines["function"]) == {"train"}


def test_nanosecond_unit_is_exact_for_long_times(tmp_path: Path) -> None:
    """line_profiler 4+ counts ns (unit 1e-9): ticks become ns by an integer product, exact even
    past 2**53 ns where a float product drops the last digits."""
    ticks = 2**53 + 1
    path = stats_file(tmp_path / "ns.lprof", {("train.py", 1, "train"): [(2, 1, ticks),
                                                                         (3, 7, 999)]})
    lines = lprof.parse(path).table("lines")
    assert list(lines["time_ns"]) == [ticks, 999]
    assert list(lines["time_per_hit_ns"]) == [ticks, 142]


@pytest.mark.parametrize(("timings", "reason"), [
    ({("F", 1, "compute"): [(3, 1, 10), (12, 6, 900)]},
     "line 12 is recorded but the file has 9 lines"),
    ({("F", 1, "train"): [(3, 1, 10), (4, 6, 900)]}, "train() is not defined at line 1"),
    ({("F", 1, "compute"): [(3, 1, 10), (7, 6, 900)]},
     "line 7 is recorded with hits but holds no code"),
    ({("F", 1, "compute"): [(3, 1, 10), (9, 6, 900)]},
     "line 9 is recorded for compute(), which spans lines 1-6"),
])
def test_source_that_changed_since_profiling_is_not_shown(
        tmp_path: Path, timings: dict, reason: str) -> None:
    """A source found under ``--source-root`` that no longer matches the recorded function
    (its lines, where it is defined, every timed line inside its definition and holding code:
    a body that lost lines puts the module's ``compute(...)`` call at a line recorded for
    compute()) is not shown, and the notes say
    why: shown, it put other lines beside the times and steered the search for the loop."""
    root = tmp_path / "src"
    root.mkdir()
    (root / "train.py").write_text(COMPUTE_SCRIPT)
    recorded = "/elsewhere/project/train.py"
    path = stats_file(tmp_path / "run" / "x.lprof",
                      {(recorded, first, name): rows
                       for (_, first, name), rows in timings.items()})
    profile = lprof.parse(path, source_root=root)
    assert profile.meta.functions[0].source_path is None
    assert profile.table("lines")["source"].isna().all()
    assert profile.meta.notes == [f"source of {next(iter(timings))[2]} ({recorded}) not shown: "
                                  f"it no longer matches the profile: {reason}"]


def test_a_source_shifted_since_profiling_does_not_hide_the_loop(tmp_path: Path) -> None:
    """A real kernprof -l profile of an @profile train() (recorded at line 10) beside its script
    that gained two import lines since: line 10 is now a line of the class above, yet the def
    came a few lines later, so the source was taken to match; shown two lines off, the loop
    header (line 16, 21 hits) read as an assignment, no loop was found, and the verdict was
    unknown. It is not shown, and the loop is found from the hit counts."""
    profiled = ["x = 1"] * 9 + ["@profile", "def train():", "    m = 1", "    o = 2",
                                "    s = 3", "    dl = 4", "    for x, y in dl:",
                                "        a = 1", "        b = 2"]
    script = tmp_path / "train.py"
    script.write_text("\n".join(["import os", "import sys", *profiled]) + "\n")
    path = stats_file(tmp_path / "train.py.lprof", {("train.py", 10, "train"): [
        (12, 1, 900), (13, 1, 5000), (14, 1, 70), (15, 1, 200), (16, 21, 66_000_000),
        (17, 20, 10_000_000), (18, 20, 900_000)]})
    profile = lprof.parse(path)
    assert profile.meta.functions[0].source_path is None
    assert profile.meta.loop is not None and profile.meta.loop.lineno == 16
    assert profile.meta.loop.dataloader


SYNC_SCRIPT = """\
def train(model, batches):
    total = 0.0
    for x in batches:
        loss = model(x)  # queues the GPU work and returns at once
        total += loss.data[0]
    return total
"""


def test_a_line_that_only_syncs_is_a_sync_point(tmp_path: Path) -> None:
    """``loss.data[0]`` (PyTorch 0.3) or ``loss.item()`` waits for every kernel queued before
    it, so line_profiler charges it with the GPU's time: it is marked a sync point, in the table
    and in what the analysis and the reports say about it, not left as the slow line."""
    (tmp_path / "train.py").write_text(SYNC_SCRIPT)
    path = stats_file(tmp_path / "train.lprof", {("train.py", 1, "train"): [
        (2, 1, 10), (3, 101, 5_000), (4, 100, 40_000), (5, 100, 9_000_000), (6, 1, 10)]})
    profile = lprof.parse(path)
    lines = profile.table("lines").set_index("lineno")
    assert lines.index[lines["is_sync_point"]].tolist() == [5]
    (top, *_) = top_lines(line_table([profile]))
    assert top.lineno == 5 and top.is_sync_point
    assert [pysource.is_sync_point_line(text) for text in (
        "        acc += loss.item()", "x = y.cpu().numpy()", "torch.cuda.synchronize()",
        "    loss = model(x)  # not .item()", "items = d.items()")] == [
        True, True, True, False, False]


def test_steps_are_the_loops_passes_without_the_set_up_before_it(tmp_path: Path) -> None:
    """``train()`` builds its optimizer (one line, 900 ms, once), then loops 10 times: the
    header is hit 11 times (the last test ends the loop). The steps are the 10 passes of 1 ms
    (header 2 ms and body 8 ms over 10), and the DataLoader wait is the header's share of the
    loop (20%), not of the whole function with its set-up."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    ms = 10**6
    timings = {("gone.py", 1, "train"): [(2, 1, 900 * ms), (3, 11, 2 * ms), (4, 10, 5 * ms),
                                         (5, 10, 3 * ms)]}
    run = analyze_paths([stats_file(tmp_path / "x.lprof", timings)], AnalyzeOptions()).runs[0]
    steps = run.metrics.steps
    assert steps is not None and (steps.origin, steps.count, steps.mean_ns) == ("lprof", 10, ms)
    # The lines hold totals: no pass is timed alone, so no spread and no start-to-start time.
    assert (steps.p50_ns, steps.p90_ns, steps.min_ns, steps.max_ns, steps.wall_mean_ns) == (
        None, None, None, None, None)
    assert run.metrics.dataloader_fraction_by_origin["lprof"] == pytest.approx(0.2)
    assert run.metrics.breakdown is not None
    assert run.metrics.breakdown.parts_ns["dataloader"] == ms // 5


def test_the_dataloader_loop_the_source_shows_is_the_training_loop(tmp_path: Path) -> None:
    """The source shows ``for x, y in train_loader:`` in train() and a longer loop over a range
    in evaluate(): the DataLoader loop is the training loop, whichever holds more time."""
    (tmp_path / "fit.py").write_text(
        "def train(model, train_loader):\n    model.train()\n    for x, y in train_loader:\n"
        "        model(x)\n\n\ndef evaluate(model):\n    model.eval()\n"
        "    for i in range(20):\n        model(i)\n")
    recorded = str(tmp_path / "fit.py")
    timings = {(recorded, 1, "train"): [(2, 1, 10), (3, 6, 500), (4, 5, 500)],
               (recorded, 7, "evaluate"): [(8, 1, 10), (9, 21, 100), (10, 20, 9000)]}
    profile = lprof.parse(stats_file(tmp_path / "x.lprof", timings))
    loop = profile.meta.loop
    assert loop is not None and (loop.function, loop.lineno, loop.iterations) == ("train", 3, 5)
    assert loop.dataloader and loop.evidence == "name"  # a parameter: its name tells


def test_a_busy_loop_body_from_line_profiler_alone_names_no_operators(tmp_path: Path) -> None:
    """line_profiler alone, a loop body taking 80% of each pass: compute-bound, but said of the
    loop body's lines, never of 'the model's CPU operators' (the lines record neither the
    operators nor the device: a GPU run profiled by kernprof alone looks the same)."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    ms = 10**6
    timings = {("gone.py", 1, "train"): [(2, 1, 5 * ms), (3, 11, 2 * ms), (4, 10, 8 * ms)]}
    run = analyze_paths([stats_file(tmp_path / "x.lprof", timings)], AnalyzeOptions()).runs[0]
    assert (run.verdict, run.verdict_reason) == (
        "compute-bound", "the loop body's lines take 80% of step time")
    finding = {f.id: f for f in run.findings}["COMPUTE_BOUND"]
    assert finding.title == ("The loop body takes 80% of each step; line_profiler does not "
                             "record what runs in it.")
    assert "operators" not in finding.title and "A GPU is" not in finding.recommendation


def test_line_profiler_steps_show_their_mean_only(tmp_path: Path) -> None:
    """The report of a .lprof alone gives the mean pass and no percentiles (line_profiler
    cannot time a pass alone), and calls it the loop's time over its passes, not a range."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.render.json import render_json
    from profreport.reports.render.markdown import render_markdown

    ms = 10**6
    timings = {("gone.py", 1, "train"): [(2, 1, 900 * ms), (3, 11, 2 * ms), (4, 10, 8 * ms)]}
    report = analyze_paths([stats_file(tmp_path / "x.lprof", timings)], AnalyzeOptions())
    text = render_markdown(report)
    assert "| Mean step (the loop's time over its passes) | 1.0 ms |" in text
    assert "p50" not in text and "Wall time per step" not in text
    metrics = json.loads(render_json(report))["runs"][0]["metrics"]
    assert metrics["step_time_ms"] == {"mean": 1.0, "p50": None, "p90": None, "min": None,
                                       "max": None}
    assert metrics["wall_step_time_ms"] is None


def test_a_loop_inside_an_epoch_loop_is_entered_once_per_epoch(tmp_path: Path) -> None:
    """``for epoch in range(3): for x, y in loader: ...`` (10 batches): the inner header is hit
    33 times for 30 passes, once more per epoch; the epoch loop's header before it is hit 4
    times (its own last test too), which counts no entry of the inner loop. So 3 entries, each
    run to its end, not 4 entries of which one left by break."""
    timings = {("gone.py", 1, "train"): [(9, 1, 10), (10, 4, 20), (11, 33, 9000),
                                         (12, 30, 600), (13, 30, 700)]}
    loop = lprof.parse(stats_file(tmp_path / "x.lprof", timings)).meta.loop
    assert (loop.lineno, loop.iterations, loop.entries, loop.ended_by_break) == (11, 30, 3,
                                                                                  False)


def test_a_while_loop_left_by_break_keeps_the_lines_of_every_full_pass(tmp_path: Path) -> None:
    """``while True: try: batch = next(it) except StopIteration: break; work(batch)``: 20
    batches, 21 passes (the last one breaks before the work), so the work line runs 20 times,
    one fewer than the passes. It belongs to the body (run in every pass but the breaking one);
    the except and break lines (once) do not: the body holds the 20 ms of work, not only the
    5 µs of the lines run 21 times."""
    timings = {("gone.py", 10, "train"): [(11, 1, 10), (12, 21, 1000), (13, 21, 1000),
                                          (14, 21, 4000), (15, 1, 50), (16, 1, 50),
                                          (17, 20, 20_000_000)]}
    loop = lprof.parse(stats_file(tmp_path / "x.lprof", timings)).meta.loop
    assert (loop.lineno, loop.iterations, loop.ended_by_break) == (12, 21, True)
    assert loop.body_ns == 1000 + 4000 + 20_000_000
    # The steps are the 20 passes that did the work, not the 21 passes (a real kernprof run of
    # this shape over 2 epochs read 22 steps for its 20 optimizer steps), and each the loop's
    # time over them.
    assert loop.steps == 20
    steps = lprof_step_stats(replace(loop, dataloader=True))
    # (1000 header + 20_005_000 body) // 20 passes = 1_000_300
    assert (loop.time_ns, steps.count, steps.mean_ns) == (1000, 20, 1_000_300)


# A DataLoader loop whose first body line is an inner loop over each batch's 3 parts.
NESTED_SCRIPT = """\
import time


class Loader:
    def __iter__(self):
        for index in range(8):
            time.sleep(0.002)
            yield [index, index + 1, index + 2]


@profile
def train(train_loader):
    total = 0
    for batch in train_loader:
        for part in batch:
            time.sleep(0.0005)
            total += part
    return total


train(Loader())
"""


def test_a_loop_whose_first_body_line_is_an_inner_loop_counts_its_own_passes(
        tmp_path: Path) -> None:
    """kernprof of ``for batch in train_loader: for part in batch: ...`` (8 batches of 3): the
    inner header is hit 32 times (24 passes, one last test per batch), so it began 8 times, once
    per pass of the DataLoader loop, whose header is hit 9 times: 8 passes, 1 entry. Its body is
    the inner loop's lines. Taking the inner header's 32 hits for the passes gave -23 entries,
    an empty body and steps of the header's time alone (100% DataLoader wait)."""
    # Times as a run sleeping exactly as told would record them: the outer header 16 ms
    # (8 x 2 ms), the inner one 32 µs, its sleep 11.96 ms (24 x 0.5 ms, less the rest), the
    # sum 8 µs. The body is 32_000 + 11_960_000 + 8_000 = 12 ms; the loop 28 ms, 3.5 ms a pass.
    lines, loop, run = counted_run(tmp_path, NESTED_SCRIPT, shown=True, times={
        "for batch in": 16_000_000, "for part in": 32_000, "time.sleep(0.0005)": 11_960_000,
        "total += part": 8_000})
    outer, inner = line_of(NESTED_SCRIPT, "for batch in"), line_of(NESTED_SCRIPT, "for part in")
    assert (lines[outer]["hits"], lines[inner]["hits"]) == (9, 32)
    assert (loop.lineno, loop.evidence, loop.dataloader) == (outer, "name", True)
    assert (loop.hits, loop.iterations, loop.entries, loop.ended_by_break) == (9, 8, 1, False)
    assert (loop.time_ns, loop.body_ns) == (16_000_000, 12_000_000)
    steps = run.metrics.steps
    assert (steps.count, steps.mean_ns) == (8, 3_500_000)
    # The header's 16 ms of the loop's 28 ms: 4/7.
    assert run.metrics.dataloader_fraction_by_origin["lprof"] == pytest.approx(4 / 7, rel=1e-9)


def test_the_dataloader_loop_line_is_the_training_loops_header(tmp_path: Path) -> None:
    """train() loops over train_loader (3 ms waiting, 20 ms of work over 5 passes), evaluate()
    over val_loader (5 ms waiting, 1 ms of work): the training loop is train()'s, and the loop
    line the report quotes beside its DataLoader share is its header, not evaluate()'s line
    that waits longer (the loop line was picked apart from the loop, by its own time)."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    ms = 10**6
    (tmp_path / "fit.py").write_text(
        "def train(model, train_loader):\n    model.train()\n    for x, y in train_loader:\n"
        "        model(x)\n\n\ndef evaluate(model, val_loader):\n    model.eval()\n"
        "    for x, y in val_loader:\n        model(x)\n")
    recorded = str(tmp_path / "fit.py")
    timings = {(recorded, 1, "train"): [(2, 1, 10), (3, 6, 3 * ms), (4, 5, 20 * ms)],
               (recorded, 7, "evaluate"): [(8, 1, 10), (9, 6, 5 * ms), (10, 5, ms)]}
    metrics = analyze_paths([stats_file(tmp_path / "x.lprof", timings)],
                            AnalyzeOptions()).runs[0].metrics
    assert metrics.dataloader_fraction_by_origin["lprof"] == pytest.approx(3 / 23)
    line = metrics.loop_line
    assert line is not None and (line.function, line.lineno, line.time_ns) == ("train", 3, 3 * ms)


def test_two_line_profiles_without_ranks_are_not_added_up(tmp_path: Path) -> None:
    """Two .lprof files of one script in a folder (two processes: kernprof writes one each,
    and a bare folder records no rank): the lines, listing and loop come from the first alone
    and a note names the other, as for traces; their line totals had been listed together, the
    same line twice without saying whose."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    for rank, body in ((0, 9_000_000), (1, 2_000_000)):
        stats_file(tmp_path / f"train.rank{rank}.lprof",
                   {("gone.py", 1, "train"): [(2, 1, 10), (3, 11, 1_000_000), (4, 10, body)]})
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert [(line.lineno, line.time_ns) for line in run.metrics.lines] == [(4, 9_000_000),
                                                                            (3, 1_000_000),
                                                                            (2, 10)]
    (listing,) = run.metrics.listings
    assert [line.lineno for line in listing.lines] == [2, 3, 4]
    assert run.metrics.steps.count == 10 and run.metrics.steps.mean_ns == 1_000_000
    assert ("train.rank1.lprof: its lines are not in the line figures or listings, which come "
            "from train.rank0.lprof (neither records a rank, and two processes' line totals do "
            "not add up; analyse it alone for its own lines)") in run.notes


def test_a_loop_that_opens_its_function_is_found_from_its_source(tmp_path: Path) -> None:
    """``def train_epoch(batches, ...): for x in batches:`` (line_profiler 5's
    ``from line_profiler import profile``): no line precedes the loop to count its entries, so
    the hit counts alone cannot tell it from straight-line code; its source line shown opens a
    loop, which makes it the header (51 hits, 50 passes), and the training loop from the hit
    counts' signs. It had been no loop, and the verdict unknown."""
    path, loop = profiled_beside(
        tmp_path / "t.py", "@profile\ndef train_epoch(batches, model, opt):\n"
        "    for x in batches:\n        loss = model(x).pow(2).mean()\n        opt.step()\n",
        [(3, 51, 20_000), (4, 50, 2_000_000), (5, 50, 5_000_000)], "train_epoch", 1)
    assert (loop.lineno, loop.iterations, loop.entries, loop.ended_by_break) == (3, 50, 1, False)
    assert (loop.dataloader, loop.confidence) == (True, "low")  # named train_epoch
    # Without the source the same counts find no loop: nothing says the first line is one.
    (tmp_path / "t.py").unlink()
    assert lprof.parse(path).meta.loop is None


# A loop that counts its passes over range() and fetches each batch in its body: 10 passes,
# each waiting 4 ms in next(it) for a batch and working 1 ms. ``{fetch}`` is where ``it``
# comes from: shown in train() (``it = iter(train_loader)``) or not (a parameter).
COUNTED_SCRIPT = """\
import time


class Loader:
    def __iter__(self):
        while True:
            time.sleep(0.004)
            yield 1


@profile
def train({parameter}, steps):
    total = 0{fetch}
    for step in range(steps):
        batch = next(it)
        time.sleep(0.001)
        total += batch
    return total


train({argument}, 10)
"""
SHOWN_ITERATOR = COUNTED_SCRIPT.format(parameter="train_loader", argument="Loader()",
                                       fetch="\n    it = iter(train_loader)")
HIDDEN_ITERATOR = COUNTED_SCRIPT.format(parameter="it", argument="iter(Loader())", fetch="")
# Its loop's times over the 10 passes, as a run sleeping exactly as told would record them:
# the header 20 µs (11 hits), next(it) 40 ms (10 x 4 ms), the work 9.97 ms and 10 µs. The loop
# is 20_000 + 40_000_000 + 9_970_000 + 10_000 = 50_000_000 ns, 5 ms a pass.
COUNTED_TIMES = {"for step in": 20_000, "batch = next(it)": 40_000_000,
                 "time.sleep(0.001)": 9_970_000, "total += batch": 10_000}


def retimed(path: Path, code: str, times: dict[str, int]) -> Path:
    """The kernprof file ``path`` rewritten with the hits kernprof recorded and hand-set
    times: ``times[text]`` ns for the line of ``code`` holding ``text``, 1 µs for every other
    line. The sleeps' real times vary from run to run; these make every share exact."""
    recorded = pickle.loads(path.read_bytes())  # our own kernprof file
    ns = {line_of(code, text): value for text, value in times.items()}
    rows = {key: [(n, hits, ns.get(n, 1_000)) for n, hits, _ in lines]
            for key, lines in recorded.timings.items()}
    assert set(ns) <= {n for lines in rows.values() for n, _, _ in lines}, "a line not run"
    return stats_file(path, rows)


def counted_run(tmp_path: Path, code: str, shown: bool,  # type: ignore[no-untyped-def]
                times: dict[str, int]):
    """kernprof of ``code``, its times set by hand (``retimed``); its lines by number, the
    loop found and the run analysed, with the source shown or not."""
    from profreport.parsers import ParseOptions
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    script, path = profiled(tmp_path, "counted", code)
    retimed(path, code, times)
    root = script.parent if shown else None
    profile = lprof.parse(path, source_root=root)
    run = analyze_paths([path], AnalyzeOptions(parse=ParseOptions(source_root=root))).runs[0]
    return by_line(profile), profile.meta.loop, run


def test_a_loop_over_range_waits_for_data_in_the_line_that_fetches(tmp_path: Path) -> None:
    """kernprof of ``it = iter(train_loader)`` then ``for step in range(steps): batch =
    next(it)`` (4 ms of 5 ms per pass in next(it)), its source shown: the range() header
    fetches nothing, so the DataLoader wait is the next(it) line's time, about 80% of the
    loop, and the run is loader-bound. The header had been taken for the DataLoader loop by
    the function's name, its own time (~0%) the wait, and the run compute-bound."""
    lines, loop, run = counted_run(tmp_path, SHOWN_ITERATOR, shown=True, times=COUNTED_TIMES)
    header, fetch = (line_of(SHOWN_ITERATOR, "for step in"),
                     line_of(SHOWN_ITERATOR, "batch = next(it)"))
    assert (lines[header]["hits"], lines[fetch]["hits"]) == (11, 10)
    m = run.metrics
    # next(it)'s 40 ms of the loop's 50 ms (COUNTED_TIMES): 0.8.
    assert m.dataloader_fraction == pytest.approx(0.8, rel=1e-9)
    assert run.verdict == "loader-bound"
    assert (m.loop_line.lineno, m.loop_line.source, m.loop_line.time_ns) == (
        fetch, "        batch = next(it)", 40_000_000)
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [fetch]
    assert (m.steps.count, m.steps.mean_ns) == (10, 5_000_000)  # 50 ms over 10 passes
    assert (loop.time_ns, loop.body_ns) == (20_000, 49_980_000)
    assert (loop.lineno, loop.iterations, loop.evidence, loop.counts_passes) == (
        header, 10, "name", True)
    assert (loop.dataloader, loop.confidence, loop.wait_lineno) == (True, "high", fetch)
    assert (loop.fetch_from, loop.fetch_origin) == ("it", "iter(train_loader)")
    assert m.loop_identification.reason == (
        f"counted.py:{header} only counts the passes (a header over range() or a literal, or "
        f"a while whose test calls nothing, fetches nothing); counted.py:{fetch} fetches each "
        "batch with next(it) from a "
        "DataLoader, it = iter(train_loader) (only a name says it holds a DataLoader: no "
        "line shown assigns that name (a parameter, an attribute), or the one shown calls a "
        "function whose result the source does not show): that line's time is the DataLoader "
        "wait")


def test_a_loop_over_range_fetching_from_an_unseen_iterator_has_an_unknown_wait(
        tmp_path: Path) -> None:
    """The same loop with ``it`` a parameter: nothing shown says what next(it) fetches from,
    so the loop's 10 passes are the steps but the DataLoader share is unknown, and so is the
    verdict, saying why; it had been 0.05% (the range() header's time) and compute-bound."""
    lines, loop, run = counted_run(tmp_path, HIDDEN_ITERATOR, shown=True,
                                   times=COUNTED_TIMES)
    header, fetch = (line_of(HIDDEN_ITERATOR, "for step in"),
                     line_of(HIDDEN_ITERATOR, "batch = next(it)"))
    m = run.metrics
    assert (m.dataloader_fraction, m.dataloader_fraction_by_origin, m.loop_line) == (
        None, {}, None)
    assert run.verdict == "unknown"
    assert not any(row["is_dataloader_loop"] for row in lines.values())
    assert m.steps.count == 10
    assert (loop.lineno, loop.counts_passes, loop.dataloader, loop.confidence) == (
        header, True, True, "medium")
    assert (loop.wait_lineno, loop.fetch_lineno, loop.fetch_origin) == (None, fetch, None)
    unknown = (f"counted.py:{fetch} fetches each batch with next(it), but no line shown before "
               "the loop says what it iterates over, so the DataLoader's share of the step is "
               "unknown")
    assert m.loop_identification.dataloader_unknown == unknown
    assert (run.verdict, run.verdict_reason) == (
        "unknown", f"steps were found but no source could split the step time: {unknown}")


def test_a_loop_over_range_without_its_source_is_found_from_hit_counts(tmp_path: Path) -> None:
    """The same .lprof with its script out of reach: nothing shows that the header counts
    passes, so the hit counts judge it as before (11 hits for 10 passes, a function named
    train): the header is the DataLoader line, its time the wait (low confidence)."""
    lines, loop, run = counted_run(tmp_path, SHOWN_ITERATOR, shown=False, times=COUNTED_TIMES)
    header = line_of(SHOWN_ITERATOR, "for step in")
    assert all(row["source"] is None for row in lines.values())
    assert (loop.lineno, loop.evidence, loop.source_shown, loop.counts_passes) == (
        header, "hit counts", False, False)
    assert (loop.dataloader, loop.confidence, loop.wait_lineno) == (True, "low", header)
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [header]
    # The header's 20 µs of the loop's 50 ms (COUNTED_TIMES): 0.0004, the wait misread.
    assert run.metrics.dataloader_fraction == pytest.approx(0.0004, rel=1e-9)
    assert run.metrics.loop_identification.reason.startswith(
        f"source not shown: counted.py:{header} taken for the DataLoader loop from hit counts")


# 8 batches, 3 ms each.
BATCHES_CLASS = """\
import time


class Loader:
    def __iter__(self):
        for index in range(8):
            time.sleep(0.003)
            yield index, index + 1

"""
EPOCH_SCRIPT = BATCHES_CLASS + """
@profile
def train(train_loader, epochs):
    total = 0
    for epoch in range(epochs):
        for x, y in train_loader:
            time.sleep(0.001)
            total += x * y
    return total


train(Loader(), 2)
"""
# The times of a loop over BATCHES_CLASS's 16 batches (2 epochs of 8) as a run sleeping exactly
# as told would record them: the header 48 ms (16 x 3 ms), the work 15.99 ms and 10 µs. The loop
# is 48_000_000 + 15_990_000 + 10_000 = 64_000_000 ns, 4 ms a pass; the epoch loop's header 2 µs.
BATCHES_TIMES = {"for epoch in": 2_000, "for x, y in": 48_000_000,
                 "time.sleep(0.001)": 15_990_000, "total += x * y": 10_000}


def test_a_loop_over_a_loader_inside_a_range_loop_is_unchanged(tmp_path: Path) -> None:
    """kernprof of ``for epoch in range(2): for x, y in train_loader:``, its source shown: the
    loop over the DataLoader is the training loop, its header's time the wait (3 ms of 4 ms a
    pass); the range() loop around it is no DataLoader loop."""
    lines, loop, run = counted_run(tmp_path, EPOCH_SCRIPT, shown=True, times=BATCHES_TIMES)
    inner = line_of(EPOCH_SCRIPT, "for x, y in")
    assert (loop.lineno, loop.iterations, loop.entries) == (inner, 16, 2)
    assert (loop.evidence, loop.counts_passes, loop.wait_lineno) == ("name", False, inner)
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [inner]
    assert (loop.time_ns, loop.body_ns) == (48_000_000, 16_000_000)
    # The header's 48 ms of the loop's 64 ms (BATCHES_TIMES): 0.75.
    assert run.metrics.dataloader_fraction == pytest.approx(0.75, rel=1e-9)
    assert run.metrics.loop_line.lineno == inner
    assert run.metrics.loop_identification.reason == (  # train_loader: a parameter
        f"counted.py:{inner} iterates over train_loader: only a name says it holds a "
        "DataLoader: no line shown assigns that name (a parameter, an attribute), or the one "
        "shown calls a function whose result the source does not show")


EPOCHS_AROUND_SCRIPT = BATCHES_CLASS + """
class Trainer:
    def __init__(self, dl):
        self.dl = dl

    @profile
    def fit(self, epochs):
        total = 0
        for epoch in range(epochs):
            seen = 0
            for x, y in self.dl:
                time.sleep(0.001)
                total += x * y
        return total


Trainer(Loader()).fit(2)
"""


def test_a_loop_inside_a_range_loop_is_the_training_loop(tmp_path: Path) -> None:
    """kernprof of ``for epoch in range(2): seen = 0; for x, y in self.dl:`` (8 batches of
    3 ms, 1 ms of work each), its source shown: the epoch loop's hit counts make it a loop
    header too, and it holds the most time, but it only counts passes around the loop over
    self.dl, which fetches the batches: that loop is the training loop (16 passes, its
    header's time the wait, about 75%: loader-bound). The epoch loop had been taken, its 2
    passes the steps and its DataLoader share unknown."""
    lines, loop, run = counted_run(tmp_path, EPOCHS_AROUND_SCRIPT, shown=True,
                                   times=BATCHES_TIMES)
    outer, inner = (line_of(EPOCHS_AROUND_SCRIPT, "for epoch in"),
                    line_of(EPOCHS_AROUND_SCRIPT, "for x, y in"))
    assert lines[outer]["is_loop_header"] and lines[inner]["is_loop_header"]
    m = run.metrics
    assert (m.steps.count, m.steps.mean_ns) == (16, 4_000_000)  # 64 ms over 16 passes
    # The inner header's 48 ms of its loop's 64 ms (BATCHES_TIMES): 0.75.
    assert m.dataloader_fraction == pytest.approx(0.75, rel=1e-9)
    assert run.verdict == "loader-bound"
    assert (loop.lineno, loop.iterations, loop.entries, loop.evidence) == (
        inner, 16, 2, "hit counts")
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [inner]


# Loops whose ``while`` header tests no call, fetching the 8 batches in their body from an
# iterator of the DataLoader shown before the loop (1 ms of work each).
WHILE_SCRIPT = BATCHES_CLASS + """
@profile
def train(train_loader):
    total = 0
    it = iter(train_loader)
    step = 0
{loop}
    return total


train(Loader())
"""
WHILE_LOOPS = {
    "while True": ("    while True:\n        try:\n            x, y = next(it)\n"
                   "        except StopIteration:\n            break\n"
                   "        time.sleep(0.001)\n        total += x * y"),
    "while step < 8": ("    while step < 8:\n        x, y = next(it)\n"
                       "        time.sleep(0.001)\n        total += x * y\n        step += 1"),
}
# Their times as a run sleeping exactly as told would record them: next(it) 24 ms (8 x 3 ms),
# the work 7.976 ms, and 8 µs for each other line of the loop, which is 32 ms either way:
# while True: 8_000 (header) + 8_000 (try) + 24_000_000 + 7_976_000 + 8_000 (total +=);
# while step < 8: 8_000 (header) + 24_000_000 + 7_976_000 + 8_000 (total +=) + 8_000 (step += 1).
WHILE_FETCH = {"x, y = next(it)": 24_000_000, "time.sleep(0.001)": 7_976_000,
               "total += x * y": 8_000, "    while ": 8_000}
WHILE_TIMES = {"while True": WHILE_FETCH | {"try:": 8_000},
               "while step < 8": WHILE_FETCH | {"step += 1": 8_000}}


@pytest.mark.parametrize("kind", sorted(WHILE_LOOPS))
def test_a_while_loop_that_calls_nothing_waits_in_the_line_that_fetches(
        tmp_path: Path, kind: str) -> None:
    """kernprof of ``while True: try: x, y = next(it) except StopIteration: break ...`` and
    of ``while step < 8: x, y = next(it)``, ``it = iter(train_loader)`` shown before: the while
    header tests no call, so it fetches nothing, and the DataLoader wait is the next(it) line's,
    about 75%: loader-bound. The header had been the DataLoader line by the function's name,
    its ~0% the wait, and the run compute-bound; in the first, the line after ``break`` (its
    counts those of a header: 1 hit before it) had been a loop inside the while loop."""
    code = WHILE_SCRIPT.format(loop=WHILE_LOOPS[kind])
    lines, loop, run = counted_run(tmp_path, code, shown=True, times=WHILE_TIMES[kind])
    fetch = line_of(code, "x, y = next(it)")
    # next(it)'s 24 ms of the loop's 32 ms (WHILE_TIMES): 0.75; the except and break lines
    # (1 µs each, run once) are no part of the loop's passes.
    assert run.metrics.dataloader_fraction == pytest.approx(0.75, rel=1e-9)
    assert run.metrics.steps.count == 8
    assert run.verdict == "loader-bound"
    assert (loop.lineno, loop.counts_passes, loop.wait_lineno) == (
        line_of(code, "    while "), True, fetch)
    assert [n for n, row in lines.items() if row["is_dataloader_loop"]] == [fetch]


def test_a_line_profile_of_no_line_says_so_beside_other_profiles(tmp_path: Path) -> None:
    """kernprof -l of a script whose loop sits at module level times no line: alone it is
    'nothing to analyse' and why; beside a trace of the same run, a note says so instead of
    the line profile vanishing without a word."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    sys.path.insert(0, str(Path(__file__).parent))
    from conftest import cpu_event, kineto_trace

    empty = stats_file(tmp_path / "train.lprof", {("train.py", 1, "train"): []})
    assert lprof.parse(empty).meta.empty == lprof.NO_LINES
    alone = analyze_paths([empty], AnalyzeOptions()).runs[0]
    assert (alone.verdict, alone.verdict_reason) == ("unknown", lprof.NO_LINES)
    kineto_trace(tmp_path / "t.pt.trace.json",
                 [cpu_event(f"ProfilerStep#{n}", 1000 * n, 900, cat="user_annotation")
                  for n in range(4)])
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert f"train.lprof: {lprof.NO_LINES}" in run.notes
    assert not any(note.startswith("t.pt.trace.json: nothing") for note in run.notes)


def test_a_loop_over_a_name_assigned_a_dataloader_is_the_dataloader_loop(tmp_path: Path
                                                                         ) -> None:
    """``dl = DataLoader(...)`` then ``for x, y in dl:`` in one profiled function (timings as
    kernprof recorded a real run: the header 14.2 ms over 64 passes, the body 13.1 ms): the
    source shows the loop iterating over a DataLoader, so it is the DataLoader loop with high
    confidence. It was taken 'from hit counts alone' ('the line shown names no DataLoader',
    confidence low), and not at all where the header took less time than the body."""
    source = ("def loop():\n"
              "    dl = DataLoader(TensorDataset(x, y), batch_size=8)\n"
              "    for i, (x, y) in enumerate(dl):\n"
              "        train_step(model, opt, x, y)\n")
    for header_ns, body_ns in ((14_199_900, 13_124_300), (5_614_400, 8_705_200)):
        path, loop = profiled_beside(tmp_path / "multi.py", source,
                                     [(2, 1, 474_500), (3, 65, header_ns), (4, 64, body_ns)],
                                     "loop", 1)
        assert (loop.lineno, loop.evidence, loop.dataloader, loop.confidence) == (
            3, "source", True, "high")
        assert (loop.iterations, loop.wait_ns) == (64, header_ns)
    loader = {"dl": "DataLoader(TensorDataset(x, y), batch_size=8)"}.get
    assert pysource.is_dataloader_loop_line("    for i, (x, y) in enumerate(dl):", loader)
    assert not pysource.is_dataloader_loop_line("    x = 1", loader)


@pytest.mark.parametrize("assign", ["cfg = yaml.load(open('aug.yaml'), Loader=yaml.SafeLoader)",
                                    "cfg = my_loader_config('aug.yaml')"])
def test_a_loop_over_a_name_assigned_no_dataloader_is_not_the_dataloader_loop(
        tmp_path: Path, assign: str) -> None:
    """``for x, y in batches:`` (64 passes, 90 ms, the header 60 ms), then ``cfg =
    yaml.load(f, Loader=yaml.SafeLoader)`` (or ``my_loader_config(...)``) and ``for key in
    cfg:`` (4 passes, 43 ms): the word 'Loader' in the assigned expression made the config
    loop the DataLoader loop by its source (high confidence, its 4 passes the steps). Its
    syntax shows no DataLoader, so the training loop is the loop over batches, found by its hit
    counts."""
    source = ("def fit(model, batches):\n    for x, y in batches:\n"
              f"        step(model, x, y)\n    {assign}\n    for key in cfg:\n"
              "        model.register(key, cfg[key])\n")
    path, loop = profiled_beside(tmp_path / "cfg.py", source,
                                 [(2, 65, 60_000_000), (3, 64, 30_000_000), (4, 1, 200_000),
                                  (5, 5, 3_000_000), (6, 4, 40_000_000)], "fit", 1)
    assert (loop.lineno, loop.evidence, loop.iterations, loop.confidence) == (
        2, "hit counts", 64, "medium")
    assert (loop.dataloader, loop.wait_ns) == (True, 60_000_000)
    assert not by_line(lprof.parse(path))[5]["is_dataloader_loop"]


def test_a_loop_over_a_dataloader_in_a_file_that_does_not_parse_whole(tmp_path: Path) -> None:
    """``dl = DataLoader(...)`` then ``for x, y in dl:``, in a file whose other function is
    Python 2 (``print "done"``: the file does not parse whole, so no scope is known), with the
    timings of the real run above: the lines of the loop's function shown before it are read
    one by one, as they were for a counting loop's iterator (the second of two lookups), so
    the loop is the DataLoader loop (high). It was taken from hit counts alone (low)."""
    source = ("def loop():\n"
              "    dl = DataLoader(TensorDataset(x, y), batch_size=8)\n"
              "    for i, (x, y) in enumerate(dl):\n"
              "        train_step(model, opt, x, y)\n"
              "\n\ndef done():\n"
              "    print \"done\"\n")
    path, loop = profiled_beside(tmp_path / "py2.py", source,
                                 [(2, 1, 474_500), (3, 65, 14_199_900), (4, 64, 13_124_300)],
                                 "loop", 1)
    assert (loop.lineno, loop.evidence, loop.dataloader, loop.confidence) == (
        3, "source", True, "high")
    assert not pysource.SourceScopes(source.splitlines()).parsed


def test_a_loop_header_written_over_two_lines_is_read_whole(tmp_path: Path) -> None:
    """``for i, (x, y) in enumerate(train_loader,`` then ``start=1):`` opening its function
    (65 header hits, 60 ms; 64 passes): its first line alone is no statement, so reading the
    line by itself found no loop at all (no line before it to count entries, no loop shown),
    where the word test before 5301a87 had taken it (high). The header is read whole from the
    parsed file: the DataLoader loop by its source, its header's 60 ms the wait."""
    header = ("    for i, (x, y) in enumerate(train_loader,  # the batches\n"
              + " " * 31 + "start=1):")
    source = "\n".join(["def fit(model, train_loader, log):", header, "        step(model, x, y)",
                        "    for key in log:", "        model.register(key, log[key])", ""])
    timings = [(2, 65, 60_000_000), (4, 64, 30_000_000), (5, 5, 3_000_000), (6, 4, 40_000_000)]
    path, loop = profiled_beside(tmp_path / "wrapped.py", source, timings, "fit", 1)
    assert loop is not None
    assert (loop.lineno, loop.evidence, loop.iterations, loop.confidence) == (
        2, "name", 64, "high")
    assert (loop.dataloader, loop.wait_ns) == (True, 60_000_000)
    line = by_line(lprof.parse(path))[2]
    assert line["is_dataloader_loop"] and line["source"].endswith("# the batches")


def test_the_summary_names_a_top_line_whose_source_is_not_shown(tmp_path: Path) -> None:
    """The terminal summary's top line ended 'of train: ' with nothing after it when the
    script had moved away from the .lprof; it now says the source is not shown."""
    from profreport.commands import _summary_lines
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    path = stats_file(tmp_path / "train.lprof", one_function("/gone/train.py"))
    summary = _summary_lines(analyze_paths([path], AnalyzeOptions()).runs[0])
    assert "  top line: train.py:3 93% of train (source not shown)" in summary


NESTED_SOURCE = """\
def main():
    dl = DataLoader(TensorDataset(x, y), batch_size=8)

    @profile
    def run():
        total = 0.0
        for x, y in dl:
            total += step(x, y).item()
        return total

    run()


def other():
    dl = [1, 2]
"""


def test_a_loop_over_a_dataloader_of_an_enclosing_scope_is_the_dataloader_loop(
        tmp_path: Path) -> None:
    """kernprof of a nested ``run()`` looping over ``dl``, which its enclosing ``main()``
    assigns a DataLoader (timings as recorded from a real run: the header 5.6 ms over 64
    passes, its body 8.7 ms, more than the header): the loop was not taken at all (verdict
    unknown, 'no step markers'); the enclosing scope shows it is the DataLoader loop."""
    path, loop = profiled_beside(tmp_path / "nested.py", NESTED_SOURCE,
                                 [(6, 1, 500), (7, 65, 5_614_400), (8, 64, 8_705_200),
                                  (9, 1, 100)], "main.<locals>.run", 4)
    assert (loop.lineno, loop.evidence, loop.confidence, loop.iterations) == (
        7, "source", "high", 64)
    scopes = pysource.SourceScopes(NESTED_SOURCE.splitlines())
    assert scopes.enclosing_assignment(4, "dl") == "DataLoader(TensorDataset(x, y), batch_size=8)"
    assert scopes.enclosing_assignment(14, "dl") is None  # other() is module-level
    assert pysource.SourceScopes(["def f(:"]).enclosing_assignment(1, "dl") is None


def test_a_line_reading_a_tensor_is_no_sync_point_on_a_run_without_a_gpu(tmp_path: Path
                                                                          ) -> None:
    """``total += loss.item()`` in a run whose manifest records no CUDA (the runner's
    environment on a CPU-only machine) waits for no GPU: it was marked 'sync point (waits for
    the GPU work queued before it)' there; without a manifest saying so it still is."""
    from profreport.manifest import MANIFEST_SCHEMA
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    source = "def train(loader):\n    for x in loader:\n        total += step(x).item()\n"
    run = tmp_path / "run"
    run.mkdir()
    profiled_beside(run / "train.py", source, [(2, 11, 5_000), (3, 10, 90_000)], "train", 1)
    assert analyze_paths([run], AnalyzeOptions()).runs[0].metrics.lines[0].is_sync_point
    (run / "manifest.json").write_text(json.dumps({
        "schema": MANIFEST_SCHEMA, "name": "run", "workload": "hand-built",
        "environment": {"cuda": None, "torch": "2.13.0+cpu"},
        "artifacts": [{"path": "train.py.lprof", "profiler": "kernprof"}]}))
    top = analyze_paths([run], AnalyzeOptions()).runs[0].metrics.lines[0]
    assert (top.lineno, top.is_sync_point) == (3, False)


def test_a_line_profile_without_a_training_loop_says_so(tmp_path: Path) -> None:
    """kernprof of a script whose @profile is on its step function alone (the loop calling it
    at module level, as a real script had it): no line is a loop, so the verdict is unknown;
    its reason listed 'no step markers (ProfilerStep, NVTX 'step N', ...) and no GPU activity',
    nothing a line profile records; it now says what was timed and what to decorate."""
    path = stats_file(tmp_path / "stepfn.lprof", {("stepfn.py", 8, "train_step"): [
        (10, 16, 1_100_000), (11, 16, 2_600_000), (12, 16, 2_400_000), (13, 16, 1_200_000),
        (14, 16, 5_000)]})
    run = analyze_paths_of(path)
    assert run.verdict == "unknown" and run.verdict_reason == (
        "the line profile shows no training loop: none of the lines it timed is a loop known to "
        "fetch the batches (kernprof timed train_step(); decorate the function that holds the "
        "training loop)")


#: A real trainer's method whose first line is its loop, over an attribute (``self.dl``); its
#: ``@profile`` on line 11, as kernprof recorded it.
TRAINER_SOURCE = ("import torch\n" + "\n" * 8 + "class Trainer:\n    @profile\n"
                  "    def train_epoch(self):\n"
                  "        for batch_idx, (x, y) in enumerate(self.dl):\n"
                  "            self.opt.zero_grad()\n            out = self.model(x)\n"
                  "            loss = self.lossf(out, y)\n            loss.backward()\n"
                  "            self.opt.step()\n")
#: kernprof's lines of that method: 66 hits of its loop for 2 calls of 32 batches.
TRAINER_LINES = [(13, 66, 837_004_700), (14, 64, 10_400_300), (15, 64, 28_201_700),
                 (16, 64, 10_167_200), (17, 64, 41_706_900), (18, 64, 30_636_200)]


def test_a_loop_opening_its_function_without_its_source_asks_for_the_source(
        tmp_path: Path) -> None:
    """kernprof of a real trainer's method whose first line is its loop (``for batch_idx, (x,
    y) in enumerate(self.dl):``, 66 hits for 2 calls of 32 batches), the source not beside the
    .lprof: no line before the loop counts its entries, so hit counts find none, and the
    verdict told the user to 'decorate the function that holds the training loop', the one
    they had decorated. It now says the function may open with a loop, which its source would
    show, and how to pass the source; with the source beside, the loop is found."""
    lines = TRAINER_LINES
    timings = {("method.py", 11, "Trainer.train_epoch"): lines}
    run = analyze_paths_of(stats_file(tmp_path / "alone" / "method.lprof", timings))
    assert run.verdict == "unknown" and run.verdict_reason == (
        "the line profile shows no training loop: none of the lines it timed is a loop known to "
        "fetch the batches; Trainer.train_epoch() may open with one (its first line runs more "
        "often than the next), which only its source line shows, as no line before it counts "
        "its entries, and its source is not shown (put the .py file beside the .lprof or pass "
        "--source-root)")
    (tmp_path / "beside").mkdir()
    path, loop = profiled_beside(tmp_path / "beside" / "method.py", TRAINER_SOURCE, lines,
                                 "Trainer.train_epoch", 11)
    assert loop is not None and (loop.lineno, loop.steps) == (13, 64)
    assert analyze_paths_of(path).verdict == "loader-bound"


def _edited_beside(run: Path) -> str:
    """The trainer's script beside the .lprof, two blank lines above its class gone since it
    was profiled (its last line, 18, is now 16); the name kernprof recorded."""
    (run / "method.py").write_text(TRAINER_SOURCE.replace("\n\n\n", "\n", 1))
    return "method.py"


def _linked_beside(run: Path) -> str:
    """The trainer's script beside the .lprof, a link to the one profiled outside its folder."""
    (run.parent / "elsewhere").mkdir()
    (run.parent / "elsewhere" / "method.py").write_text(TRAINER_SOURCE)
    (run / "method.py").symlink_to(run.parent / "elsewhere" / "method.py")
    return "method.py"


def _folder_beside(run: Path) -> str:
    """A folder beside the .lprof named as the trainer's script."""
    (run / "method.py").mkdir()
    return "method.py"


@pytest.mark.parametrize(("make", "kind", "advice"), [
    (lambda run: "method.py", "absent",
     "its source is not shown (put the .py file beside the .lprof or pass --source-root)"),
    (_edited_beside, "edited",
     "its source was edited since profiling (it no longer matches the profile: "
     "line 18 is recorded but the file has 16 lines): profile it again to see its lines"),
    (_linked_beside, "outside",
     "its source lies outside the folders sources are read from (it lies outside {run} "
     "(through a symbolic link)): pass --source-root the folder that holds it"),
    (_folder_beside, "refused", "its source may not be shown (not a regular file)"),
    (lambda run: "<string>", "nameless", "its source is not shown (the profile names no file)"),
])
def test_a_hidden_source_is_asked_for_by_why_it_is_hidden(
        tmp_path: Path, make: Callable[[Path], str], kind: str, advice: str) -> None:
    """The trainer's method that opens with its loop (no line before it counts its entries),
    its source not shown: the verdict asks for the source by why it is not shown. With the
    script beside the .lprof but edited since profiling, or a link out of the folders sources
    are read from, it said 'put the .py file beside the .lprof', where the file already was;
    the listing carries the reason the parser gave."""
    run = tmp_path / "run"
    run.mkdir()
    recorded = make(run)
    result = analyze_paths_of(stats_file(run / "method.lprof", {
        (recorded, 11, "Trainer.train_epoch"): TRAINER_LINES}))
    (listing,) = result.metrics.listings
    assert listing.source_hidden is not None and listing.source_hidden.kind == kind
    assert result.verdict == "unknown" and result.verdict_reason == (
        "the line profile shows no training loop: none of the lines it timed is a loop known to "
        "fetch the batches; Trainer.train_epoch() may open with one (its first line runs more "
        "often than the next), which only its source line shows, as no line before it counts "
        "its entries, and " + advice.format(run=os.path.realpath(run)))


def test_hidden_sources_are_asked_for_by_each_reason(tmp_path: Path) -> None:
    """Two functions that may open with a loop, one's script beside the .lprof edited since
    profiling and the other's absent: the verdict asks for each source by its own reason."""
    run = tmp_path / "run"
    run.mkdir()
    ms = 10**6
    result = analyze_paths_of(stats_file(run / "method.lprof", {
        (_edited_beside(run), 11, "Trainer.train_epoch"): TRAINER_LINES,
        ("gone.py", 1, "fit"): [(2, 11, 5 * ms), (3, 10, ms)]}))
    assert [f.source_hidden.kind for f in result.metrics.listings] == ["edited", "absent"]
    assert result.verdict_reason.endswith(
        "Trainer.train_epoch(), fit() may open with one (its first line runs more often than "
        "the next), which only its source line shows, as no line before it counts its entries, "
        "and for Trainer.train_epoch(), its source was edited since profiling (it no longer "
        "matches the profile: line 18 is recorded but the file has 16 lines): profile it again "
        "to see its lines; for fit(), its source is not shown (put the .py file beside the "
        ".lprof or pass --source-root)")


def _listing_html(page: str, function: str) -> str:
    """The HTML of the annotated listing of ``function`` in a rendered report."""
    return next(part.split("</table>")[0] for part in page.split('<div class="listing">')[1:]
                if f"Function: {function} at line" in part)


def test_each_listing_says_why_its_source_is_hidden(tmp_path: Path) -> None:
    """Two functions of one .lprof whose sources are hidden, one's script absent and the
    other's a link out of the run folder (named with markup): each listing of the HTML report
    says why its own source is not shown, the reason escaped; only the notes said it."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.render.html import render_html

    run = tmp_path / "r<i>n"
    run.mkdir()
    ms = 10**6
    page = render_html(analyze_paths([stats_file(run / "method.lprof", {
        (_linked_beside(run), 11, "Trainer.train_epoch"): TRAINER_LINES,
        ("gone.py", 1, "fit"): [(2, 11, 5 * ms), (3, 10, ms)]})], AnalyzeOptions()))
    assert "Source not shown: not found beside the .lprof (pass --source-root)" in \
        _listing_html(page, "fit")
    linked = _listing_html(page, "Trainer.train_epoch")
    assert (f"Source not shown: it lies outside {html_escape(os.path.realpath(run))} (through "
            "a symbolic link)") in linked
    assert "r&lt;i&gt;n" in linked and "<i>" not in page


def test_a_function_two_files_hide_apart_is_listed_once_per_file(tmp_path: Path) -> None:
    """A run whose manifest lists two .lprof files read whole (rank 0's, and one that records
    no rank) timing one function that opens with its loop, its script beside neither in one and
    edited since profiling beside the other: two measurements, so one listing per file, each
    naming its file (folder and name: both are method.lprof), each line once, its shares its
    own, and its own reason. They were one listing holding each line twice (13, 13, 14, ...),
    so the first two rows had equal hits and the verdict no longer said that the function may
    open with a loop; the advice now names the function once, with both reasons."""
    from profreport.manifest import MANIFEST_SCHEMA
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.render.html import render_html

    run = tmp_path / "run"
    timings = {("method.py", 11, "Trainer.train_epoch"): TRAINER_LINES}
    for part in ("first", "second"):
        stats_file(run / part / "method.lprof", timings)
    _edited_beside(run / "second")
    (run / "manifest.json").write_text(json.dumps({
        "schema": MANIFEST_SCHEMA, "name": "run", "workload": "hand-built",
        "artifacts": [{"path": "first/method.lprof", "profiler": "kernprof", "rank": 0},
                      {"path": "second/method.lprof", "profiler": "kernprof"}]}))
    report = analyze_paths([run], AnalyzeOptions())
    result = report.runs[0]
    listings = result.metrics.listings
    assert [(f.profile, f.function) for f in listings] == [
        ("first/method.lprof", "Trainer.train_epoch"),
        ("second/method.lprof", "Trainer.train_epoch")]
    for listing in listings:
        assert [line.lineno for line in listing.lines] == [13, 14, 15, 16, 17, 18]
        assert {line.profile for line in listing.lines} == {listing.profile}
        assert sum(line.share for line in listing.lines) == pytest.approx(1.0)
    assert [(f.source_hidden.kind, f.source_hidden.reason) for f in listings] == [
        ("absent", "not found beside the .lprof (pass --source-root)"),
        ("edited", "it no longer matches the profile: line 18 is recorded but the file has 16 "
                   "lines")]
    assert result.verdict == "unknown" and result.verdict_reason.endswith(
        "; Trainer.train_epoch() may open with one (its first line runs more often than the "
        "next), which only its source line shows, as no line before it counts its entries, "
        "and its source is not shown (put the .py file beside the .lprof or pass "
        "--source-root) and its source was edited since profiling (it no longer matches the "
        "profile: line 18 is recorded but the file has 16 lines): profile it again to see its "
        "lines")
    page = render_html(report)
    first, second = (part for part in page.split('<div class="listing">')[1:])
    assert "Profile: first/method.lprof" in first and "Profile: second/method.lprof" in second
    assert "Source not shown: not found beside the .lprof (pass --source-root)</p>" in first
    assert ("Source not shown: it no longer matches the profile: line 18 is recorded but the "
            "file has 16 lines</p>") in second


def test_two_line_profiles_of_one_rank_are_listed_and_ranked_apart(tmp_path: Path) -> None:
    """A manifest listing two .lprof files that both record rank 0 (a run profiled twice), each
    timing one function, equal times on line 4: each file has its own listing (its lines in
    order, once), named by its file; the slowest lines name the file each row comes from, in
    a fixed order (the manifest's where times tie), and so does the Markdown table. They had
    been one listing of every line twice, in no fixed order."""
    from profreport.manifest import MANIFEST_SCHEMA
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.render.markdown import render_markdown

    run = tmp_path / "run"
    for name, header in (("first", 3_000_000), ("again", 1_000_000)):
        stats_file(run / f"{name}.lprof",
                   {("gone.py", 1, "train"): [(2, 1, 10), (3, 11, header), (4, 10, 9_000_000)]})
    (run / "manifest.json").write_text(json.dumps({
        "schema": MANIFEST_SCHEMA, "name": "run", "workload": "hand-built",
        "artifacts": [{"path": f"{name}.lprof", "profiler": "kernprof", "rank": 0}
                      for name in ("first", "again")]}))
    report = analyze_paths([run], AnalyzeOptions())
    metrics = report.runs[0].metrics
    assert [(f.profile, [line.lineno for line in f.lines], f.total_ns)
            for f in metrics.listings] == [("first.lprof", [2, 3, 4], 12_000_010),
                                           ("again.lprof", [2, 3, 4], 10_000_010)]
    assert [(line.profile, line.lineno) for line in metrics.lines] == [
        ("first.lprof", 4), ("again.lprof", 4), ("first.lprof", 3), ("again.lprof", 3),
        ("first.lprof", 2), ("again.lprof", 2)]
    markdown = render_markdown(report)
    assert "| gone.py:4 (train) in first.lprof |" in markdown
    assert "| gone.py:4 (train) in again.lprof |" in markdown


def analyze_paths_of(path: Path):  # type: ignore[no-untyped-def]
    """The one run ``profreport analyze`` makes of ``path``."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    return analyze_paths([path], AnalyzeOptions()).runs[0]


def test_a_fetch_from_an_iterator_of_a_name_assigned_a_dataloader_is_the_wait(
        tmp_path: Path) -> None:
    """``dl = DataLoader(...)``, ``it = iter(dl)``, then ``for step in range(steps): x, y =
    next(it)`` (timings of a real kernprof run: next(it) 123.8 ms of 129.8 ms over 20 passes):
    the fetch is from a DataLoader, so its line's time is the wait (95%, loader-bound). The
    share was unknown ('it = iter(dl) names no DataLoader') and the verdict unknown."""
    source = ("def fit(steps=20):\n"
              "    dl = DataLoader(Slow(), batch_size=16)\n"
              "    it = iter(dl)\n"
              "    for step in range(steps):\n"
              "        x, y = next(it)\n"
              "        train_step(x, y)\n")
    path, loop = profiled_beside(tmp_path / "ranged.py", source,
                                 [(2, 1, 237_400), (3, 1, 689_800), (4, 21, 6_500),
                                  (5, 20, 123_822_400), (6, 20, 5_946_700)], "fit", 1)
    assert (loop.confidence, loop.wait_lineno, loop.wait_ns) == ("high", 5, 123_822_400)
    assert loop.fetch_origin == "iter(dl), dl = DataLoader(Slow(), batch_size=16)"
    run = analyze_paths_of(path)
    assert run.verdict == "loader-bound"
    assert run.metrics.dataloader_fraction == pytest.approx(123_822_400 / 129_775_600)


def test_a_next_of_what_the_source_shows_is_no_dataloader_fetches_no_batch(
        tmp_path: Path) -> None:
    """``for step in range(steps):`` whose body first takes ``p = next(model.parameters())``
    (the model's device) and then ``x, y = next(it)`` after ``it = iter(loader)`` (the timings
    of the real run above, the parameters' next() 0.4 ms: next(it) 123.8 ms of 130.2 ms over
    20 passes): the first next()
    in the body was taken for the batch fetch, nothing shown said what model.parameters() is a
    DataLoader's, so the share was unknown (verdict unknown). The fetch is the next(it) line,
    its time the wait (95%, loader-bound). With no other next() in the body, the parameters'
    one fetches no batch: the loop is the training loop by its function's name alone (low),
    where it was taken as fetching each batch (medium)."""
    source = ("def fit(model, loader, steps=20):\n"
              "    it = iter(loader)\n"
              "    for step in range(steps):\n"
              "        p = next(model.parameters())\n"
              "        x, y = next(it)\n"
              "        train_step(model, x.to(p.device), y)\n")
    lines = [(2, 1, 689_800), (3, 21, 6_500), (4, 20, 412_300), (5, 20, 123_822_400),
             (6, 20, 5_946_700)]
    path, loop = profiled_beside(tmp_path / "device.py", source, lines, "fit", 1)
    assert (loop.confidence, loop.fetch_lineno, loop.wait_lineno) == ("high", 5, 5)
    assert (loop.fetch_from, loop.fetch_origin, loop.wait_ns) == ("it", "iter(loader)",
                                                                  123_822_400)
    run = analyze_paths_of(path)
    assert run.verdict == "loader-bound"
    assert run.metrics.dataloader_fraction == pytest.approx(123_822_400 / 130_187_900)
    alone = source.replace("        x, y = next(it)\n", "        x, y = it.pop()\n")
    path, loop = profiled_beside(tmp_path / "alone.py", alone, lines, "fit", 1)
    assert (loop.confidence, loop.dataloader, loop.fetch_lineno, loop.wait_lineno) == (
        "low", True, None, None)
    assert pysource.loader_evidence("model.parameters()") is False
    assert pysource.dataloader_origin("iter(lrs)", {"lrs": "[0.1, 0.01]"}.get) == (
        "[0.1, 0.01]", False)
    assert pysource.dataloader_origin("batches", {}.get) == (None, None)


def cpu_growth(read: Callable[[int], object], size: int) -> float:
    """How many times more CPU time ``read(4 * size)`` takes than ``read(size)``: about 4 for
    work linear in the size, 16 for quadratic work. CPU time of this process, so another
    process's load on the machine does not move it as it moves wall time."""
    spent = []
    for scale in (size, 4 * size):
        started = time.process_time()
        read(scale)
        spent.append(time.process_time() - started)
    return spent[1] / max(spent[0], 1e-3)


#: Reading 4x the input may take at most this many times the CPU time: linear work gives about
#: 4 (more with a cold cache), quadratic work 16.
LINEAR_GROWTH_BOUND = 9.0


def test_a_line_profile_of_many_loops_is_read_in_linear_time(tmp_path: Path) -> None:
    """Many loops over as many different names in one profiled function (a hostile submission
    can time that many lines): finding what each loop iterates over read the function and the
    module again per loop and per name (1,500 loops took about 40 s on this machine); the
    file's scopes are now read once (pysource.SourceScopes), so 4x the loops costs about 4x."""

    def read(loops: int) -> None:
        folder = tmp_path / str(loops)
        folder.mkdir()
        source = ["def f():"] + [line for k in range(loops)
                                 for line in (f"    for x{k} in d{k}:", "        pass")]
        (folder / "big.py").write_text("\n".join(source) + "\n")
        timings = {("big.py", 1, "f"): [(2 + 2 * k, 3, 10) for k in range(loops)]
                   + [(3 + 2 * k, 2, 10) for k in range(loops)]}
        lines = lprof.parse(stats_file(folder / "big.lprof", timings)).table("lines")
        assert len(lines) == 2 * loops

    assert cpu_growth(read, 500) < LINEAR_GROWTH_BOUND


def test_a_source_nested_past_the_parser_is_read_as_unparsed(tmp_path: Path) -> None:
    """A shown source whose lines nest deeper than Python's parser or ast.unparse recurse (a
    1,000-term sum in a loop header, a 50,000-term one assigned, a 100,000-deep unary minus in
    a DataLoader call) is a source that does not parse: the .lprof is read, its loop found by
    hit counts. It had refused the whole file ('nested too deeply to analyse')."""
    source = ("def f():\n    dl = " + "1+" * 50_000 + "1\n"
              "    for x in " + "a+" * 1000 + "a:\n        pass\n"
              "    DataLoader(ds, num_workers=" + "-" * 100_000 + "1)\n")
    (tmp_path / "deep.py").write_text(source)
    path = stats_file(tmp_path / "deep.lprof",
                      {("deep.py", 1, "f"): [(2, 1, 10), (3, 3, 10), (4, 2, 10), (5, 1, 10)]})
    profile = lprof.parse(path)
    loop = profile.meta.loop
    assert loop is not None and (loop.lineno, loop.evidence, loop.dataloader) == (
        3, "hit counts", False)
    assert profile.meta.loader_knobs == {} and len(profile.table("lines")) == 4


@pytest.mark.parametrize("assign", ["batches: DataLoader = DataLoader(ds, batch_size=8)",
                                    "(batches := DataLoader(ds, batch_size=8))"])
def test_a_loop_over_a_name_annotated_or_walrus_assigned_a_dataloader(tmp_path: Path,
                                                                      assign: str) -> None:
    """``batches: DataLoader = DataLoader(...)`` (typed code) or ``(batches := ...)`` before
    ``for x, y in batches:`` binds a DataLoader as ``batches = DataLoader(...)`` does: the loop
    is the DataLoader loop by its source, with high confidence. Only plain assignments were
    read, so it was taken from hit counts alone (confidence low)."""
    source = f"def fit():\n    {assign}\n    for x, y in batches:\n        step(x, y)\n"
    path, loop = profiled_beside(tmp_path / "typed.py", source,
                                 [(2, 1, 500), (3, 65, 5_614_400), (4, 64, 8_705_200)], "fit", 1)
    assert (loop.lineno, loop.evidence, loop.dataloader, loop.confidence) == (
        3, "source", True, "high")
    assert pysource.assigned_value("    batches: DataLoader = DataLoader(ds)", "batches") == (
        "DataLoader(ds)")


def test_the_scopes_of_a_large_source_keep_no_syntax_tree() -> None:
    """A shown source of 20,000 assignments (sources up to MAX_SOURCE_BYTES, 8 MiB, are shown):
    SourceScopes kept the file's whole syntax tree and a parent for each of its nodes, about
    45 MB for this one, for as long as the .lprof was read, each shown file's at once; it now
    keeps where each name is bound (under 15 MB) and writes back only what is asked for."""
    import gc
    import tracemalloc

    source = ["def f(dl):"] + [f"    y{k} = x + {k}" for k in range(20_000)] + [
        "    for x in dl:", "        pass", "dl = DataLoader(ds, num_workers=2)"]
    tracemalloc.start()
    try:
        scopes = pysource.SourceScopes(source)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert retained < 15 * 2**20
    assert scopes.assigned(1, 20_002, "y7") == "x + 7"
    assert scopes.enclosing_assignment(1, "dl") == "DataLoader(ds, num_workers=2)"
    assert scopes.loader_calls == [(20_004, {"batch_size": 1, "num_workers": 2,
                                             "pin_memory": False})]


def test_a_line_profile_of_many_functions_with_loops_is_read_in_linear_time(tmp_path: Path
                                                                            ) -> None:
    """Thousands of profiled functions, each with a loop (12,000 make a 550 kB .lprof; a
    hostile submission may send 32 MiB): each loop's body and the lines before it were picked
    by comparing every row of the profile with the loop's function, so the time grew with the
    square of the loops (16,000 took 42 s, 4,000 4.5 s); the function's rows are now a run
    found by bisection, so 4x the functions costs about 4x."""

    def read(functions: int) -> None:
        timings = {("gone.py", 1 + 4 * k, f"f{k}"): [(2 + 4 * k, 1, 10), (3 + 4 * k, 11, 100),
                                                       (4 + 4 * k, 10, 50)]
                   for k in range(functions)}
        loop = lprof.parse(stats_file(tmp_path / f"many{functions}.lprof", timings)).meta.loop
        assert loop is not None and (loop.function, loop.lineno, loop.iterations) == (
            "f0", 3, 10)

    assert cpu_growth(read, 1_500) < LINEAR_GROWTH_BOUND


def test_a_source_with_a_form_feed_is_shown_at_its_own_lines(tmp_path: Path) -> None:
    """A form feed between a script's sections (a page break, as PEP 8 allows) is no newline to
    Python, but str.splitlines split the source there: every later line was read one line off,
    so the source 'no longer matches the profile' (fit() not defined at line 3) and was not
    shown, the DataLoader loop taken from hit counts (confidence low) instead of its source."""
    source = ("import torch\n\x0c\ndef fit():\n    dl = DataLoader(ds, batch_size=8)\n"
              "    for x, y in dl:\n        step(x, y)\n")
    path, loop = profiled_beside(tmp_path / "paged.py", source,
                                 [(4, 1, 500), (5, 65, 5_614_400), (6, 64, 8_705_200)], "fit", 3)
    assert (loop.lineno, loop.evidence, loop.confidence) == (5, "source", "high")
    profile = lprof.parse(path)
    assert profile.meta.notes == []
    assert profile.table("lines")["source"].tolist() == [
        "    dl = DataLoader(ds, batch_size=8)", "    for x, y in dl:", "        step(x, y)"]


def test_a_batch_size_read_from_the_source_is_not_cited_as_the_manifests(
        tmp_path: Path, corpus: Path) -> None:
    """A folder without a manifest: a real ResNet-50 GPU trace beside a line profile whose
    shown source builds ``DataLoader(ds, batch_size=8)``. SMALL_BATCH cited 'batch size 8 per
    device (manifest)', from the manifest, though there is none: the knob came from the
    source; it now says so, with the line profile as the evidence's origin."""
    import shutil

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(corpus / "kineto" / "resnet50_num_workers_0.pt.trace.json.gz", run)
    source = ("def fit():\n    dl = DataLoader(ds, batch_size=8)\n    for x, y in dl:\n"
              "        step(x, y)\n")
    profiled_beside(run / "train.py", source,
                    [(2, 1, 500), (3, 65, 5_614_400), (4, 64, 8_705_200)], "fit", 1)
    analysis = analyze_paths_of(run)
    small = next(f for f in analysis.findings if f.id == "SMALL_BATCH")
    assert [(e.text, e.origin) for e in small.evidence] == [
        ("batch size 8 per device (the source shown)", "lprof")]


def test_a_compute_verdict_from_a_loop_found_by_hit_counts_is_no_surer_than_the_loop(
        tmp_path: Path) -> None:
    """kernprof of ``while True: try: x, y = next(it) except StopIteration: break`` then a
    training pass, its source not beside the .lprof (a real run's lines: 33 passes, the
    ``while True:`` header 9.9 µs in all, ``next(it)`` 364.6 ms). Hit counts take the header
    for the DataLoader loop on the function's name alone (confidence low), and its ~0 time
    made the verdict 'Compute-bound ... 100% of step time. Confidence: high', with nothing
    saying how the loop was found. The verdict is now low, and its evidence says how the loop
    was found and that line 13 outweighs the header."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    lines = [(7, 1, 4_239_030_000), (8, 1, 577_000), (9, 1, 145_000), (10, 1, 100),
             (11, 33, 9_900), (12, 33, 3_700), (13, 33, 364_600_000), (14, 1, 1_500),
             (15, 1, 1_000), (16, 32, 4_088_000), (17, 32, 13_268_000), (18, 32, 13_668_000),
             (19, 32, 19_040_000), (20, 32, 20_600)]
    path = stats_file(tmp_path / "while_next.lprof", {("while_next.py", 5, "train"): lines})
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.metrics.loop_identification.confidence == "low"
    assert (run.verdict, run.verdict_confidence) == ("compute-bound", "low")
    found = next(f for f in run.findings if f.id == "COMPUTE_BOUND")
    assert found.evidence[1].text == (
        "source not shown: while_next.py:11 taken for the DataLoader loop from hit counts alone, "
        "a loop header (33 hits for 33 iterations of its body, left by break); it takes less "
        "time than line 13 of its body (11.4 ms a pass): where that line fetches the batch "
        "(next(it)), the DataLoader wait is its time, not the header's; its function train() is "
        "named as training (confidence low)")


def test_a_for_loop_shown_keeps_its_compute_verdicts_confidence(tmp_path: Path) -> None:
    """kernprof of a real Trainer.train_epoch, its source beside: ``for batch_idx, (x, y) in
    enumerate(self.dl):`` (the line names no DataLoader, so hit counts decide, confidence low)
    takes 1,278.7 ms, less than loss.backward()'s 2,269.2 ms. The header shown is a ``for``,
    which fetches from what it iterates, so no body line is offered as the fetch (it named
    loss.backward()), and the compute-bound verdict keeps its confidence: the wait cannot be
    elsewhere in the loop."""
    lines = [(13, 66, 1_278_701_200), (14, 64, 11_332_900), (15, 64, 1_821_534_200),
             (16, 64, 374_859_600), (17, 64, 2_269_187_800), (18, 64, 196_489_700)]
    path, loop = profiled_beside(tmp_path / "method.py", TRAINER_SOURCE, lines,
                                 "Trainer.train_epoch", 11)
    assert loop.confidence == "low" and loop.source_shown
    run = analyze_paths_of(path)
    assert (run.verdict, run.verdict_confidence) == ("compute-bound", "high")
    found = next(f for f in run.findings if f.id == "COMPUTE_BOUND")
    assert "less time than line" not in found.evidence[1].text


def test_a_loop_over_a_name_is_a_dataloader_loop_by_its_assignment_first(
        tmp_path: Path) -> None:
    """``train_loader = open(path)`` then ``for line in train_loader:`` was a loop over a
    DataLoader because of the name, its header's time the DataLoader wait. The assignment
    shown wins now; a parameter's name still tells, and the report says it was the name."""
    lines = [(2, 1, 10_000), (3, 21, 90_000_000), (4, 20, 10_000_000), (5, 1, 1_000)]
    passed = ("def fit(model, train_loader):\n"
              "    model.train()\n"
              "    for x, y in train_loader:\n"
              "        step(model, x, y)\n"
              "    return 0\n")
    opened = passed.replace("model, train_loader", "model, path").replace(
        "model.train()", "train_loader = open(path)")
    _, loop = profiled_beside(tmp_path / "opened.py", opened, lines, "fit", 1)
    assert (loop.lineno, loop.evidence) == (3, "hit counts")
    path, loop = profiled_beside(tmp_path / "passed.py", passed, lines, "fit", 1)
    assert (loop.evidence, loop.named_by, loop.confidence) == ("name", "train_loader", "high")
    found = analyze_paths_of(path).metrics.loop_identification
    assert (found.evidence, found.reason) == (
        "name", "passed.py:3 iterates over train_loader: only a name says it holds a "
        "DataLoader: no line shown assigns that name (a parameter, an attribute), or the one "
        "shown calls a function whose result the source does not show")
    built = passed.replace("    model.train()\n", "    train_loader = DataLoader(ds)\n")
    _, loop = profiled_beside(tmp_path / "built.py", built, lines, "fit", 1)
    assert (loop.evidence, loop.named_by) == ("source", None)


def test_a_loop_over_a_factory_of_a_module_beside_the_source_reads_that_module(
        tmp_path: Path) -> None:
    """``from data import make_loader``, ``train_loader = make_loader(path)``, then ``for x, y
    in train_loader:``: the call's result was not read, so the loop was a DataLoader loop by
    its name alone (evidence ``name``) whatever data.py returned. data.py beside the profiled
    source is read as text (never run: it would leave ``ran``): returning a DataLoader, the
    evidence is the source; returning a file, no DataLoader loop (hit counts tell). A data.py
    reached through a link leading out of the folders sources are read from is not read."""
    lines = [(4, 1, 10_000), (5, 21, 90_000_000), (6, 20, 10_000_000)]
    source = ("from data import make_loader\n\n"
              "def fit(model, path):\n"
              "    train_loader = make_loader(path)\n"
              "    for x, y in train_loader:\n"
              "        step(model, x, y)\n")
    ran = "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
    for name, returned, evidence in (("built", "DataLoader(path, batch_size=8)", "source"),
                                     ("opened", "open(path)", "hit counts")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.py").write_text(
            f"{ran}\n\ndef make_loader(path):\n    return {returned}\n")
        _, loop = profiled_beside(tmp_path / name / "fit.py", source, lines, "fit", 3)
        assert (loop.lineno, loop.evidence) == (5, evidence), name
        assert not (tmp_path / name / "ran").exists()
    (tmp_path / "linked").mkdir()
    (tmp_path / "linked" / "data.py").symlink_to(tmp_path / "opened" / "data.py")
    _, loop = profiled_beside(tmp_path / "linked" / "fit.py", source, lines, "fit", 3)
    assert (loop.evidence, loop.named_by) == ("name", "train_loader")


def test_the_dataloader_call_of_a_module_a_loader_was_followed_into_gives_the_runs_knobs(
        tmp_path: Path) -> None:
    """``train_loader = make_loader(path)`` with ``make_loader`` imported from data.py beside
    the source, which calls ``DataLoader(path, batch_size=8, num_workers=2, pin_memory=True)``:
    only the shown sources' calls were read, so the run had no DataLoader knobs and the advice
    said the profile does not record num_workers. The call in data.py now gives them, named by
    that file and line in the note; a module no loader was followed into gives none."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    (tmp_path / "data.py").write_text(
        "from torch.utils.data import DataLoader\n\n\ndef make_loader(path):\n"
        "    return DataLoader(path, batch_size=8, num_workers=2, pin_memory=True)\n")
    (tmp_path / "other.py").write_text(
        "from torch.utils.data import DataLoader\n\nL = DataLoader(0, batch_size=64)\n")
    path, loop = profiled_beside(
        tmp_path / "fit.py", "from data import make_loader\nimport other\n\n"
        "def fit(model, path):\n    train_loader = make_loader(path)\n"
        "    for x, y in train_loader:\n        step(model, x, y)\n",
        [(5, 1, 10_000), (6, 61, 30_000_000), (7, 60, 6_000_000)], "fit", 4)
    assert (loop.lineno, loop.evidence) == (6, "source")
    meta = lprof.parse(path).meta
    assert (meta.loader_knobs, meta.loader_calls) == (
        {"batch_size": 8, "num_workers": 2, "pin_memory": True}, "data.py line 5")
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.verdict == "loader-bound"
    assert ("fit.py.lprof: DataLoader knobs read from the DataLoader(...) call its source "
            "shows (data.py line 5; PyTorch's default where the call leaves one out), as no "
            "manifest records them: batch_size=8, num_workers=2, pin_memory=True") in run.notes
    advice = next(f for f in run.findings if f.id == "LOADER_BOUND").recommendation
    assert advice.startswith("Raise DataLoader num_workers from 2 to 18 ")


def test_a_loader_imported_from_a_module_beside_the_source_is_read_there(
        tmp_path: Path) -> None:
    """``from data import train_loader`` then ``for x, y in train_loader:``, data.py beside
    the profiled source binding ``train_loader = DataLoader(ds, batch_size=16, num_workers=4)``
    at module level: the loop was a DataLoader loop by its name alone (evidence ``name``) and
    the run had no knobs. What data.py binds is now read there (never run): the evidence is
    the source and its call gives the knobs; bound to a file, no DataLoader loop."""
    lines = [(5, 61, 30_000_000), (6, 60, 6_000_000)]
    source = ("from data import train_loader\n\n\ndef fit(model):\n"
              "    for x, y in train_loader:\n        step(model, x, y)\n")
    ran = "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
    for name, bound, evidence in (
            ("built", "DataLoader(ds, batch_size=16, num_workers=4)", "source"),
            ("opened", "open('log.txt')", "hit counts")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "data.py").write_text(f"{ran}ds = Folder()\ntrain_loader = {bound}\n")
        path, loop = profiled_beside(tmp_path / name / "fit.py", source, lines, "fit", 4)
        assert (loop.lineno, loop.evidence) == (5, evidence), name
        assert not (tmp_path / name / "ran").exists()
    meta = lprof.parse(tmp_path / "built" / "fit.py.lprof").meta
    assert (meta.loader_knobs, meta.loader_calls) == (
        {"batch_size": 16, "num_workers": 4, "pin_memory": False}, "data.py line 4")


def test_a_loop_over_an_item_of_a_comprehension_of_dataloaders_is_the_dataloader_loop(
        tmp_path: Path) -> None:
    """kernprof of ``loaders = [DataLoader(ds, batch_size=64) for ds in sets]``, then ``for
    dl in loaders: for x, y in dl:`` (2 loaders of 10 batches): the inner loop iterates over a
    DataLoader, its header's time the wait. Neither the ``for`` target nor the comprehension
    was followed, so hit counts alone found it (the line shown names no DataLoader)."""
    source = ("def fit(model, sets):\n"
              "    loaders = [DataLoader(ds, batch_size=64) for ds in sets]\n"
              "    for dl in loaders:\n"
              "        for x, y in dl:\n"
              "            step(model, x, y)\n")
    lines = [(2, 1, 50_000), (3, 3, 20_000), (4, 22, 160_000_000), (5, 20, 40_000_000)]
    path, loop = profiled_beside(tmp_path / "each.py", source, lines, "fit", 1)
    assert (loop.lineno, loop.iterations, loop.entries) == (4, 20, 2)
    assert (loop.evidence, loop.confidence, loop.wait_ns) == ("source", "high", 160_000_000)
    assert analyze_paths_of(path).metrics.dataloader_fraction == pytest.approx(0.8)


def test_an_attribute_a_method_assigns_a_dataloader_is_one_in_another_method(
        tmp_path: Path) -> None:
    """kernprof of the real Trainer.train_epoch above (``for batch_idx, (x, y) in
    enumerate(self.dl):``, 1,278.7 ms over 2 calls of 32 batches), its class's ``__init__``
    assigning ``self.dl = DataLoader(...)``: an attribute was never followed, so hit counts
    alone found the loop (confidence low: the header takes less time than loss.backward()).
    What the class's methods assign it shows a DataLoader: the source decides (high)."""
    lines = [(13, 66, 1_278_701_200), (14, 64, 11_332_900), (15, 64, 1_821_534_200),
             (16, 64, 374_859_600), (17, 64, 2_269_187_800), (18, 64, 196_489_700)]
    source = TRAINER_SOURCE + ("\n    def __init__(self, model, train_set):\n"
                               "        self.model, self.dl = model, None\n"
                               "        self.dl = DataLoader(train_set, batch_size=64)\n")
    path, loop = profiled_beside(tmp_path / "method.py", source, lines,
                                 "Trainer.train_epoch", 11)
    assert (loop.lineno, loop.evidence, loop.confidence) == (13, "source", "high")
    assert analyze_paths_of(path).metrics.dataloader_fraction == pytest.approx(
        1_278_701_200 / 5_952_105_400)
    # Assigned what its method does not show (a parameter): unknown, hit counts decide.
    passed = source.replace("DataLoader(train_set, batch_size=64)", "train_set")
    _, loop = profiled_beside(tmp_path / "passed.py", passed, lines, "Trainer.train_epoch", 11)
    assert (loop.evidence, loop.confidence) == ("hit counts", "low")


def _loop_without_its_script(tmp_path: Path) -> Path:
    """A hand-built .lprof of train() without its script: a loop header hit 7 times for 6
    passes, 2.4 s in all (the batch fetched there), a body of 450 ms and 150 ms lines."""
    ms = 1_000_000
    return stats_file(tmp_path / "train.lprof", {("train.py", 10, "train"): [
        (11, 1, 1 * ms), (12, 7, 2400 * ms), (13, 6, 450 * ms), (14, 6, 150 * ms),
        (15, 1, 1 * ms)]})


def test_the_rest_of_the_loop_is_not_called_compute(tmp_path: Path) -> None:
    """line_profiler times lines: besides the loop line's DataLoader wait (400 ms per step) it
    knows only the rest of the loop (100 ms), which the breakdown showed as 'Compute'. The
    analysis names that part, and the reports show its name, never 'Compute'."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
    from profreport.reports.render.html import render_html
    from profreport.reports.render.markdown import render_markdown

    report = analyze_paths([_loop_without_its_script(tmp_path)], AnalyzeOptions())
    breakdown = report.runs[0].metrics.breakdown
    ms = 1_000_000
    assert (breakdown.parts_ns["dataloader"], breakdown.parts_ns["compute"]) == (400 * ms,
                                                                                100 * ms)
    label = "Rest of the loop (line_profiler cannot tell compute from other work)"
    assert breakdown.label("compute") == label
    markdown = render_markdown(report)
    assert f"| {label.replace('_', chr(92) + '_')} | 100.0 ms |" in markdown
    assert "| Compute |" not in markdown
    assert label in render_html(report)


def test_worker_advice_without_a_worker_count_says_what_it_assumes(tmp_path: Path) -> None:
    """The loop waits 400 ms per step for 100 ms of the rest, and nothing records num_workers.
    The advice read '(at 0, 6 workers would keep up) ... with n workers now it needs about 7.5
    x n': it now says which case each figure is for (1.5 x 400 / 100 = 6 workers loading in
    the main process; 1.5 x 500 / 100 = 7.5 times the workers it has, if it has some)."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    run = analyze_paths([_loop_without_its_script(tmp_path)], AnalyzeOptions()).runs[0]
    advice = next(f for f in run.findings if f.id == "LOADER_BOUND").recommendation
    assert advice.startswith(
        "The profile does not record num_workers: the loop waits 400.0 ms per step for 100.0 ms "
        "of other work, so it needs about 6 workers if it loads batches in the main process "
        "(num_workers=0), or about 7.5 times as many workers as it has if it has some. Raise "
        "num_workers to that where the job has the CPUs, else make each sample cheaper")


def test_a_loop_of_mostly_its_body_is_not_said_to_compute(tmp_path: Path) -> None:
    """A hand-built .lprof whose loop line fetches in 60 ms of 6 passes and whose body takes
    2.94 s: compute-bound by line_profiler's lights, but its evidence said 'compute 98% of the
    step' of what is only the rest of the loop; it now names that part as the breakdown does."""
    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    ms = 1_000_000
    path = stats_file(tmp_path / "train.lprof", {("train.py", 10, "train"): [
        (11, 1, 1 * ms), (12, 7, 60 * ms), (13, 6, 2400 * ms), (14, 6, 540 * ms),
        (15, 1, 1 * ms)]})
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    evidence = next(f for f in run.findings if f.id == "COMPUTE_BOUND").evidence
    assert evidence[0].text == ("Rest of the loop (line_profiler cannot tell compute from other "
                                "work) 98% of 500.0 ms per step")


def test_an_attribute_a_base_class_beside_the_source_assigns_is_read_there(
        tmp_path: Path) -> None:
    """``class Trainer(BaseTrainer)`` looping over ``self.train_dl`` that BaseTrainer's
    ``__init__`` (bases.py beside the source) assigns a DataLoader: only the class's own
    methods were read, so the loop was found from the hit counts (``train_dl`` says nothing)
    and the run had no knobs. The base is now read in its file (never run): the evidence is
    the source and its DataLoader call gives the run's knobs."""
    (tmp_path / "bases.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('ran').touch()\n"
        "from torch.utils.data import DataLoader\n\n\nclass BaseTrainer:\n"
        "    def __init__(self, ds):\n"
        "        self.train_dl = DataLoader(ds, batch_size=16, num_workers=4)\n")
    path, loop = profiled_beside(
        tmp_path / "fit.py", "from bases import BaseTrainer\n\n\nclass Trainer(BaseTrainer):\n"
        "    def fit(self, model):\n        for x, y in self.train_dl:\n"
        "            step(model, x, y)\n", [(6, 61, 30_000_000), (7, 60, 6_000_000)], "fit", 5)
    assert (loop.lineno, loop.evidence) == (6, "source")
    meta = lprof.parse(path).meta
    assert (meta.loader_knobs, meta.loader_calls) == (
        {"batch_size": 16, "num_workers": 4, "pin_memory": False}, "bases.py line 8")
    assert not (tmp_path / "ran").exists()
