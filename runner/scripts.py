"""The user's own script: the settings ``--vary`` runs it with, what each launch runs, the traces
a script that drives torch.profiler writes itself, and what its plain run measured."""

from __future__ import annotations

import importlib.util
import itertools
import json
import re
import shlex
import shutil
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from profreport.errors import UsageError
from profreport.manifest import Manifest
from profreport.runner.launch import TRACE_DIR, TRACE_PATTERNS
from profreport.runner.script_scan import ScriptFacts, imported_modules, option_for
from profreport.runner.variants import Knobs
from profreport.text import error_text

#: Knobs the advice knows, by name: every training knob, the batch size and learning rate.
KNOWN_KNOBS = frozenset({f.name for f in fields(Knobs)} | {"batch_size", "lr", "prefetch_factor"})
#: Each process writes its step marks here; ``{rank}`` is filled in by the process.
RESULT_NAME = "script_result.{profiler}.rank{{rank}}.json"
#: How deep trace files are looked for in the working directory and the script's folder (the
#: folders the script names are searched all the way down).
TRACE_SEARCH_DEPTH = 2
#: Bytes at the head of a Kineto trace that hold its ``distributedInfo`` (it precedes the events).
TRACE_HEAD_BYTES = 65536
DISTRIBUTED_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^}]*"rank"\s*:\s*(\d+)')
#: A profiler that slows the script's steps by more than this factor distorts any figure timed
#: under it (step times, shares of a step): the run says so, and comparisons use the plain run.
OVERHEAD_NOTE_FACTOR = 1.5
#: The manifest names of the profilers a script launch runs under, by launch mode.
PROFILER_NAMES = {"kernprof": "kernprof", "torch": "torch.profiler", "nsys": "nsys"}
#: Characters a run's folder name keeps; others become ``_``.
UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.=,+-]+")


@dataclass(frozen=True)
class ScriptSetting:
    """One way of running the script: its run name, the arguments added, the knobs they set,
    and the run-and-report options that ask for this setting alone."""

    name: str
    args: tuple[str, ...] = ()
    knobs: tuple[tuple[str, Any], ...] = ()
    options: tuple[str, ...] = ()


def parse_value(text: str) -> Any:
    """``"2"`` -> 2, ``"0.5"`` -> 0.5, ``"true"`` -> True; any other text as it is."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def safe_name(text: str) -> str:
    """A folder name for a run: ``--num-workers 2`` -> ``num-workers_2``."""
    return UNSAFE_NAME.sub("_", text.strip()).strip("_-") or "run"


def knob_name(option: str) -> str:
    """``--num-workers`` -> ``num_workers``."""
    return option.lstrip("-").replace("-", "_")


def knobs_from_args(args: list[str]) -> tuple[tuple[str, Any], ...]:
    """The known knobs a list of arguments sets (``--num-workers 2``, ``--amp=true``)."""
    knobs: dict[str, Any] = {}
    for index, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        option, has_value, value = arg.partition("=")
        if not has_value:
            following = args[index + 1] if index + 1 < len(args) else None
            has_value = following is not None and not following.startswith("--")
            value = following if has_value else "true"
        if knob_name(option) in KNOWN_KNOBS:
            knobs[knob_name(option)] = parse_value(value)  # type: ignore[arg-type]
    return tuple(knobs.items())


def parse_vary(text: str) -> tuple[str, list[str]]:
    """``"num_workers=0,2,4"`` -> ``("num_workers", ["0", "2", "4"])``; UsageError otherwise."""
    key, sep, values = text.partition("=")
    choices = [value.strip() for value in values.split(",") if value.strip()]
    if not sep or not key.strip() or not choices:
        raise UsageError(f"--vary {text!r}: expected NAME=VALUE,VALUE,... (e.g. num_workers=0,2)")
    return key.strip(), choices


def vary_settings(vary: list[str], vary_args: list[str], facts: ScriptFacts,
                  stem: str) -> list[ScriptSetting]:
    """The settings to run: every combination of the ``--vary`` values (named by them), then
    each ``--vary-args`` set (named by its arguments); the script as it is when neither."""
    settings = []
    if vary:
        keys, choices = zip(*(parse_vary(text) for text in vary), strict=True)
        for values in itertools.product(*choices):
            args = [part for key, value in zip(keys, values, strict=True)
                    for part in (option_for(key, facts.options), value)]
            pairs = [f"{key}={value}" for key, value in zip(keys, values, strict=True)]
            settings.append(ScriptSetting(safe_name(",".join(pairs)), tuple(args),
                                          knobs_from_args(args),
                                          tuple(part for pair in pairs
                                                for part in ("--vary", pair))))
    for text in vary_args:
        args = shlex.split(text)
        settings.append(ScriptSetting(safe_name(text.replace("--", "")), tuple(args),
                                      knobs_from_args(args), ("--vary-args", text)))
    names = [setting.name for setting in settings]
    if len(set(names)) < len(names):
        raise UsageError(f"--vary/--vary-args give two runs the same name: {', '.join(names)}")
    return settings or [ScriptSetting(stem)]


def script_entry(profiler: str, script: Path, args: list[str], folder: Path, active: int,
                 own_profiler: bool) -> list[str]:
    """What one launch runs: the script under the wrapper in ``profiler``'s mode."""
    entry = ["-m", "profreport.runner.script_profile", "--mode", profiler,
             "--result", str(folder / RESULT_NAME.format(profiler=profiler))]
    if profiler == "torch" and own_profiler:
        entry.append("--own-profiler")
    elif profiler == "torch":
        entry += ["--trace-dir", str(folder / TRACE_DIR), "--active", str(active)]
    return [*entry, "--", str(script), *args]


def trace_search_dirs(facts: ScriptFacts, script: Path, cwd: Path) -> list[tuple[Path, bool]]:
    """Where a script's own traces may be: the folders it names (searched all the way down),
    then the working directory and the script's folder (searched shallowly)."""
    named = [((cwd / folder).resolve(), True) for folder in facts.trace_dirs]
    return [*named, (cwd.resolve(), False), (script.parent.resolve(), False)]


def new_trace_files(search: list[tuple[Path, bool]], since_ns: int,
                    exclude: Path) -> list[Path]:
    """Trace files written at or after ``since_ns`` in the search folders (not under
    ``exclude``, the runs folder)."""
    found: dict[Path, None] = {}
    for folder, deep in search:
        for pattern in TRACE_PATTERNS:
            globs = [f"**/{pattern}"] if deep else [
                "/".join(["*"] * level + [pattern]) for level in range(TRACE_SEARCH_DEPTH + 1)]
            for glob in globs:
                for path in folder.glob(glob):
                    resolved = path.resolve()
                    if (resolved.is_file() and resolved.stat().st_mtime_ns >= since_ns
                            and not resolved.is_relative_to(exclude)):
                        found[resolved] = None
    return sorted(found)


def trace_rank(path: Path) -> int | None:
    """The rank a Kineto trace's ``distributedInfo`` names, read from the file's head."""
    import gzip

    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            head = handle.read(TRACE_HEAD_BYTES)
    except (OSError, EOFError):
        return None
    match = DISTRIBUTED_RANK.search(head)
    return int(match.group(1)) if match else None


def collect_own_traces(files: list[Path], folder: Path) -> list[str]:
    """Copy the script's own traces into the run's trace folder, each named by its rank
    (``rank1.<name>``) when its ``distributedInfo`` gives one; returns the names."""
    target = folder / TRACE_DIR
    target.mkdir(parents=True, exist_ok=True)
    names = []
    for path in files:
        rank = trace_rank(path)
        name = f"rank{rank}.{path.name}" if rank is not None else path.name
        shutil.copy2(path, target / name)
        names.append(name)
    return names


def keep_source_copy(script: Path, folder: Path) -> str:
    """Copy the script beside its profiles, and the modules beside it that it imports in the
    same layout (script_scan.imported_modules): the report reads the profiled lines from the
    copy (the source may change or sit outside the folders a report may read) and follows its
    loaders into those modules' copies; returns a note naming them."""
    shutil.copy2(script, folder / script.name)
    modules = imported_modules(script)
    for relative in modules:
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(script.parent / relative, folder / relative)
    listed = ", ".join(error_text(str(relative)) for relative in modules)
    beside = f", with the modules beside it that it imports ({listed})" if modules else ""
    return (f"{script.name}: a copy of the script as profiled is kept in the run folder{beside}; "
            "the line profile's source lines come from it")


def read_results(folder: Path, profiler: str) -> list[dict[str, Any]]:
    """Every rank's step marks from one launch, by rank."""
    pattern = RESULT_NAME.format(profiler=profiler).replace("{rank}", "*")
    results = [json.loads(path.read_text(encoding="utf-8")) for path in folder.glob(pattern)]
    return sorted(results, key=lambda result: result.get("rank", 0))


def record_plain_result(manifest: Manifest, folder: Path) -> None:
    """Throughput, step times, world size and the DataLoader's knobs from the plain run."""
    results = read_results(folder, "none")
    if not results:
        manifest.notes.append("the plain run recorded no steps: no optimizer.step() was seen, "
                              "so no throughput")
        return
    first = results[0]
    loader = first.get("loader") or {}
    manifest.world_size = int(first.get("world_size", 1))
    manifest.environment["torch_threads"] = first.get("torch_threads")
    manifest.environment["local_world_size"] = int(first.get("local_world_size", 1))
    manifest.knobs.update({key: value for key, value in loader.items()
                           if key in KNOWN_KNOBS and value is not None})
    if first.get("lr") is not None:
        manifest.knobs["lr"] = first["lr"]
    manifest.plain_step_ns = [int(ns) for ns in first.get("step_ns", [])]
    steps_per_s = first.get("steps_per_s")
    manifest.throughput_steps_per_s = steps_per_s
    if len(results) < manifest.world_size:
        manifest.notes.append(f"only {len(results)} of {manifest.world_size} ranks wrote their "
                              "step marks")
    manifest.notes += uneven_steps_note(results)
    if steps_per_s is None:
        manifest.notes.append("the plain run made fewer than two optimizer steps: no throughput")
        return
    batch = loader.get("batch_size")
    basis = (f"plain run, rank 0: {len(manifest.plain_step_ns)} steps between optimizer.step() "
             "calls of the first optimizer")
    measured = first.get("batches_per_step")
    per_step = measured or 1.0
    if measured:
        manifest.knobs["batches_per_step"] = int(per_step) if per_step.is_integer() \
            else round(per_step, 2)
    if batch:
        manifest.throughput_samples_per_s = steps_per_s * batch * per_step * manifest.world_size
        basis += (f"; samples = steps x the DataLoader's batch size ({batch})"
                  f"{_batches_text(per_step)} x {manifest.world_size} process(es)")
    manifest.throughput_basis = basis
    manifest.notes.append(f"throughput: {basis}")


def uneven_steps_note(results: list[dict[str, Any]]) -> list[str]:
    """The note saying the ranks made different numbers of steps (uneven inputs, trained under
    DDP's Join), which rank 0's step marks alone do not show; none when they agree."""
    steps = [(result.get("rank", 0), result.get("steps")) for result in results]
    if len({count for _, count in steps}) < 2:
        return []
    listed = ", ".join(f"rank {rank} {count}" for rank, count in steps)
    return [f"the ranks made different numbers of steps ({listed}): uneven inputs; throughput "
            "and step times are rank 0's, while it trained, and the ranks that went on trained "
            "without it"]


def _batches_text(per_step: float) -> str:
    """' x 4 batches per step (...)' when each step took several batches, '' when one."""
    if per_step == 1.0:
        return ""
    return (f" x {per_step:g} batches per step (the DataLoader yielded them between two steps "
            "of the first optimizer, as gradient accumulation does)")


def overhead_notes(manifest: Manifest, folder: Path) -> list[str]:
    """One note per profiler whose launch ran the script's steps much slower than the plain run
    did (both from the step marks, rank 0): figures timed under it are inflated."""
    plain = manifest.throughput_steps_per_s
    notes = []
    for mode, name in PROFILER_NAMES.items():
        results = read_results(folder, mode)
        profiled = results[0].get("steps_per_s") if results else None
        if plain and profiled and plain / profiled > OVERHEAD_NOTE_FACTOR:
            notes.append(f"{name} slowed the steps {plain / profiled:.1f}x ({profiled:.2f} "
                         f"steps/s against {plain:.2f} unprofiled): step times timed under it "
                         "are inflated; throughput and comparisons come from the plain run")
    return notes


def profiled_source_root(script: str | Path | None) -> Path | None:
    """Where the code run-and-report profiles lives (the user's script's folder, else the
    runner's), so that line_profiler's source lines may be shown from there."""
    if script:
        return Path(script).resolve().parent
    spec = importlib.util.find_spec("profreport.runner.train")
    return Path(spec.origin).parent if spec is not None and spec.origin else None
