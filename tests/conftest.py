"""Shared test fixtures: where the real corpus and the project's own fixtures live."""

from __future__ import annotations

import os
import shutil
from functools import partial
from pathlib import Path

import pytest

from profreport import pysource
from profreport.inputs import shown_source

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
CORPUS = REPO.parent / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The real profiles under ../shared/corpus; the test is skipped when it is absent."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is absent (it sits beside the checkout for developers/CI)")
    return CORPUS


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """The small profiles the project makes itself (scripts/make_fixtures.py)."""
    return FIXTURES


@pytest.fixture(scope="session")
def nsys_available() -> str:
    """Path of nsys; skips when absent, fails instead when PROFREPORT_REQUIRE_NSYS=1 (CI)."""
    path = shutil.which("nsys")
    if path is None and os.environ.get("PROFREPORT_REQUIRE_NSYS") == "1":
        pytest.fail("nsys is required here (PROFREPORT_REQUIRE_NSYS=1) but not installed")
    if path is None:
        pytest.skip("nsys is not installed (scripts/setup.sh --system installs it)")
    return path


@pytest.fixture(scope="session")
def slurm_available() -> str:
    """Path of sbatch when a Slurm controller answers with a usable node; skips otherwise, fails
    instead when PROFREPORT_REQUIRE_SLURM=1 (CI, after scripts/setup.sh started one)."""
    import subprocess

    path = shutil.which("sbatch")
    states = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True,
                            check=False).stdout.split() if path else []
    reason = ("sbatch is not installed" if path is None else
              None if {"idle", "mix", "alloc"} & set(states) else
              f"no usable Slurm node (sinfo states: {' '.join(states) or 'none'})")
    if reason and os.environ.get("PROFREPORT_REQUIRE_SLURM") == "1":
        pytest.fail(f"Slurm is required here (PROFREPORT_REQUIRE_SLURM=1): {reason}")
    if reason:
        pytest.skip(f"{reason} (scripts/setup.sh --slurm starts a one-node Slurm)")
    return path  # type: ignore[return-value]


@pytest.fixture(scope="session")
def nsys_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One nsys export cache for the test session: each .nsys-rep is exported once (~2 s each)."""
    return tmp_path_factory.mktemp("nsys-cache")


#: Names a hostile trace gives its busiest kernel and CPU op (renderer escaping tests).
HOSTILE_KERNEL = "<script>alert(1)</script>"
HOSTILE_OP = "<img src=x onerror=alert(2)>"


@pytest.fixture(scope="session")
def hostile_names() -> tuple[str, str]:
    """The kernel and op names :func:`hostile_kineto_trace` plants."""
    return HOSTILE_KERNEL, HOSTILE_OP


@pytest.fixture(scope="session")
def hostile_kineto_trace(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """resnet50_num_workers_4 with the kernel and the CPU op the analysis ranks first renamed to
    HTML injections (chosen by the real pipeline, so the test follows how it ranks them), its
    2021 categories written as the current format's: there the dispatcher's category holds
    operators only, so the renamed operator stays one (in the 2021 format a name no C++
    operator takes is a span the program opened, see concepts.is_program_span)."""
    import gzip
    import json

    from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths

    source = corpus / "kineto" / "resnet50_num_workers_4.pt.trace.json.gz"
    metrics = analyze_paths([source], AnalyzeOptions()).runs[0].metrics
    renames = {metrics.top_kernels[0].name: HOSTILE_KERNEL, metrics.top_ops[0].name: HOSTILE_OP}
    with gzip.open(source, "rt", encoding="utf-8") as handle:
        trace = json.load(handle)
    current = {"Operator": "cpu_op", "Kernel": "kernel", "Runtime": "cuda_runtime",
               "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}
    for event in trace["traceEvents"]:
        if event.get("name") in renames:
            event["name"] = renames[event["name"]]
        event["cat"] = current.get(event.get("cat"), event.get("cat"))
    target = tmp_path_factory.mktemp("hostile") / "hostile.pt.trace.json.gz"
    with gzip.open(target, "wt", encoding="utf-8") as handle:
        json.dump(trace, handle)
    return target


@pytest.fixture(scope="session")
def make_lprof(tmp_path_factory: pytest.TempPathFactory):
    """A function that profiles a script with a real ``kernprof -l`` and returns the .lprof."""
    import subprocess
    import sys

    kernprof = Path(sys.executable).with_name("kernprof")

    def make(name: str, code: str) -> Path:
        """Profile ``code`` saved as ``<tmp>/<name>.py``; the .lprof lies beside it."""
        folder = tmp_path_factory.mktemp(name)
        script = folder / f"{name}.py"
        script.write_text(code)
        out = folder / f"{name}.lprof"
        subprocess.run([str(kernprof), "-l", "-o", str(out), str(script)], check=True,
                       capture_output=True, timeout=120, cwd=folder)
        return out

    return make


@pytest.fixture(scope="session")
def raw_collectives_per_step():
    """A function counting, in a raw Kineto trace, the collective calls per profiled step."""
    import gzip
    import json

    def count_collectives_per_step(trace: Path) -> tuple[float, float]:
        """From the raw JSON: c10d::allreduce_ ops and gloo:all_reduce spans starting inside the
        ProfilerStep spans, each per step (one program call is recorded once in each)."""
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
        first = min(e["ts"] for e in steps)
        last = max(e["ts"] + e["dur"] for e in steps)

        def count(name: str) -> int:
            """Events called ``name`` starting within the profiled steps."""
            return sum(e.get("name") == name and first <= e["ts"] < last for e in events)

        return count("c10d::allreduce_") / len(steps), count("gloo:all_reduce") / len(steps)

    return count_collectives_per_step


#: A hand-built Kineto trace: two 10 ms steps, a 4 ms DataLoader wait, one GEMM kernel per step
#: launched through a correlation id. The good file beside each bad one in the safety tests.
TINY_TRACE = {
    "schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1},
    "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1,
         "ts": 1000, "dur": 10000},
        {"ph": "X", "cat": "user_annotation",
         "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 1,
         "tid": 1, "ts": 1000, "dur": 4000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5100,
         "dur": 3000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 5200, "dur": 20, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 5300,
         "dur": 2500, "args": {"correlation": 7, "stream": 7, "device": 0}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1,
         "ts": 11000, "dur": 10000},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 12000,
         "dur": 3000},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 12100, "dur": 20, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 12200,
         "dur": 2500, "args": {"correlation": 8, "stream": 7, "device": 0}},
    ]}


@pytest.fixture
def tiny_trace(tmp_path: Path) -> Path:
    """:data:`TINY_TRACE` written to ``good.pt.trace.json`` (a fresh copy per test)."""
    import json

    path = tmp_path / "good.pt.trace.json"
    path.write_text(json.dumps(TINY_TRACE), encoding="utf-8")
    return path


#: The process and thread of a hand-built Kineto trace's training loop (:func:`cpu_event`).
TRAINING_PID = 4242


def kineto_trace(path: Path, events: list[dict], **header) -> Path:
    """Write a small Kineto-shaped trace with the given events and top-level members."""
    import json

    document = {"schemaVersion": 1, **header, "traceEvents": events}
    path.write_text(json.dumps(document, indent=1))
    return path


def cpu_event(name: str, ts: float, dur: float, cat: str = "cpu_op", **args) -> dict:
    """A CPU-side complete event on the training thread."""
    return {"ph": "X", "cat": cat, "name": name, "pid": TRAINING_PID, "tid": TRAINING_PID,
            "ts": ts, "dur": dur, "args": args}


def device_event(name: str, ts: float, dur: float, cat: str = "kernel", pid: int | str = 0,
                 tid: int | str = 7, **args) -> dict:
    """A device-side complete event."""
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def gpu_trace(path: Path, step_us: int, loader_us: int, kernel_us: int = 5000,
              steps: int = 6) -> Path:
    """A torch.profiler trace of ``steps`` ProfilerStep#N spans of ``step_us`` one after the
    other, each opening with a DataLoader wait of ``loader_us`` and then launching one kernel
    of ``kernel_us``."""
    events = []
    for i in range(steps):
        t, at = 1000 + i * step_us, 1000 + i * step_us + loader_us
        events += [
            cpu_event(f"ProfilerStep#{i + 1}", t, step_us, cat="user_annotation"),
            cpu_event("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t,
                      loader_us, cat="user_annotation"),
            cpu_event("aten::mm", at + 10, 100),
            cpu_event("cudaLaunchKernel", at + 20, 20, cat="cuda_runtime", correlation=100 + i),
            device_event("gemm_kernel", at + 50, kernel_us, correlation=100 + i, stream=7,
                         device=0)]
    return kineto_trace(path, events)


def write_nsys_export(path: Path, kernels: list[tuple], steps: list[tuple],
                      runtime: list[tuple] = (), osrt: list[tuple] = ()) -> Path:
    """A minimal Nsight Systems SQLite export built by hand: ``kernels`` rows are
    ``(start, end, correlation, name)``, ``steps`` ``(start, end, text)`` NVTX push/pop ranges
    on one thread, ``runtime`` ``(start, end, correlation, name)`` CUDA API calls, and
    ``osrt`` ``(start, end, name)`` OS runtime calls (``--trace=osrt``; no table without)."""
    import sqlite3

    names = sorted({row[3] for row in [*kernels, *runtime]} | {row[2] for row in osrt}, key=str)
    ids = {name: index for index, name in enumerate(names)}
    global_tid = (1 << 24) | 1  # pid 1, tid 1 as nsys packs them
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
            "CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, "
            "streamId INT, correlationId INT, demangledName INT, shortName INT);"
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, globalTid INT, "
            "correlationId INT, nameId INT);"
            "CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, globalTid INT, "
            "domainId INT, text TEXT, textId INT);")
        conn.executemany("INSERT INTO StringIds VALUES (?, ?)",
                         [(index, name) for name, index in ids.items()])
        conn.execute("INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_SCHEMA_VERSION', '2.7.1')")
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, 0, 7, ?, ?, ?)",
                         [(s, e, c, ids[n], ids[n]) for s, e, c, n in kernels])
        conn.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, ?, ?, ?)",
                         [(s, e, global_tid, c, ids[n]) for s, e, c, n in runtime])
        conn.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, 0, ?, NULL)",
                         [(s, e, global_tid, text) for s, e, text in steps])
        if osrt:
            conn.execute("CREATE TABLE OSRT_API (start INT, end INT, globalTid INT, nameId INT)")
            conn.executemany("INSERT INTO OSRT_API VALUES (?, ?, ?, ?)",
                             [(s, e, global_tid, ids[n]) for s, e, n in osrt])
    return path


def fractions(node: object, key: str = "") -> list[float]:
    """Every figure of a report.json that is a fraction (``*_fraction``, ``share``)."""
    if isinstance(node, dict):
        return [v for k, item in node.items() for v in fractions(item, str(k))]
    if isinstance(node, list):
        return [v for item in node for v in fractions(item, key)]
    if isinstance(node, int | float) and not isinstance(node, bool) and (
            key.endswith("fraction") or key == "share"):
        return [float(node)]
    return []


@pytest.fixture(scope="session")
def sandbox_available() -> None:
    """Skips when bubblewrap cannot build a sandbox here; fails instead when
    PROFREPORT_REQUIRE_SANDBOX=1 (CI, after scripts/setup.sh installed bubblewrap)."""
    from profreport.runner.sandbox import SandboxError, probe

    try:
        probe()
    except SandboxError as exc:
        if os.environ.get("PROFREPORT_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"the sandbox is required here (PROFREPORT_REQUIRE_SANDBOX=1): {exc}")
        pytest.skip(str(exc))


#: What torch 2.13.0 CPU prints when a script's own torch.profiler stops beside gloo and the
#: process dies in native code: glibc's heap-corruption report, or std::terminate called from a
#: destructor at teardown (right after the profiler's ``profiler_stop``), both ending in SIGABRT.
TORCH_TEARDOWN_CRASH = ("malloc(): ", "terminate called without an active exception")


def torch_heap_crash(launch: object, run_folder: Path) -> bool:
    """Whether a launch died of a signal after one of TORCH_TEARDOWN_CRASH in its stderr (the
    tail the manifest keeps, or the run's log: ``torch.stderr.log`` for ``torch.profiler``):
    seen intermittently in the plain run, where profreport adds no profiler, and in the
    torch.profiler one."""
    log = run_folder / f"{str(getattr(launch, 'profiler', '')).split('.')[0]}.stderr.log"
    text = "\n".join([*getattr(launch, "stderr_tail", []),
                      log.read_text(errors="replace") if log.is_file() else ""])
    return bool(getattr(launch, "signal", None)) and any(
        sign in text for sign in TORCH_TEARDOWN_CRASH)


def loop_origin(source: list[str], scopes: pysource.SourceScopes, first: int, lineno: int
                ) -> tuple[str | None, bool | None]:
    """dataloader_origin of what the loop at ``lineno`` of the function starting at ``first``
    iterates over, as the .lprof parser reads it."""
    return pysource.dataloader_origin(pysource.loop_iterable(source[lineno - 1]) or "",
                                      lambda name: scopes.assigned(first, lineno, name))


def loop_named_only(source: list[str], scopes: pysource.SourceScopes, first: int, lineno: int
                    ) -> bool:
    """Whether the loop at ``lineno`` of the function starting at ``first`` is a DataLoader
    loop on its name alone (pysource.named_only)."""
    return pysource.named_only(pysource.loop_iterable(source[lineno - 1]) or "",
                               lambda name: scopes.assigned(first, lineno, name))


def project_scopes(folder: Path, files: dict[str, str], script: str) -> pysource.SourceScopes:
    """The scopes of ``script`` among ``files`` (relative path -> text) written under
    ``folder``, the modules it imports read from that folder as the .lprof parser reads them
    (never run)."""
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    path = folder / script
    return pysource.SourceScopes(files[script].splitlines(), path, pysource.ModuleSources(
        partial(shown_source, roots=[folder], owner=path)))


@pytest.fixture(params=["C", "numpy"])
def search_passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each of the analysis's two kinds of searches and unions in turn: the C extension
    (core/_searches.c), skipped where it is not built, and numpy."""
    from profreport import searches

    if request.param == "numpy":
        monkeypatch.setattr(searches, "_searches", None)
    elif not searches.compiled():
        pytest.skip("the C searches are not built (no C compiler at install)")
    return request.param


@pytest.fixture(params=["C", "msgspec"])
def scan_passes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each of the Kineto reader's two ways of reading a batch in turn: the C scanner
    (parsers/_kineto_scan.c), skipped where it is not built, and msgspec's structs."""
    from profreport.parsers import kineto_columns

    if request.param == "msgspec":
        monkeypatch.setattr(kineto_columns, "_kineto_scan", None)
    elif kineto_columns._kineto_scan is None:
        pytest.skip("the C scanner is not built (no C compiler at install)")
    return request.param
