"""Ranks of one job analysed together: per-rank verdicts, the job verdict, the slowest rank and
why rank verdicts differ, on the project's two-rank gloo fixture and hand-built two-rank traces."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

from profreport.manifest import MANIFEST_SCHEMA
from profreport.reports.analysis.analyze import AnalyzeOptions, analyze_paths
from profreport.reports.analysis.job import PACE_EXPOSED_MARGIN, job_analysis
from profreport.reports.analysis.lines import slowest_loop_line
from profreport.reports.analysis.results import RankVerdict
from profreport.reports.render.charts import run_charts
from profreport.reports.render.html import render_html
from profreport.reports.render.json import render_json
from profreport.reports.render.markdown import render_markdown

sys.path.insert(0, str(Path(__file__).parent))
from conftest import write_nsys_export  # noqa: E402

COMPUTE_KERNEL = "volta_sgemm_128x64_nn"
NCCL_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float"


def write_rank(folder: Path, rank: int, compute_us: int, comm_us: int, steps: int = 5,
               world_size: int = 2, step_name: str = "ProfilerStep#{}",
               first_extra_us: int = 0) -> Path:
    """A Kineto trace of one rank: ``steps`` spans named ``step_name`` with the step's number
    (ProfilerStep by default), each a compute kernel then an all-reduce kernel, both launched
    by cudaLaunchKernel (joined by correlation id); every step is 200 µs longer than its
    kernels (launch time before them), the first ``first_extra_us`` longer still (start-up
    before its kernels)."""
    pid = 100 + rank
    events, ts, correlation = [], 1000, 1
    for n in range(steps):
        extra = first_extra_us if n == 0 else 0
        step_us = compute_us + comm_us + 200 + extra
        events.append({"ph": "X", "cat": "user_annotation", "name": step_name.format(n),
                       "pid": pid, "tid": pid, "ts": ts, "dur": step_us, "args": {}})
        for name, start, dur in ((COMPUTE_KERNEL, ts + 100 + extra, compute_us),
                                 (NCCL_KERNEL, ts + 100 + extra + compute_us, comm_us)):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": pid, "tid": pid, "ts": ts + 10 * correlation % 80, "dur": 5,
                           "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7,
                           "ts": start, "dur": dur,
                           "args": {"correlation": correlation, "stream": 7, "device": 0}})
            correlation += 1
        ts += step_us
    document = {"schemaVersion": 1, "traceEvents": events,
                "distributedInfo": {"backend": "nccl", "rank": rank,
                                    "world_size": world_size}}
    path = folder / f"rank{rank}.pt.trace.json"
    path.write_text(json.dumps(document))
    return path


def test_gloo_fixture_ranks_keep_pace_and_the_job_waits_for_one(fixtures_dir: Path) -> None:
    """The two gloo ranks each record collectives and keep pace (a synchronous job's steps take
    the same time everywhere), so no straggler is named; the rank that waits least inside the
    collectives is the one the other waits for, and the job's verdict is its verdict. When the
    ranks' verdicts differ, the other's communication is explained as that waiting."""
    report = analyze_paths([fixtures_dir / "ddp_gloo"], AnalyzeOptions())
    run = report.runs[0]
    job = run.job
    assert [r.rank for r in job.ranks] == [0, 1]
    assert {r.rank: r.step_ns for r in job.ranks} == run.metrics.per_rank_step_ns
    # Measured on the fixture: rank 0 in the all-reduce 5.4% of its step (5.2% exposed), rank
    # 1 33.2% (33.0%): rank 1 waits there for rank 0.
    assert [(r.comm_fraction, r.comm_exposed_fraction) for r in job.ranks] == [
        pytest.approx((0.05413, 0.05230), abs=1e-5), pytest.approx((0.33204, 0.32961), abs=1e-5)]
    slowest = max(job.ranks, key=lambda r: r.step_ns)
    assert job.slowest_rank == slowest.rank and job.slowest_step_ns == slowest.step_ns
    assert job.others_step_ns == min(r.step_ns for r in job.ranks)
    assert job.straggler is False and job.verdict_reason.startswith(
        "the ranks keep pace within 10%")
    pacer = job.ranks[0]
    assert [r.verdict for r in job.ranks] == ["compute-bound", "communication-bound"]
    assert (job.paced_by, job.verdict) == (0, "compute-bound")
    assert job.disagreement == (
        "Ranks disagree (rank 0 compute-bound; rank 1 communication-bound): the other ranks wait "
        "inside the collectives for rank 0 (exposed communication: rank 1 33% of its step, rank "
        "0 5.2%), so their communication is rank 0's compute-bound time seen from outside.")
    data = json.loads(render_json(report))["runs"][0]["job"]
    assert data["slowest_rank"] == job.slowest_rank and data["straggler"] is False
    assert data["paced_by"] == pacer.rank
    assert [r["rank"] for r in data["ranks"]] == [0, 1]


def test_ranks_are_timed_over_the_steps_they_all_count(tmp_path: Path) -> None:
    """Each rank's profile leaves out its own start-up step: rank 0's first step (25.2 ms, 2.5x
    the later 10.2 ms) is start-up, rank 1's (19.2 ms, 1.9x) is not. Over its own steps rank 1
    took 12.0 ms per step against 10.2 ms, a 'straggler' by its first step alone (the 2-process
    scaling point of the built-in workload under nsys: rank 1 330.5 ms against 294.1 ms, 291.0
    ms over the same steps). Over steps 1-4, which both count, the ranks tie."""
    write_rank(tmp_path, 0, compute_us=9000, comm_us=1000, first_extra_us=15000)
    write_rank(tmp_path, 1, compute_us=9000, comm_us=1000, first_extra_us=9000)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    job = run.job
    assert [r.step_ns for r in job.ranks] == [10_200_000, 10_200_000]
    assert job.straggler is False and "every rank takes 10.2 ms per step" in job.verdict_reason
    assert run.metrics.per_rank_step_ns == {0: 10_200_000, 1: 10_200_000}


def test_a_rank_whose_own_figures_count_more_steps_is_said_to_under_the_table(
        tmp_path: Path) -> None:
    """The ranks of the test above the other way round: rank 0's first step (19.2 ms, 1.9x)
    is no start-up on its own profile, rank 1's (25.2 ms, 2.5x) is. The per-rank table gave
    rank 0 10.2 ms (steps 1-4, those both count) while the key metrics, rank 0's own profile
    over its steps 0-4, read 12.0 ms, and nothing said why. Both stand (the table compares
    the ranks over the same steps, the details describe rank 0's own); a note under the table
    says which steps the table counts and what rank 0's own mean is."""
    write_rank(tmp_path, 0, compute_us=9000, comm_us=1000, first_extra_us=9000)
    write_rank(tmp_path, 1, compute_us=9000, comm_us=1000, first_extra_us=15000)
    report = analyze_paths([tmp_path], AnalyzeOptions())
    run = report.runs[0]
    assert run.metrics.steps is not None and run.metrics.steps.mean_ns == 12_000_000
    assert [r.step_ns for r in run.job.ranks] == [10_200_000, 10_200_000]
    note = ("The mean steps count steps 1 to 4, those every rank's profile counts (each profile "
            "judges its own start-up, recompiling and evaluation-only steps): rank 0's counts "
            "step 0 too: 12.0 ms per step over its own 5 steps. A rank's own figures (its Why, "
            "and the key metrics of the rank the details come from) count its own steps.")
    markdown = render_markdown(report)
    assert "| Mean annotated step (its range alone) | 12.0 ms |" in markdown
    assert markdown.index(note) > markdown.index("| 1 | Compute-bound | 10.2 ms |")
    assert run.job.common_steps_note == note
    assert note.replace("'", "&#39;") in render_html(report)
    assert json.loads(render_json(report))["runs"][0]["job"]["common_steps_note"] == note
    write_rank(tmp_path, 1, compute_us=9000, comm_us=1000, first_extra_us=9000)
    alike = analyze_paths([tmp_path], AnalyzeOptions()).runs[0].job
    assert alike.common_steps_note is None


def test_the_per_rank_chart_says_which_steps_its_bars_count(tmp_path: Path) -> None:
    """The ranks of the test above: the per-rank chart's bars (10.2 ms each, steps 1-4) count
    fewer steps than rank 0's key metrics (12.0 ms, steps 0-4), and the chart, drawn in the
    details far from the per-rank table and its note, said nothing of it. The analysis gives
    the chart its own note (the same words), shown under the chart and in report.json."""
    write_rank(tmp_path, 0, compute_us=9000, comm_us=1000, first_extra_us=9000)
    write_rank(tmp_path, 1, compute_us=9000, comm_us=1000, first_extra_us=15000)
    report = analyze_paths([tmp_path], AnalyzeOptions())
    run = report.runs[0]
    note = run.job.common_steps_note
    assert note is not None and note.startswith("The mean steps count steps 1 to 4")
    assert run.metrics.per_rank_steps_note == note
    chart = next(c for c in run_charts(run, 0) if c.id == "chart-run0-ranks")
    assert chart.note == note
    html = render_html(report)
    assert '<figcaption class="note">' + note.replace("'", "&#39;") + "</figcaption>" in html
    assert json.loads(render_json(report))["runs"][0]["metrics"]["per_rank_steps_note"] == note
    write_rank(tmp_path, 1, compute_us=9000, comm_us=1000, first_extra_us=9000)
    alike = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert alike.metrics.per_rank_steps_note is None
    assert next(c for c in run_charts(alike, 0) if c.id == "chart-run0-ranks").note is None


def test_ranks_given_as_separate_inputs_are_said_to_be_other_runs(tmp_path: Path) -> None:
    """'analyze rank0.json rank1.json' (each input one run): the two ranks of one job were
    compared as two runs ('rank1 vs rank0: 1.00x'), each run's note saying only that the other
    rank was not given. Each run now names the inputs holding the ranks it lacks (a second
    trace of rank 0 too: which is of the same job, the inputs do not say)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    zero = write_rank(tmp_path / "a", 0, compute_us=9000, comm_us=1000)
    one = write_rank(tmp_path / "b", 1, compute_us=9000, comm_us=1000)
    other_zero = write_rank(tmp_path, 0, compute_us=9000, comm_us=1000)
    runs = analyze_paths([zero, one, other_zero], AnalyzeOptions()).runs
    said = [[note for note in run.notes if note.startswith("other inputs")] for run in runs]
    assert said == [
        ["other inputs hold ranks of a job of 2 this run lacks (rank 1 in rank1): each input is "
         "one run, so they are compared as runs, not read as one job's ranks; if they are one "
         "job, give its traces in one folder"],
        ["other inputs hold ranks of a job of 2 this run lacks (rank 0 in rank0; rank 0 in "
         "rank0-2): each input is one run, so they are compared as runs, not read as one job's "
         "ranks; if they are one job, give its traces in one folder"],
        ["other inputs hold ranks of a job of 2 this run lacks (rank 1 in rank1): each input is "
         "one run, so they are compared as runs, not read as one job's ranks; if they are one "
         "job, give its traces in one folder"]]


def test_slow_rank_is_named_and_the_disagreement_explained(tmp_path: Path) -> None:
    """Rank 1 computes 28 ms per step, rank 0 only 9 ms and then sits 10 ms in the all-reduce:
    rank 1 is the straggler (29.7 ms per step against 19.2 ms), the job is compute-bound like
    it, and rank 0's communication-bound verdict is explained as waiting for rank 1."""
    write_rank(tmp_path, 0, compute_us=9000, comm_us=10000)
    write_rank(tmp_path, 1, compute_us=28000, comm_us=1500)
    report = analyze_paths([tmp_path], AnalyzeOptions())
    job = report.runs[0].job
    verdicts = {r.rank: (r.verdict, r.step_ns) for r in job.ranks}
    assert verdicts == {0: ("communication-bound", 19_200_000), 1: ("compute-bound", 29_700_000)}
    assert job.ranks[0].comm_exposed_fraction == pytest.approx(10_000 / 19_200)
    assert (job.slowest_rank, job.slowest_step_ns, job.others_step_ns) == (1, 29_700_000,
                                                                          19_200_000)
    assert job.straggler is True and job.verdict == "compute-bound"
    assert job.verdict_reason.startswith(
        "rank 1, the slowest, takes 29.7 ms per step against 19.2 ms for the other ranks "
        "(+54.7%) and the job runs at its pace: ")
    assert job.disagreement == (
        "Ranks disagree (rank 0 communication-bound; rank 1 compute-bound): the other ranks "
        "wait inside the collectives for rank 1 (exposed communication: rank 0 52% of its "
        "step, rank 1 5.1%), so their communication is rank 1's compute-bound time seen from "
        "outside.")
    assert ("Rank 1 is a straggler: 29.7 ms per step against 19.2 ms for the others."
            in render_markdown(report))
    page = render_html(report)
    assert "Rank 1 is a straggler" in page and "Ranks disagree (rank 0" in page
    # The run's verdict is the job's: the straggler's, not the detailed rank 0's.
    run = report.runs[0]
    assert run.verdict == "compute-bound" and run.verdict_reason.startswith(job.verdict_reason)
    assert run.verdict_reason.endswith("(the findings below come from rank 0's profile, which "
                                       "reads communication-bound)")
    assert (run.verdict_confidence, run.verdict_margin) == (job.ranks[1].confidence,
                                                            job.ranks[1].margin)
    assert job.ranks[1].confidence in ("high", "medium", "low")


def test_ranks_that_keep_pace_wait_for_the_one_that_computes_longest(tmp_path: Path) -> None:
    """Rank 1 computes 10 ms and then sits 10.3 ms in the all-reduce waiting for rank 0, which
    computes 19 ms: rank 1 is the slowest by step time (20.5 against 20.2 ms), by less than the
    straggler lag, yet the job waits for rank 0, so the job's verdict is rank 0's compute-bound
    and rank 1's communication-bound verdict is explained as that wait."""
    write_rank(tmp_path, 0, compute_us=19000, comm_us=1000)
    write_rank(tmp_path, 1, compute_us=10000, comm_us=10300)
    job = analyze_paths([tmp_path], AnalyzeOptions()).runs[0].job
    assert {r.rank: r.verdict for r in job.ranks} == {0: "compute-bound",
                                                      1: "communication-bound"}
    assert job.straggler is False and job.paced_by == 0 and job.verdict == "compute-bound"
    assert "rank 0 waits least inside the collectives (5.0% of its step exposed), so the " \
        "others wait for it" in job.verdict_reason
    assert job.disagreement.endswith(
        "the other ranks wait inside the collectives for rank 0 (exposed communication: rank 1 "
        "50% of its step, rank 0 5.0%), so their communication is rank 0's compute-bound time "
        "seen from outside.")


def test_ranks_that_wait_alike_wait_for_none_of_them(tmp_path: Path) -> None:
    """Both ranks compute about 10 ms and sit about 10 ms in the all-reduce (as two gloo ranks
    sharing two cores do): rank 0's exposed communication is lower, but by less than
    PACE_EXPOSED_MARGIN, so it is not the rank the other waits for."""
    write_rank(tmp_path, 0, compute_us=10000, comm_us=9500)
    write_rank(tmp_path, 1, compute_us=10400, comm_us=10200)
    report = analyze_paths([tmp_path], AnalyzeOptions())
    job = report.runs[0].job
    exposed = [r.comm_exposed_fraction for r in job.ranks]
    # Nothing overlaps the all-reduce: 9500 / (10000 + 9500 + 200) and 10200 / 20800 µs, 0.8
    # points apart, under PACE_EXPOSED_MARGIN.
    assert exposed == [pytest.approx(9500 / 19700, rel=1e-9), pytest.approx(10200 / 20800,
                                                                             rel=1e-9)]
    assert exposed[1] - exposed[0] < PACE_EXPOSED_MARGIN
    assert job.straggler is False and job.paced_by == job.slowest_rank == 1
    assert "waits least" not in job.verdict_reason
    assert "they wait alike inside the collectives (" in job.verdict_reason
    assert "(the others wait for it)" not in render_markdown(report)


def test_the_rank_table_names_what_marks_the_steps(tmp_path: Path) -> None:
    """Ranks whose steps are the repeated 'iteration N' span (no ProfilerStep): the per-rank
    table's step column says so, as the key metrics do, instead of 'Mean annotated step'."""
    for number in (0, 1):
        write_rank(tmp_path, number, compute_us=9000, comm_us=1000, step_name="iteration {}")
    report = analyze_paths([tmp_path], AnalyzeOptions())
    ranks = report.runs[0].job.ranks
    assert [r.step_marker for r in ranks] == [
        "repeated span 'iteration #', start to next start"] * 2
    header = ("| Rank | Verdict | Mean step (repeated span 'iteration \\#', start to next start) "
              "| Communication |")
    assert header in render_markdown(report)
    assert "<th class=\"num\">Mean step (repeated span &#39;iteration #&#39;, start to next " \
        "start)</th>" in \
        render_html(report)


def rank(number: int, verdict: str, step_ms: float, comm: float | None) -> RankVerdict:
    """A rank's own verdict built by hand."""
    return RankVerdict(number, verdict, f"rank {number}'s reason", round(step_ms * 1e6),  # type: ignore[arg-type]
                       comm, comm)


def test_a_rank_without_collectives_is_not_read_as_free_of_communication() -> None:
    """Rank 1's trace records no collectives while rank 0's hold 31%: the disagreement says the
    job communicates and rank 1's trace is incomplete, not that rank 1 has no communication."""
    job = job_analysis([rank(1, "host-bound", 100, None), rank(0, "communication-bound", 101,
                                                                  0.31)])
    assert [r.rank for r in job.ranks] == [0, 1] and job.straggler is False
    assert job.verdict == "communication-bound" and job.slowest_rank == 0
    assert job.disagreement == (
        "Ranks disagree (rank 0 communication-bound; rank 1 host-bound): rank 1 recorded no "
        "collectives although rank 0 did: the job communicates, so its trace is incomplete there "
        "rather than the rank free of communication.")


def test_ranks_that_tie_have_no_slowest() -> None:
    """Ranks whose steps take the same time (to the 0.1% shown) are not said to have a slowest
    rank lagging by +0.0%: not in the sentence, the JSON's slowest_rank nor the table (where
    rank 0, first in order, read 'rank 0 (slowest)' beside rank 1's equal 100.0 ms)."""
    job = job_analysis([rank(0, "compute-bound", 100, 0.10), rank(1, "compute-bound", 100, 0.12)])
    assert "every rank takes 100.0 ms per step" in job.verdict_reason
    assert "slowest" not in job.verdict_reason and "+0.0%" not in job.verdict_reason
    assert job.slowest is None and job.slowest_rank is None
    # They wait alike (2 points apart): the job's verdict is rank 0's, none is marked.
    assert job.paced_by == 0 and job.pacer is None


def test_the_rank_table_marks_no_slowest_of_ranks_that_tie(tmp_path: Path) -> None:
    """Two ranks of identical 10.2 ms steps: the per-rank table marks neither slowest nor the
    one the other waits for."""
    for number in (0, 1):
        write_rank(tmp_path, number, compute_us=9000, comm_us=1000)
    report = analyze_paths([tmp_path], AnalyzeOptions())
    job = report.runs[0].job
    assert [r.step_ns for r in job.ranks] == [10_200_000, 10_200_000]
    assert json.loads(render_json(report))["runs"][0]["job"]["slowest_rank"] is None
    table = render_markdown(report)
    assert "| 0 | Compute-bound | 10.2 ms |" in table and "| 1 | Compute-bound | 10.2 ms |" in table


def test_one_rank_is_no_job() -> None:
    """A single process has no job view; ranks that time no steps give the lowest rank's
    verdict and no slowest rank."""
    assert job_analysis([rank(0, "compute-bound", 10, None)]) is None
    untimed = job_analysis([RankVerdict(3, "unknown", "no steps", None),
                            RankVerdict(2, "unknown", "no steps", None)])
    assert untimed.verdict == "unknown" and untimed.slowest_rank is None
    assert untimed.verdict_reason == "rank 2: no steps"


def test_a_rank_with_two_profiles_counts_once(tmp_path: Path) -> None:
    """Two traces of rank 1 (copied under another name) and one of rank 0: the job has two ranks,
    and rank 0's verdict (its profile read whole for the detailed analysis) is there too."""
    write_rank(tmp_path, 0, compute_us=9000, comm_us=10000)
    second = write_rank(tmp_path, 1, compute_us=28000, comm_us=1500)
    (tmp_path / "rank1_copy.pt.trace.json").write_text(second.read_text())
    job = analyze_paths([tmp_path], AnalyzeOptions()).runs[0].job
    assert [(r.rank, r.step_ns) for r in job.ranks] == [(0, 19_200_000), (1, 29_700_000)]


def test_single_rank_trace_has_no_job(corpus: Path) -> None:
    """The HTA NCCL trace is rank 0 alone: no job view (and no second analysis of the rank)."""
    report = analyze_paths([corpus / "hta" / "nccl_data.json.gz"], AnalyzeOptions())
    assert report.runs[0].job is None
    assert json.loads(render_json(report))["runs"][0]["job"] is None


def test_a_rank_other_than_0_given_alone_is_analysed_in_full(tmp_path: Path) -> None:
    """A trace whose distributedInfo gives rank 5, given alone, is analysed like rank 0 would
    be: its five ProfilerStep spans and ten kernels make the steps, breakdown and verdict."""
    path = write_rank(tmp_path, 5, compute_us=800, comm_us=100, world_size=8)
    run = analyze_paths([path], AnalyzeOptions()).runs[0]
    assert run.verdict == "compute-bound"
    assert run.metrics.steps.count == 5 and run.metrics.steps.mean_ns == 1_100_000
    assert run.metrics.breakdown.parts_ns["compute"] == 800_000
    assert run.metrics.launch.kernels_per_step == 2
    assert run.inputs[0].rank == 5 and run.job is None
    assert run.timeline is not None and run.detailed_rank == 5


def test_ranks_2_and_3_of_4_are_analysed_with_rank_2_detailed(tmp_path: Path) -> None:
    """Ranks 2 and 3 of a job kept without ranks 0 and 1: both ranks get their verdicts, and
    the detailed figures come from rank 2, the lowest present (its 300 µs of NCCL per step,
    not rank 3's 50 µs)."""
    write_rank(tmp_path, 2, compute_us=600, comm_us=300, world_size=4)
    write_rank(tmp_path, 3, compute_us=600, comm_us=50, world_size=4)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert [r.rank for r in run.job.ranks] == [2, 3]
    assert run.metrics.comm.total_ns_per_step == 300_000
    assert run.metrics.steps.count == 5 and run.metrics.breakdown is not None
    assert run.metrics.per_rank_step_ns == {2: 1_100_000, 3: 850_000}
    assert run.detailed_rank == 2
    assert ("_The figures and findings below come from rank 2's profile, the lowest rank "
            "present._") in render_markdown(analyze_paths([tmp_path], AnalyzeOptions()))


def test_a_real_trace_rewritten_to_rank_3_reads_like_rank_0(corpus: Path, tmp_path: Path) -> None:
    """The AMD TraceLens trace (rank 0 of 8) with only distributedInfo.rank rewritten to 3 gets
    the same steps, breakdown and verdict as the original."""
    source = corpus / "wild" / "tracelens_mi300x_resnet_actckpt_rank0of8.json.gz"
    document = json.loads(gzip.decompress(source.read_bytes()))
    document["distributedInfo"]["rank"] = 3
    rank3 = tmp_path / "rank3.json"
    rank3.write_text(json.dumps(document))
    original, moved = (analyze_paths([p], AnalyzeOptions()).runs[0] for p in (source, rank3))
    assert moved.inputs[0].rank == 3 and moved.verdict == original.verdict
    assert moved.metrics.steps == original.metrics.steps
    assert moved.metrics.breakdown.parts_ns == original.metrics.breakdown.parts_ns


def test_one_rank_of_a_job_says_the_others_were_not_given(tmp_path: Path) -> None:
    """Rank 1 of a 2-rank job alone (its distributedInfo says world_size 2), waiting 10 ms per
    step in the all-reduce: the report says that time may be waiting for the rank not given,
    which its trace cannot tell apart from the transfer; with both ranks, no such note."""
    alone = write_rank(tmp_path, 1, compute_us=9000, comm_us=10000)
    run = analyze_paths([alone], AnalyzeOptions()).runs[0]
    assert run.world_size == 2 and run.job is None
    assert run.notes == [
        "only rank 1 of the job's 2 ranks given: the time in collectives includes waiting for "
        "the other ranks, which its trace cannot tell apart from the transfer itself (give "
        "every rank's trace to see which rank the job waits for)"]
    rank0 = write_rank(tmp_path, 0, compute_us=9000, comm_us=10000)
    assert analyze_paths([tmp_path], AnalyzeOptions()).runs[0].notes == []
    # Rank 0's trace given but cut short (a real truncated rank trace): it was 'only rank 1 of
    # the job's 2 ranks given', though it was given; now it says it could not be read.
    rank0.write_text(rank0.read_text()[:3000])
    report = analyze_paths([tmp_path], AnalyzeOptions())
    assert report.runs[0].notes[0].startswith(
        "only rank 1 of the job's 2 ranks read (1 file of this run could not be read): the time "
        "in collectives includes waiting for the other ranks")
    assert report.failures == [f"{rank0}: truncated trace: the file ends inside traceEvents"]


def test_only_the_ranks_that_wait_alike_are_said_to() -> None:
    """Three ranks keeping pace: ranks 0 and 1 expose 10% and 12% of their step, rank 2 60%.
    No single rank is waited for, and the sentence names the two that wait alike, not a
    '10% to 60%' that every rank would share."""
    job = job_analysis([rank(0, "compute-bound", 100, 0.10), rank(1, "compute-bound", 100, 0.12),
                        rank(2, "communication-bound", 101, 0.60)])
    assert "the 2 ranks that wait least wait alike inside the collectives (10% to 12% of each " \
        "step exposed), so none is the one the others wait for" in job.verdict_reason
    assert "60%" not in job.verdict_reason.split("exposed)")[0]


def test_the_detailed_rank_waiting_for_another_takes_its_verdict_and_advice(
        tmp_path: Path) -> None:
    """Rank 0 computes 10 ms and sits 10.3 ms in the all-reduce waiting for rank 1, which
    computes 19 ms: the ranks keep pace (no straggler by step time), the job waits for rank 1,
    so the run's verdict is rank 1's compute-bound, not the detailed rank 0's
    communication-bound; rank 0's COMM_OVERHEAD says its communication is that wait and that
    the collectives cost at most rank 1's 5.0%, instead of tuning the all-reduce alone."""
    write_rank(tmp_path, 0, compute_us=10000, comm_us=10300)
    write_rank(tmp_path, 1, compute_us=19000, comm_us=1000)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    job = run.job
    assert {r.rank: r.verdict for r in job.ranks} == {0: "communication-bound",
                                                      1: "compute-bound"}
    assert job.straggler is False and job.paced_by == 1
    assert run.verdict == "compute-bound"
    assert run.verdict_reason.endswith("(the findings below come from rank 0's profile, which "
                                       "reads communication-bound)")
    comm = next(f for f in run.findings if f.id == "COMM_OVERHEAD")
    assert comm.severity == "low"  # the all-reduce itself: 5.0% of rank 1's step exposed
    assert comm.evidence[-1].text == (
        "rank 1, the rank the job waits for, has 5.0% of its step exposed in the same "
        "collectives: the rest of this rank's 50% is waiting for rank 1 to join them")
    assert comm.recommendation.startswith("Most of this communication is waiting for rank 1 "
                               "(compute-bound: ")
    assert "the collectives themselves cost at most 5.0% of the step." in comm.recommendation


def test_an_unknown_rank_verdict_names_its_line_profiles_slowest_line(tmp_path: Path) -> None:
    """Two CPU ranks whose torch.profiler steps are 90% time no operator covers (unknown), and
    rank 1's line profile (its rank from the manifest) timing a sleep in the loop: rank 1's
    verdict names that line, rank 0's (no line profile) stays as it was."""
    import pickle

    from line_profiler.line_profiler import LineStats

    from profreport.manifest import Artifact, Manifest, write_manifest

    artifacts = []
    for rank in (0, 1):
        events = []
        for n in range(5):
            start = 1000 + n * 10_000
            events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}",
                        "pid": 1, "tid": 1, "ts": start, "dur": 10_000, "args": {}},
                       {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
                        "ts": start + 9000, "dur": 1000, "args": {}}]
        (tmp_path / f"rank{rank}.pt.trace.json").write_text(json.dumps(
            {"schemaVersion": 1, "traceEvents": events,
             "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}))
        artifacts.append(Artifact(f"rank{rank}.pt.trace.json", "torch.profiler", rank))
    (tmp_path / "train.py").write_text("def train(loader):\n    for x in loader:\n"
                                       "        time.sleep(0.009)\n        step(x)\n")
    timings = {("train.py", 1, "train"): [(2, 6, 500_000), (3, 5, 45_000_000),
                                          (4, 5, 5_000_000)]}
    (tmp_path / "train.rank1.lprof").write_bytes(pickle.dumps(LineStats(timings, 1e-9)))
    artifacts.append(Artifact("train.rank1.lprof", "kernprof", 1))
    write_manifest(tmp_path, Manifest(name="ddp", workload="script train.py", knobs={},
                                      environment={}, artifacts=artifacts))
    job = analyze_paths([tmp_path], AnalyzeOptions()).runs[0].job
    reasons = {r.rank: (r.verdict, r.verdict_reason) for r in job.ranks}
    assert reasons[0] == ("unknown", "90% of the step is time torch.profiler cannot attribute "
                                     "(no GPU events, CPU operators or source lines)")
    assert reasons[1] == ("unknown", "90% of the step is time torch.profiler cannot attribute "
                                     "(no GPU events, CPU operators or source lines); the "
                                     "slowest line of its training loop is train.py:3 "
                                     "(time.sleep(0.009)), 89% of train() (45.0 ms over 5 hits)")


def test_a_rank_verdict_names_its_loops_slowest_line_not_its_set_up(tmp_path: Path) -> None:
    """Rank 1's line profile (kernprof under torchrun, timings of a real run): building the
    DDP model took 1,986.8 ms once, the loop's time.sleep(0.02) 241.1 ms over 12 passes. Its
    unknown verdict named the set-up line, none of the step's time; it now names the sleep,
    and a line profile without a training loop names none."""
    import pickle

    from line_profiler.line_profiler import LineStats

    from profreport.parsers import lprof

    (tmp_path / "train.py").write_text(
        "def main():\n    model = DDP(net)\n    dl = DataLoader(ds, batch_size=32)\n"
        "    for i, (x, y) in enumerate(dl):\n"
        "        if i >= steps:\n            break\n        time.sleep(0.02)\n"
        "        step(x, y)\n")
    for name, timings in (("loop", [(2, 1, 1_986_805_300), (3, 1, 266_700), (4, 13, 4_446_200),
                                    (5, 13, 10_300), (6, 1, 8_200), (7, 12, 241_129_600),
                                    (8, 12, 45_070_700)]),
                          ("set-up", [(2, 1, 1_986_805_300)])):
        path = tmp_path / f"{name}.lprof"
        path.write_bytes(pickle.dumps(LineStats({("train.py", 1, "main"): timings}, 1e-9)))
        line = slowest_loop_line(lprof.parse(path))
        assert ((line.lineno, line.hits, line.time_ns) if line else None) == (
            (7, 12, 241_129_600) if name == "loop" else None)


def write_nsys_rank(folder: Path, step_us: int, steps: int = 5) -> Path:
    """An nsys export of one rank: ``steps`` 'step N' NVTX ranges of ``step_us``, each a
    600 µs kernel its cudaLaunchKernel launched (the rank comes from the manifest)."""
    us = 1000
    kernels, ranges, runtime = [], [], []
    for n in range(steps):
        start = 1_000_000 + n * step_us * us
        ranges.append((start, start + step_us * us, f"step {n}"))
        runtime.append((start + 10 * us, start + 15 * us, n + 1, "cudaLaunchKernel"))
        kernels.append((start + 100 * us, start + 700 * us, n + 1, COMPUTE_KERNEL))
    return write_nsys_export(folder / "rank0.sqlite", kernels, ranges, runtime)


def write_job(folder: Path, files: dict[str, tuple[str, int]]) -> Path:
    """A run folder whose manifest lists ``files`` (path -> profiler, rank)."""
    artifacts = [{"path": path, "profiler": profiler, "rank": rank}
                 for path, (profiler, rank) in files.items()]
    (folder / "manifest.json").write_text(json.dumps({
        "schema": MANIFEST_SCHEMA, "name": folder.name, "workload": "hand-built",
        "artifacts": artifacts}))
    return folder


def test_every_rank_is_timed_by_the_one_profiler_all_ranks_have(tmp_path: Path) -> None:
    """Rank 0 profiled by nsys (900 µs steps) and torch.profiler (1400 µs), rank 1 by
    torch.profiler alone (1400 µs): every rank's step time and verdict are torch.profiler's, so
    the ranks keep pace. Each rank's own preferred profiler had set rank 0's nsys 900 µs beside
    rank 1's torch.profiler 1400 µs and named rank 1 a straggler (+55.6%)."""
    write_nsys_rank(tmp_path, 900)
    write_rank(tmp_path, 0, compute_us=1000, comm_us=200)
    write_rank(tmp_path, 1, compute_us=1000, comm_us=200)
    write_job(tmp_path, {"rank0.sqlite": ("nsys", 0),
                         "rank0.pt.trace.json": ("torch.profiler", 0),
                         "rank1.pt.trace.json": ("torch.profiler", 1)})
    report = analyze_paths([tmp_path], AnalyzeOptions())
    run = report.runs[0]
    job = run.job
    assert [(r.rank, r.step_ns) for r in job.ranks] == [(0, 1_400_000), (1, 1_400_000)]
    # Rank 0's verdict is read from its torch.profiler trace too, which records rank 1's figures.
    zero, one = job.ranks
    assert (zero.verdict, zero.verdict_reason, zero.comm_fraction) == (
        one.verdict, one.verdict_reason, one.comm_fraction)
    assert zero.comm_fraction == pytest.approx(200 / 1400)
    assert run.metrics.per_rank_step_ns == {0: 1_400_000, 1: 1_400_000}
    assert job.straggler is False and job.steps_origin == "kineto"
    assert job.steps_unknown_reason is None
    assert run.metrics.steps.origin == "nsys"  # the detailed figures keep the rank's own source
    data = json.loads(render_json(report))["runs"][0]["job"]
    assert (data["steps_origin"], data["steps_unknown_reason"]) == ("kineto", None)


def test_a_rank_its_step_profiler_cannot_attribute_takes_another_profiles_verdict(
        tmp_path: Path) -> None:
    """A CPU DDP run (--script ddp.py --nproc 2, gloo): nsys timed both ranks' steps but on a
    CPU records no operators, so each rank's verdict from it was unknown ('Job of 2 ranks:
    Unknown') beside the run's communication-bound verdict from torch.profiler. Each rank now
    takes its torch.profiler trace's verdict and shares, its step time still nsys's."""
    files: dict[str, tuple[str, int]] = {}
    for rank in (0, 1):
        start = 1_000_000
        ranges = [(start + n * 1_500_000, start + (n + 1) * 1_500_000, f"step {n}")
                  for n in range(5)]
        write_nsys_export(tmp_path / f"rank{rank}.sqlite", [], ranges, [])
        write_rank(tmp_path, rank, compute_us=300, comm_us=4000 + 500 * rank)
        files |= {f"rank{rank}.sqlite": ("nsys", rank),
                  f"rank{rank}.pt.trace.json": ("torch.profiler", rank)}
    write_job(tmp_path, files)
    job = analyze_paths([tmp_path], AnalyzeOptions()).runs[0].job
    assert job.steps_origin == "nsys"
    assert [(r.rank, r.verdict, r.step_ns) for r in job.ranks] == [
        (0, "communication-bound", 1_500_000), (1, "communication-bound", 1_500_000)]
    assert job.ranks[1].comm_fraction == pytest.approx(4500 / 5000)
    assert job.verdict == "communication-bound"


def test_ranks_no_profiler_timed_all_of_have_no_step_times(tmp_path: Path) -> None:
    """Rank 0 profiled by nsys alone (900 µs steps), rank 1 by torch.profiler alone (1400 µs):
    no profiler timed both, so no rank has a step time, no straggler is named and the job says
    why, rather than set nsys's 900 µs beside torch.profiler's 1400 µs."""
    write_nsys_rank(tmp_path, 900)
    write_rank(tmp_path, 1, compute_us=1000, comm_us=200)
    write_job(tmp_path, {"rank0.sqlite": ("nsys", 0),
                         "rank1.pt.trace.json": ("torch.profiler", 1)})
    report = analyze_paths([tmp_path], AnalyzeOptions())
    run = report.runs[0]
    job = run.job
    why = ("no profiler timed the steps of every rank (rank 0: Nsight Systems; rank 1: "
           "torch.profiler), and each profiler slows a step by its own amount, so step times of "
           "two profilers are not compared")
    assert [(r.rank, r.step_ns) for r in job.ranks] == [(0, None), (1, None)]
    assert run.metrics.per_rank_step_ns == {}
    assert job.steps_origin is None and job.steps_unknown_reason == why
    assert job.slowest is None and job.straggler is False
    assert job.verdict_reason.startswith(f"the ranks' step times are unknown: {why}; rank 0: ")
    assert f"The ranks' step times are unknown: {why}; rank 0: " in render_markdown(report)
    assert json.loads(render_json(report))["runs"][0]["job"]["steps_unknown_reason"] == why


def test_ranks_cut_before_the_first_step_are_said_to_hold_nothing(tmp_path: Path) -> None:
    """Every rank's profiler stopped before the first step (torch.profiler's trace then holds
    only its own 'PyTorch Profiler' span): the run holds nothing to analyse, as one file alone
    says; the reason read 'no step markers ... no GPU activity', because no rank without steps
    came back whole for the detailed analysis."""
    for rank in (0, 1):
        document = {"schemaVersion": 1, "distributedInfo": {"backend": "gloo", "rank": rank,
                                                            "world_size": 2},
                    "traceEvents": [{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)",
                                     "pid": "Spans", "tid": "PyTorch Profiler", "ts": 1000.0,
                                     "dur": 206.3, "args": {"Op count": 0}}]}
        (tmp_path / f"rank{rank}.pt.trace.json").write_text(json.dumps(document))
    for given in ([tmp_path], [tmp_path / "rank0.pt.trace.json"]):
        run = analyze_paths(given, AnalyzeOptions()).runs[0]
        assert run.verdict == "unknown" and run.verdict_reason.startswith(
            "nothing to analyse: no kernels, copies, operators, ranges, steps or lines recorded")
        assert run.detailed_rank is None and run.findings == []


def test_one_rank_of_a_job_reads_communication_bound_with_low_confidence(tmp_path: Path
                                                                          ) -> None:
    """Rank 1 of 2 alone, half its step in an all-reduce: it was 'communication-bound,
    confidence high' with advice to tune DDP's all-reduce, although its trace cannot tell the
    wait for rank 0 (maybe a straggler) from the transfer. Now the confidence is low, the
    reason says why, and the advice asks for every rank's trace first; with both, unchanged."""
    alone = write_rank(tmp_path, 1, compute_us=9000, comm_us=10000)
    run = analyze_paths([alone], AnalyzeOptions()).runs[0]
    assert run.verdict == "communication-bound" and run.verdict_confidence == "low"
    assert run.verdict_reason.endswith(
        "; but only rank 1 of the job's 2 ranks given, and how much of that is waiting for the "
        "others its trace cannot tell")
    comm = next(f for f in run.findings if f.id == "COMM_OVERHEAD")
    assert comm.recommendation.startswith(
        "First profile every rank (only rank 1 of the job's 2 ranks given): this rank's time in "
        "the collectives includes waiting")
    write_rank(tmp_path, 0, compute_us=9000, comm_us=10000)
    both = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert both.verdict == "communication-bound" and both.verdict_confidence == "high"
    assert "given" not in both.verdict_reason
    comm = next(f for f in both.findings if f.id == "COMM_OVERHEAD")
    assert "every rank" not in comm.recommendation


def test_a_trace_of_collectives_without_distributed_info_is_no_job_of_one(tmp_path: Path
                                                                          ) -> None:
    """The same rank's trace without distributedInfo (a torch older than it, or stripped, as
    the MI300X rank-0-of-8 trace read without it): its all-reduce kernels are a process
    group's, yet it was read as a job of one (world_size 1) and 'communication-bound,
    confidence high', its advice to tune DDP's all-reduce. Now the job's size is unknown, the
    confidence low, and the reason, advice and notes say that one process was given."""
    path = write_rank(tmp_path, 1, compute_us=9000, comm_us=10000)
    document = json.loads(path.read_text())
    del document["distributedInfo"]
    path.write_text(json.dumps(document))
    report = analyze_paths([path], AnalyzeOptions())
    run = report.runs[0]
    assert run.world_size is None
    assert json.loads(render_json(report))["runs"][0]["world_size"] is None
    assert run.verdict == "communication-bound" and run.verdict_confidence == "low"
    given = "only one process given, its rank and the job's size not recorded"
    assert run.verdict_reason.endswith(f"; but {given}, and how much of that is waiting for the "
                                       "others its trace cannot tell")
    comm = next(f for f in run.findings if f.id == "COMM_OVERHEAD")
    assert comm.recommendation.startswith(f"First profile every rank ({given}): ")
    assert f"{given}: the time in collectives includes waiting" in render_markdown(report)


def test_a_gpu_kept_busy_by_its_collectives_is_not_compute_bound(tmp_path: Path) -> None:
    """Both ranks of a job, each step 3 ms of compute then a 14 ms all-reduce (the MI300X
    rank-0-of-8 trace: 95% busy, 82% of the step in RCCL): communication-bound, and beside it
    COMPUTE_BOUND 'The GPU's kernels set the pace of training', counting the all-reduce as
    busy compute, its advice ending in 'or more GPUs'. The GPU is busy with collectives, not
    with the model's math: no COMPUTE_BOUND. With the all-reduce under 20% of the step, as
    before."""
    for rank in (0, 1):
        write_rank(tmp_path, rank, compute_us=3000, comm_us=14000)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert run.metrics.gpu.busy_fraction > 0.95 and run.metrics.comm.exposed_fraction > 0.8
    assert run.verdict == "communication-bound"
    assert "COMPUTE_BOUND" not in {f.id for f in run.findings}
    light = tmp_path / "light"
    light.mkdir()
    for rank in (0, 1):
        write_rank(light, rank, compute_us=14000, comm_us=3000)
    run = analyze_paths([light], AnalyzeOptions()).runs[0]
    assert run.verdict == "compute-bound" and run.verdict_reason.startswith("GPU busy 9")
    assert "COMPUTE_BOUND" in {f.id for f in run.findings}


def test_communication_rows_name_their_denominators(tmp_path: Path) -> None:
    """Rank 1 of 2, 3 steps of 9 ms compute then a 10 ms all-reduce, and a second 2 ms
    all-reduce running beside the compute kernel in two of them: 5 calls in 3 steps, 4 ms of
    34 ms of communication under compute. The metrics table gave 'Communication exposed (not
    hidden by compute) 52.1%' (of the step) above 'Communication overlapping compute 11.8%'
    (of the communication) with nothing saying which is which, and the finding '1.66667
    calls per step' beside the table's '1.7'."""
    path = write_rank(tmp_path, 1, compute_us=9000, comm_us=10000, steps=3)
    document = json.loads(path.read_text())
    kernels = [e for e in document["traceEvents"] if e["name"] == COMPUTE_KERNEL]
    for n, kernel in enumerate(kernels[:2]):
        correlation = 1000 + n
        document["traceEvents"] += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 101,
             "tid": 101, "ts": kernel["ts"] - 20, "dur": 5, "args": {"correlation": correlation}},
            {"ph": "X", "cat": "kernel", "name": NCCL_KERNEL, "pid": 0, "tid": 8,
             "ts": kernel["ts"] + 1000, "dur": 2000,
             "args": {"correlation": correlation, "stream": 8, "device": 0}}]
    path.write_text(json.dumps(document))
    report = analyze_paths([path], AnalyzeOptions())
    comm = report.runs[0].metrics.comm
    assert comm.calls_per_step == 5 / 3
    assert round(comm.overlap_fraction, 4) == round(4000 / 34000, 4)
    text = render_markdown(report)
    assert (f"| Communication exposed (not hidden by compute), share of the step | "
            f"{comm.exposed_fraction:.1%} |") in text
    assert f"| Share of communication overlapping compute | {comm.overlap_fraction:.1%} |" in text
    assert "(11.3 ms per step, 1.7 calls per step)" in text


def test_ranks_of_two_runs_are_not_compared_as_one_job(tmp_path: Path) -> None:
    """Rank 0 of one run and rank 1 of another, the second recorded a minute later on the same
    wall clock (Kineto: ts plus baseTimeNanoseconds): rank 1 was named a straggler (29.7 ms
    per step against 19.2 ms) and rank 0's communication read as waiting for it, though neither
    ran beside the other. Now the job's verdict is unknown and says why; the same traces
    recorded together still name the straggler."""
    for rank, compute, comm, shift_us in ((0, 9000, 10000, 0), (1, 28000, 1500, 60_000_000)):
        path = write_rank(tmp_path, rank, compute_us=compute, comm_us=comm)
        document = json.loads(path.read_text())
        document["baseTimeNanoseconds"] = 1_790_857_026_000_000_000
        for event in document["traceEvents"]:
            event["ts"] += shift_us
        path.write_text(json.dumps(document))
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    job = run.job
    assert job.verdict == "unknown" and job.pacer is None and job.straggler is False
    assert job.verdict_reason == (
        "the ranks' traces were not recorded together: rank 1's steps start 59.90 s after "
        "rank 0's end (other steps of the job, or another run), so which rank the job waits "
        "for is unknown; each rank's own verdict is in the table")
    assert run.verdict == "communication-bound" and "rank 1" not in run.verdict_reason
    assert all("waiting for rank 1" not in e.text for f in run.findings for e in f.evidence)
    together = tmp_path / "together"
    together.mkdir()
    write_rank(together, 0, compute_us=9000, comm_us=10000)
    write_rank(together, 1, compute_us=28000, comm_us=1500)
    assert analyze_paths([together], AnalyzeOptions()).runs[0].job.straggler is True
    # Without baseTimeNanoseconds (the 2021 format) the clock is not said: no claim either way.
    for path in tmp_path.glob("rank*.pt.trace.json"):
        document = json.loads(path.read_text())
        del document["baseTimeNanoseconds"]
        path.write_text(json.dumps(document))
    assert analyze_paths([tmp_path], AnalyzeOptions()).runs[0].job.straggler is True


def _with_ddp_forwards(path: Path, per_step: int, syncing: int = 1) -> None:
    """Put ``per_step`` DistributedDataParallel.forward spans (user annotations, as torch
    records them) at the start of each ProfilerStep span of a write_rank trace, the last
    ``syncing`` of them each followed by its backward's gradient all-reduce (c10d::allreduce_
    inside autograd's AccumulateGrad, as DDP issues it; the others run under no_sync())."""
    document = json.loads(path.read_text())
    steps = [e for e in document["traceEvents"] if e["name"].startswith("ProfilerStep#")]

    def span(step: dict, name: str, at: int, dur: int, cat: str = "cpu_op") -> dict:
        """One span of ``step``'s thread, ``at`` µs into it."""
        return {"ph": "X", "cat": cat, "name": name, "pid": step["pid"], "tid": step["tid"],
                "ts": step["ts"] + at, "dur": dur, "args": {}}

    for step in steps:
        for k in range(per_step):
            document["traceEvents"].append(span(step, "DistributedDataParallel.forward",
                                                1 + 40 * k, 10, "user_annotation"))
            if k >= per_step - syncing:
                document["traceEvents"] += [
                    span(step, "autograd::engine::evaluate_function: "
                               "torch::autograd::AccumulateGrad", 15 + 40 * k, 20),
                    span(step, "c10d::allreduce_", 16 + 40 * k, 10)]
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(("per_step", "syncing"), [(1, 1), (2, 1), (2, 2)])
def test_accumulation_is_advised_beyond_the_passes_the_steps_already_make(
        tmp_path: Path, per_step: int, syncing: int) -> None:
    """Each step of both ranks runs 2 DDP forward passes, the first under no_sync() (its
    backward issues no all-reduce), as a real 2-rank gloo run with no_sync every other batch
    records: COMM_OVERHEAD advised 'use a larger local batch or gradient accumulation with
    no_sync()', which the run already does; it now asks for more than the 2 passes. With 1
    pass per step, or 2 passes that each sync (a model run twice with a backward each, as a
    real gloo run of that shape records: it was told it accumulated over 2), the advice is the
    plain one."""
    for rank in (0, 1):
        _with_ddp_forwards(write_rank(tmp_path, rank, compute_us=9000, comm_us=10000), per_step,
                           syncing)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert run.metrics.ddp_forwards_per_sync == per_step // syncing
    advice = next(f for f in run.findings if f.id == "COMM_OVERHEAD").recommendation
    if per_step // syncing == 2:
        assert ("accumulate gradients over more than the 2 forward passes each step runs now "
                "(its DistributedDataParallel.forward spans; no_sync() on all but the last), or "
                "use a larger local batch, so gradients are reduced less often") in advice
    else:
        assert advice.endswith("use a larger local batch or gradient accumulation with no_sync() "
                               "so gradients are reduced less often.")


def test_one_all_reduce_per_step_is_said_and_no_bucket_size_advised(tmp_path: Path) -> None:
    """Two ranks each running one all-reduce kernel of 10 ms after 9 ms of compute a step
    (10 / 19.2 ms = 52% exposed): COMM_OVERHEAD counts 1 call per step and, one bucket
    already holding every gradient, gives no bucket_cap_mb advice."""
    for rank in (0, 1):
        write_rank(tmp_path, rank, compute_us=9000, comm_us=10000)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    found = next(f for f in run.findings if f.id == "COMM_OVERHEAD")
    assert found.evidence[0].text == ("NCCL kernels take 52% of step time (10.0 ms per step, "
                                      "1 call per step)")
    assert found.recommendation == ("Tune DDP's gradient all-reduce: use a larger local batch "
                                    "or gradient accumulation with no_sync() so gradients are "
                                    "reduced less often.")


def test_a_comparison_says_the_communication_that_grew_is_waiting_for_a_straggler(
        tmp_path: Path) -> None:
    """Two 2-rank runs, the second with rank 1 computing 28 ms a step while rank 0 waits 10 ms
    in the all-reduce (as a real gloo run whose rank 1 slept 50 ms a step): the comparison
    blamed 'Communication (exposed) grew' alone, from rank 0's breakdown, though rank 0 waits
    for rank 1; it now says so, naming rank 1's own verdict."""
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for folder, compute1, comm0 in ((fast, 9000, 1500), (slow, 28000, 20500)):
        folder.mkdir()
        write_rank(folder, 0, compute_us=9000, comm_us=comm0)
        write_rank(folder, 1, compute_us=compute1, comm_us=1500)
    report = analyze_paths([fast, slow], AnalyzeOptions())
    row = report.comparison.rows[1]
    assert report.runs[1].waits_for is not None and report.runs[0].waits_for is None
    assert row.explanation.count("Communication (exposed) grew") == 1
    assert (" In slow, that communication is mostly rank 0 waiting inside the collectives for "
            "rank 1, the rank the job waits for (compute-bound: ") in row.explanation
    assert row.explanation.endswith("what grew is rank 1's own step, seen from outside.")
    fixed = analyze_paths([slow, fast], AnalyzeOptions()).comparison.rows[1].explanation
    assert (" In slow, that communication was mostly rank 0 waiting inside the collectives for "
            "rank 1, the rank the job waits for (compute-bound: ") in fixed
    assert fixed.endswith("what fell is rank 1's own step, seen from outside.")


def test_a_folder_of_run_folders_is_each_of_its_runs_in_the_order_they_ran(
        tmp_path: Path) -> None:
    """run-and-report's OUT/runs (it prints 'runs done in OUT/runs'), given to analyze: it was
    read as one run named 'runs' mixing every variant's profiles, with no comparison. Each run
    folder in it is now a run, in the order their manifests were written (the baseline first)."""
    import os

    root = tmp_path / "runs"
    for name, compute_us, written in (("zz-baseline", 3000, 1_000), ("aa-variant", 1500, 2_000)):
        folder = root / name
        folder.mkdir(parents=True)
        write_rank(folder, 0, compute_us=compute_us, comm_us=10, world_size=1)
        write_job(folder, {"rank0.pt.trace.json": ("torch.profiler", 0)})
        os.utime(folder / "manifest.json", ns=(written * 10**9, written * 10**9))
    report = analyze_paths([root], AnalyzeOptions())
    assert [run.name for run in report.runs] == ["zz-baseline", "aa-variant"]
    assert report.comparison.baseline == "zz-baseline"
    assert report.comparison.rows[1].step_speedup == pytest.approx(3210 / 1710, rel=1e-3)


def test_communication_that_grew_on_every_rank_is_not_said_to_be_waiting(tmp_path: Path
                                                                         ) -> None:
    """The second run's all-reduce takes 20.5 ms on rank 1 and 22.5 ms on rank 0, whose compute
    is 2 ms shorter: rank 0 waits 2 ms for rank 1 of its 22.5 ms exposed communication, and
    both ranks' communication grew. The row said that communication was 'mostly rank 0 waiting
    inside the collectives for rank 1 ... what grew is rank 1's own step'; it says that only
    where over MOSTLY_WAITING_SHARE of it lies beyond rank 1's own exposed communication."""
    fast, slow = tmp_path / "fast", tmp_path / "slow"
    for folder, compute1, comm0, comm1 in ((fast, 9000, 1500, 1500),
                                           (slow, 11000, 22500, 20500)):
        folder.mkdir()
        write_rank(folder, 0, compute_us=9000, comm_us=comm0)
        write_rank(folder, 1, compute_us=compute1, comm_us=comm1)
    report = analyze_paths([fast, slow], AnalyzeOptions())
    assert report.runs[1].waits_for is not None  # rank 1 still paces the job
    explanation = report.comparison.rows[1].explanation
    assert "Communication (exposed) grew 1.5 ms -> 22.5 ms" in explanation
    assert "waiting inside the collectives" not in explanation


def test_communication_barely_waiting_is_not_said_to_be_mostly_waiting(tmp_path: Path) -> None:
    """Rank 0 exposes 22.5 ms of all-reduce per step, rank 1 (2 ms more compute, the rank the
    job waits for) 20.5 ms: 2 ms of rank 0's is waiting. COMM_OVERHEAD said 'Most of this
    communication is waiting for rank 1', while the comparison's rule (job.mostly_waiting) said
    it was not; both read one rule now, and the collectives are advised on as they are."""
    write_rank(tmp_path, 0, compute_us=9000, comm_us=22500)
    write_rank(tmp_path, 1, compute_us=11000, comm_us=20500)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    assert run.waits_for is not None and run.waits_for.rank == 1
    comm = next(f for f in run.findings if f.id == "COMM_OVERHEAD")
    assert "waiting for rank 1" not in comm.recommendation
    assert not any("is waiting for rank 1 to join them" in e.text for e in comm.evidence)


def write_cpu_rank(folder: Path, rank: int, load_us: int, wait_us: int, steps: int = 6) -> Path:
    """A CPU gloo rank's Kineto trace with the user's own ``step N`` ranges opened after the
    fetch (``for x, y in loader: with record_function(f"step {i}"):``): each iteration a
    DataLoader fetch of ``load_us``, then the range: 1.8 ms of aten::mm, the optimizer step,
    and a ``gloo:all_reduce`` of ``wait_us`` on gloo's thread that the range waits for."""
    pid, ts, events = 200 + rank, 1000, []
    for n in range(steps):
        start = ts + load_us
        events += [
            {"ph": "X", "cat": "user_annotation", "pid": pid, "tid": pid, "ts": ts,
             "dur": load_us, "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter"
             ".__next__", "args": {}},
            {"ph": "X", "cat": "user_annotation", "pid": pid, "tid": pid, "ts": start,
             "dur": 2000 + wait_us, "name": f"step {n}", "args": {}},
            {"ph": "X", "cat": "cpu_op", "pid": pid, "tid": pid, "ts": start + 50,
             "dur": 1800, "name": "aten::mm", "args": {}},
            {"ph": "X", "cat": "cpu_op", "pid": pid, "tid": pid, "ts": start + 900,
             "dur": 900, "name": "autograd::engine::evaluate_function: MmBackward0",
             "args": {}},
            {"ph": "X", "cat": "user_annotation", "pid": pid, "tid": pid + 1,
             "ts": start + 1900, "dur": wait_us, "name": "gloo:all_reduce", "args": {}},
            {"ph": "X", "cat": "user_annotation", "pid": pid, "tid": pid,
             "ts": start + 1950 + wait_us, "dur": 40, "name": "Optimizer.step#SGD.step",
             "args": {}}]
        ts = start + 2000 + wait_us
    document = {"schemaVersion": 1, "traceEvents": events,
                "distributedInfo": {"backend": "gloo", "rank": rank, "world_size": 2}}
    path = folder / f"rank{rank}.pt.trace.json"
    path.write_text(json.dumps(document))
    return path


def test_ranks_whose_step_ranges_leave_the_fetch_out_are_paced_by_their_windows(
        tmp_path: Path) -> None:
    """Real torch 2.13 gloo traces with ``record_function(f"step {i}")`` ranges after the fetch:
    rank 1 loads each batch in 10 ms, rank 0 in 2 ms and then waits 9 ms in the all-reduce
    for rank 1, inside its range. By the ranges alone rank 0 read 'the slowest, 14.6 ms per
    step against 6.2 ms (+135.7%) ... a straggler', and the job communication-bound: the
    waiting rank blamed. Both iterations take 13 ms start to next start: the ranks keep pace,
    and the job waits for rank 1, whose DataLoader is the bottleneck."""
    write_cpu_rank(tmp_path, 0, load_us=2000, wait_us=9000)
    write_cpu_rank(tmp_path, 1, load_us=10000, wait_us=1000)
    run = analyze_paths([tmp_path], AnalyzeOptions()).runs[0]
    job = run.job
    assert {r.rank: r.step_ns for r in job.ranks} == {0: 13_000_000, 1: 13_000_000}
    assert {r.rank: r.step_marker for r in job.ranks} == {
        0: "annotated range, start to next start", 1: "annotated range, start to next start"}
    assert job.straggler is False and job.paced_by == 1 and job.verdict == "loader-bound"
    assert run.metrics.per_rank_step_ns == {0: 13_000_000, 1: 13_000_000}
    assert "| Rank | Verdict | Mean step (annotated range, start to next start) |" in \
        render_markdown(analyze_paths([tmp_path], AnalyzeOptions()))


def test_two_of_three_ranks_tying_as_slowest_have_no_slowest() -> None:
    """Ranks 0 and 1 take 100 ms a step, rank 2 90 ms: the two tie as the slowest, so neither
    is named the slowest (rank 0, first in order, was: 'rank 0, the slowest, takes 100.0 ms
    ... (+5.3%)' against rank 1's equal step and 2's, and slowest_rank 0); the lag is theirs
    against the rank outside the tie."""
    job = job_analysis([rank(0, "compute-bound", 100, 0.10), rank(1, "compute-bound", 100, 0.12),
                        rank(2, "compute-bound", 90, 0.30)])
    assert job.slowest is None and job.slowest_rank is None and job.pacer is None
    assert job.verdict_reason.startswith(
        "rank 0, 1, the slowest alike, take 100.0 ms per step against 90.0 ms for the other "
        "ranks (+11.1%) and the job runs at their pace")
    assert job.straggler
