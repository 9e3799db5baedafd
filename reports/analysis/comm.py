"""Collective communication: NCCL/RCCL kernels on GPUs, gloo/c10d calls on CPU-only runs.

The exposed part of communication is what it claims in the step breakdown
(:mod:`profreport.reports.analysis.breakdown`): the caller passes those intervals in, so
``CommStats.exposed_fraction`` and ``Breakdown.parts_ns["comm_exposed"]`` are one figure. The
overlap is communication under compute *kernels* (copies and memsets are no compute), inside the
step windows. Calls per step are counted by the step that launched them (correlation id).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from profreport import concepts, searches
from profreport.allocator import giving_back_memory
from profreport.model import Profile, ids_at, sorted_times
from profreport.reports.analysis import intervals as iv
from profreport.reports.analysis.cpu import spans_where
from profreport.reports.analysis.gpu import comm_intervals, comm_under_compute
from profreport.reports.analysis.launches import launch_calls, launched_in_windows, unlinked
from profreport.reports.analysis.ops import outermost
from profreport.reports.analysis.results import AllReduceSizes, CommStats
from profreport.reports.analysis.steps import StepWindows, in_windows


def _enclosing_kind(calls: pd.DataFrame, kinds: pd.Series, pids: np.ndarray, tids: np.ndarray,
                    times: np.ndarray) -> np.ndarray:
    """For each (process, thread, time), the kind of the latest-starting collective call of a
    known kind on that thread of that process still running then (None where there is none): a
    thread id alone may be another process's too (two processes in one trace, threads numbered
    per process)."""
    known = kinds.notna().to_numpy()
    call_pids, call_tids = calls["pid"].to_numpy(), calls["tid"].to_numpy()
    out = np.full(len(times), None, dtype=object)
    for pid, tid in set(zip(pids.tolist(), tids.tolist(), strict=True)):
        on_thread = known & (call_pids == pid) & (call_tids == tid)
        starts = calls["start"].to_numpy(np.int64)[on_thread]
        order = np.argsort(starts, kind="stable")
        ends = calls["end"].to_numpy(np.int64)[on_thread][order]
        labels = kinds.to_numpy(dtype=object)[on_thread][order]
        asked = np.flatnonzero((pids == pid) & (tids == tid))
        at = searches.searchsorted(starts[order], times[asked], side="right") - 1
        inside = (at >= 0) & (ends[np.maximum(at, 0)] >= times[asked])
        out[asked[inside]] = labels[at[inside]]
    return out


def call_kinds(calls: pd.DataFrame) -> pd.Series:
    """Which collective each CPU collective call performs: the ``Collective name`` it records
    (record_param_comms), else its name (``nccl:all_reduce``); <NA> where neither says."""
    return concepts.collective_kind(calls["collective"].where(calls["collective"].notna(),
                                                              calls["name"]))


def kernel_collective_kinds(profile: Profile, kernels: pd.DataFrame,
                            rows: np.ndarray) -> pd.Series:
    """What each communication kernel (``kernels``: the ``rows`` of the kernel table) does: from
    its name where NCCL/RCCL name the collective, else (``ncclDevKernel_Generic``) from the CPU
    collective call that was running on the launching thread (of the launching process) when
    its launch call (same correlation id) started."""
    kinds = concepts.collective_kind(kernels["short_name"])
    unnamed = kinds.isna().to_numpy()
    calls = profile.table("cpu_collectives")
    runtime = profile.table("runtime")
    if not unnamed.any() or calls.empty or runtime.empty:
        return kinds
    launch = launch_calls(profile, "kernels")[rows[unnamed]]
    found = launch >= 0
    pids, tids = (ids_at(runtime[column], launch[found]) for column in ("pid", "tid"))
    times = runtime["start"].to_numpy(np.int64)[launch[found]]
    enclosing = _enclosing_kind(calls, call_kinds(calls), pids, tids, times)
    filled = kinds.to_numpy(dtype=object)
    filled[np.flatnonzero(unnamed)[found]] = enclosing
    return pd.Series(filled, index=kernels.index, dtype=object)


def ns_per_step_by_collective(events: pd.DataFrame, kinds: pd.Series,
                              windows: StepWindows) -> dict[str, int]:
    """Time per step with each kind of collective in flight inside the step windows (concepts'
    ALL_REDUCE, ALL_TO_ALL...; "unknown" where nothing recorded says), largest first."""
    labels = kinds.astype(object).where(kinds.notna(), "unknown").to_numpy()
    spent = {str(kind): windows.covered(iv.union_of([events[labels == kind]])) // windows.count
             for kind in pd.unique(labels)}
    return dict(sorted(((k, v) for k, v in spent.items() if v > 0), key=lambda kv: -kv[1]))


#: Why a format records no collective's size.
_NO_SIZES = {"nsys": "Nsight Systems' NCCL kernels and ranges, as profreport reads them, "
                     "carry no message size",
             "kineto": "the trace records no message sizes (record_param_comms' 'In msg "
                       "nelems' and 'dtype', or the collective ops' inputs under "
                       "record_shapes=True)"}


#: Up to this many distinct bucket sizes are each given: a model's buckets are the same every
#: step, and two or three sizes say more than a median (which no bucket need have).
FEW_SIZES = 3


def all_reduce_sizes(profile: Profile, windows: StepWindows
                     ) -> tuple[AllReduceSizes | None, str | None]:
    """The sizes of the all-reduces the steps make, counted in one layer of the collective
    calls (the one recording most sizes: each call is recorded once per layer), those of DDP's
    gradient buckets apart from the rest (see gradient_buckets; every call when nothing tells);
    else None and why they are unknown."""
    calls = in_windows(profile.table("cpu_collectives"), windows)
    calls = calls[(call_kinds(calls) == concepts.ALL_REDUCE).fillna(False).to_numpy(bool)]
    sized = calls[calls["bytes"].to_numpy() >= 0]
    if sized.empty:
        return None, _NO_SIZES.get(profile.kind, _NO_SIZES["kineto"])
    layers = concepts.collective_layer(sized["name"])
    counted = sized[(layers == layers.value_counts().idxmax()).to_numpy(bool)]
    counted = counted.sort_values("start", kind="stable")
    gradients = gradient_buckets(spans_where(profile, concepts.is_backward_op), counted, calls)
    if gradients is None:  # nothing tells a bucket's all-reduce from another: all count
        gradients = np.ones(len(counted), bool)
    sizes = np.sort(counted["bytes"].to_numpy(np.int64)[gradients])
    distinct = np.unique(sizes)[::-1]
    return AllReduceSizes(calls_per_step=len(sizes) / windows.count,
                          bytes_per_step=int(sizes.sum()) // windows.count,
                          largest_bytes=int(sizes.max(initial=0)),
                          median_bytes=int(sizes[(len(sizes) - 1) // 2]) if len(sizes) else 0,
                          sizes_bytes=tuple(int(b) for b in distinct)
                          if len(distinct) <= FEW_SIZES else (),
                          others_per_step=int((~gradients).sum()) / windows.count), None


def gradient_buckets(backward: pd.DataFrame, layer: pd.DataFrame,
                     calls: pd.DataFrame) -> np.ndarray | None:
    """Which of the all-reduce calls ``layer`` (one layer of ``calls``, by start) DDP made for a
    gradient bucket: those issued inside the backward pass (``backward``, the profile's backward
    ops) on their thread (DDP's reducer all-reduces a bucket from autograd's hooks, inside
    AccumulateGrad; a loss or metric all-reduced by the loop, on a thread running no backward
    op or outside it, is not). A layer recorded on a worker thread (gloo's run the op: no c10d
    call, no backward op there) is paired with the calls of the same order in a layer of
    ``calls`` made on the calling threads (each call is recorded once per layer, in the order
    it was made). None when nothing tells: the profile records no backward pass, or no layer
    pairs with ``layer``."""
    if backward.empty:
        return None
    made = calls[(concepts.collective_layer(calls["name"]) != "backend").fillna(False)
                 .to_numpy(bool)]
    callers = _threads(backward) | _threads(made)
    if _threads(layer) <= callers:
        return _inside_own_thread(backward, layer)
    for _, caller in made.groupby(concepts.collective_layer(made["name"]), sort=False):
        if len(caller) == len(layer):
            return _inside_own_thread(backward, caller.sort_values("start", kind="stable"))
    return None


def _threads(frame: pd.DataFrame) -> set[tuple[int, int]]:
    """The (pid, tid) of every row."""
    return set(zip(frame["pid"].astype(int), frame["tid"].astype(int), strict=True))


def gradient_syncs(profile: Profile) -> np.ndarray:
    """Start times of the all-reduce calls DDP made for its gradient buckets, each call once:
    counted in one layer of the calls (each call is recorded once per layer: a gloo op on its
    worker thread pairs with the c10d call that made it), the layer in which gradient_buckets
    finds the most; none when no layer tells. In order."""
    calls = profile.table("cpu_collectives")
    calls = calls[(call_kinds(calls) == concepts.ALL_REDUCE).fillna(False).to_numpy(bool)]
    backward = spans_where(profile, concepts.is_backward_op)
    told = []
    for _, layer in calls.groupby(concepts.collective_layer(calls["name"]), sort=False,
                                  dropna=False):
        layer = layer.sort_values("start", kind="stable")
        buckets = gradient_buckets(backward, layer, calls)
        if buckets is not None:
            told.append(layer["start"].to_numpy(np.int64)[buckets])
    counted = max(told, key=len, default=np.array([], np.int64))
    return np.sort(counted)


def ddp_forwards_per_sync(profile: Profile, windows: StepWindows | None) -> int | None:
    """The fewest DistributedDataParallel forward passes whose gradients one all-reduce round
    takes, over the steps: a pass whose backward syncs is followed, before the next pass, by
    the all-reduces DDP issues in backward (gradient_syncs); one under ``no_sync()`` is not. So
    above one, every step accumulates gradients over that many passes (a discriminator run
    twice, each with its own backward, syncs twice: one). None without DDP forward spans,
    steps, or all-reduces issued in a backward pass (nothing tells a pass that syncs)."""
    spans = spans_where(profile, concepts.is_ddp_forward)
    if windows is None or spans.empty:
        return None
    syncs = gradient_syncs(profile)
    if not len(syncs):
        return None
    starts = sorted_times(outermost(spans)["start"].to_numpy(np.int64))
    following = np.r_[starts[1:], np.iinfo(np.int64).max]
    synced = searches.searchsorted(syncs, following) > searches.searchsorted(syncs, starts)
    index = windows.index_of(starts)
    kept = index >= 0
    passes = np.bincount(index[kept], minlength=windows.count)
    rounds = np.bincount(index[kept], weights=synced[kept], minlength=windows.count)
    per_round = passes[rounds > 0] // rounds[rounds > 0]
    return int(per_round.min()) if len(per_round) else None


def _inside_own_thread(spans: pd.DataFrame, calls: pd.DataFrame) -> np.ndarray:
    """Whether each call starts inside one of ``spans`` on its own thread."""
    out = np.zeros(len(calls), bool)
    for (pid, tid), rows in calls.groupby(["pid", "tid"], sort=False).indices.items():
        own = spans[(spans["pid"] == pid).to_numpy() & (spans["tid"] == tid).to_numpy()]
        out[rows] = iv.inside(iv.union_of([own]), calls["start"].to_numpy(np.int64)[rows])
    return out


def _comm_stats(profile: Profile, windows: StepWindows, comm: iv.Intervals,
                exposed: np.ndarray, overlapped_ns: int, calls: tuple[int, int],
                events: pd.DataFrame, kinds: pd.Series, on_gpu: bool) -> CommStats:
    """CommStats from the communication intervals, their exposed ns in each step window, the
    ns under compute, the call counts (inside the step windows, and in all) and the events
    with their collective kinds (kernels on GPU: their library named)."""
    spent = windows.covered(comm)
    total = max(windows.total_ns, 1)
    sizes, unknown = all_reduce_sizes(profile, windows)
    return CommStats(origin=profile.kind, total_ns_per_step=spent // windows.count,
                     fraction=spent / total,
                     exposed_fraction=int(exposed.sum()) / total,
                     overlap_fraction=overlapped_ns / max(spent, 1),
                     calls_per_step=calls[0] / windows.count, calls_total=calls[1],
                     names=sorted(events["short_name" if on_gpu else "name"].unique().tolist()),
                     on_gpu=on_gpu,
                     ns_per_step_by_collective=ns_per_step_by_collective(events, kinds, windows),
                     all_reduce_sizes=sizes, sizes_unknown=unknown,
                     library=concepts.collective_library(
                         events["name"], profile.table("runtime")["name"]) if on_gpu else None)


@giving_back_memory
def gpu_comm_stats(profile: Profile, windows: StepWindows,
                   claims: dict[str, np.ndarray]) -> CommStats | None:
    """NCCL/RCCL kernels: share of step time, exposed share (what they claim in the breakdown),
    overlap with compute kernels, calls launched per step (see kernel_collectives)."""
    comm = profile.table("kernels")["is_comm"].to_numpy(bool)
    if not comm.any():
        return None
    kernels = profile.table("kernels")[comm]
    devices = kernels["device"].to_numpy()
    in_steps = launched_in_windows(profile, "kernels", windows)[comm]
    calls = (kernel_collectives(devices[in_steps]), kernel_collectives(devices))
    stats = _comm_stats(profile, windows, comm_intervals(profile), claims["comm_exposed"],
                        comm_under_compute(profile, windows), calls, kernels,
                        kernel_collective_kinds(profile, kernels, np.flatnonzero(comm)),
                        on_gpu=True)
    why = unlinked(profile, "kernels", comm, "that communicate")
    if why is None:
        return stats
    return replace(stats, calls_unknown=f"each counted by the step it started in: {why}")


def kernel_collectives(devices: np.ndarray) -> int:
    """Collectives among communication kernels, given the device each ran on: a collective
    runs one kernel on each GPU of its communicator, so a process driving several GPUs (one
    nn.DataParallel broadcast, launched by one NCCL group call with a correlation id per GPU)
    records each collective once per GPU; the count is that of the GPU with the most."""
    return int(np.unique(devices, return_counts=True)[1].max(initial=0))


def collective_calls(calls: pd.DataFrame) -> int:
    """Collective calls the program made: one call is recorded once per layer (the c10d op and
    the gloo/NCCL op that runs it), so the count is that of the layer with the most records."""
    if calls.empty:
        return 0
    return int(concepts.collective_layer(calls["name"]).value_counts().max())


def cpu_comm_stats(profile: Profile, windows: StepWindows, parts: dict[str, iv.Intervals],
                   claims: dict[str, np.ndarray]) -> CommStats | None:
    """CPU collectives (gloo, c10d): time with a collective in flight on any thread, and the
    exposed part, when no framework op runs beside it (the training thread waits for it);
    ``parts`` and their ``claims`` are the breakdown's (see breakdown.cpu_parts)."""
    calls = profile.table("cpu_collectives")
    if calls.empty:
        return None
    comm = parts["comm_exposed"]
    # Under compute: under the framework ops' time that the DataLoader wait does not claim.
    overlapped = iv.intersect(comm, iv.subtract(parts["compute"], parts["dataloader"]))
    return _comm_stats(profile, windows, comm, claims["comm_exposed"], windows.covered(overlapped),
                       (collective_calls(in_windows(calls, windows)), collective_calls(calls)),
                       calls, call_kinds(calls), on_gpu=False)
