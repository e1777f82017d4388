"""The commit's cheap paths keep the protocol: sequences recorded in bounded batches as they end, each whole, after
their renames into new folders; fence checks of parallel sequences share probes and still see a newer writer."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import yaml

from events.codec import Record
from events.commit import (
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    FsRenameStep,
    HighWatermarkStep,
)
from events.dataset import WatermarkAdvanced
from events.errors import FencedError
from events.job import JobRunCommitted, JobRunStarted
from events.log import EventLog, LogWriter, open_log
from events.model import Event
from events.published import DatasetPublished, PublishedFile, WatermarkRange
from filesystems.local import LOCAL
from projections.state import State
from replay.verify import verify
from spark_pipeline.commit.sequence import CommitResult, Committer, Outcome
from spark_pipeline.commit.session import open_session, strict_state
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.sink import FENCE_FRESH_S, FRESH_USES_MAX, EventSink
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import commit_settings

SEQUENCES = 40


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    with open_log(f"sqlite:///{tmp_path}/events.db?partitions=3") as opened:
        opened.ensure_topic()
        yield opened


def planned(base: Path, index: int) -> CommitSequencePlanned:
    """A sequence that publishes one file into a folder of its own (made by the rename) and moves a watermark."""
    src = base / "task-output" / f"part-{index}.avro"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(f"records of dataset {index}".encode())
    rename = FsRenameStep(src=str(src), dst=str(base / "published" / f"ds-{index}" / "part.avro"),
                          size=src.stat().st_size, checksum=LOCAL.checksum(str(src)), records=1)
    return CommitSequencePlanned(job="job", run_id="r1", dataset_urn=f"ds-{index}", sequence_id="r1",
                                 steps=(rename, HighWatermarkStep(partition=f"ds-{index}:0", low_watermark=0,
                                                                  value=index + 1)))


class CountingWriter(LogWriter):
    """A real writer that counts its appends and fence probes."""

    def __init__(self, inner: LogWriter) -> None:
        super().__init__(inner.name, inner.codec, inner.partitions)
        self.inner = inner
        self.appends = 0
        self.probes = 0

    def append_records(self, records: Iterable[Record]) -> int:
        self.appends += 1
        return self.inner.append_records(records)

    def check_fenced(self) -> None:
        self.probes += 1
        self.inner.check_fenced()

    def close(self) -> None:
        self.inner.close()


def test_sequences_are_recorded_in_bounded_batches_each_whole(log: EventLog, tmp_path: Path) -> None:
    settings = CommitSettings(PublishRoots.of([tmp_path / "task-output"], [tmp_path / "published"]), parallelism=8)
    with open_session(log, "job", settings, LOCAL) as session:
        session.sink.emit([planned(tmp_path, i) for i in range(SEQUENCES)])
    writer = CountingWriter(log.writer("job"))
    state = strict_state(log)
    sink = EventSink(writer, state)
    try:
        results = Committer(sink, settings, LOCAL, batch_events=20).recover("job")
    finally:
        sink.close()
        writer.close()
    assert [r.outcome for r in results] == [Outcome.COMPLETED] * SEQUENCES
    assert sorted(r.dataset_urn for r in results) == sorted(f"ds-{i}" for i in range(SEQUENCES))
    # Each sequence records 3 events (its watermark, its completion, its publication; its executed steps are not
    # recorded one by one): 6 fit in 20.
    assert writer.appends == -(-SEQUENCES // 6)
    assert not [e for e in log.read() if isinstance(e.event, CommitStepApplied)]
    replayed = State()
    for logged in log.read():
        replayed.apply(logged)
    assert replayed.pending_sequences("job") == [] and not replayed.problems
    for i in range(SEQUENCES):
        assert (tmp_path / "published" / f"ds-{i}" / "part.avro").read_bytes() == f"records of dataset {i}".encode()
        assert replayed.datasets[("job", f"ds-{i}")].watermarks == {f"ds-{i}:0": i + 1}
    assert verify(log).ok


def test_what_closing_makes_of_the_results_is_recorded_in_the_last_batch_not_an_append_of_its_own(
        log: EventLog, tmp_path: Path) -> None:
    """A run's JobRunCommitted goes with its last completions: one transaction fewer at the end of every commit."""
    settings = CommitSettings(PublishRoots.of([tmp_path / "task-output"], [tmp_path / "published"]))
    with open_session(log, "job", settings, LOCAL) as session:
        session.sink.emit([JobRunStarted(job="job", run_id="r1"), *(planned(tmp_path, i) for i in range(SEQUENCES))])
    writer = CountingWriter(log.writer("job"))
    state = strict_state(log)
    sink = EventSink(writer, state)
    heard: list[list[Outcome]] = []

    def closing(results: list[CommitResult]) -> list[Event]:
        heard.append([r.outcome for r in results])
        return [JobRunCommitted(job="job", run_id="r1", datasets_committed=tuple(r.dataset_urn for r in results))]

    try:
        Committer(sink, settings, LOCAL, batch_events=20).commit_all(state.pending_sequences("job"), closing=closing)
    finally:
        sink.close()
        writer.close()
    assert heard == [[Outcome.COMPLETED] * SEQUENCES]
    assert writer.appends == -(-SEQUENCES // 6)  # as many as without it: 6 sequences of 3 events a batch
    committed = [e.event for e in log.read() if isinstance(e.event, JobRunCommitted)]
    assert len(committed) == 1 and len(committed[0].datasets_committed) == SEQUENCES
    assert verify(log).ok


def test_no_collection_runs_while_the_sequences_commit_and_collections_come_back_after(log: EventLog,
                                                                                       tmp_path: Path) -> None:
    """What a commit allocates is kept or freed by reference counting: a collection would walk it for nothing."""
    settings = CommitSettings(PublishRoots.of([tmp_path / "task-output"], [tmp_path / "published"]))
    with open_session(log, "job", settings, LOCAL) as session:
        session.sink.emit([planned(tmp_path, i) for i in range(SEQUENCES)])
    state = strict_state(log)
    writer = log.writer("job")
    sink = EventSink(writer, state)
    collections_on: list[bool] = []
    gc.enable()
    try:
        Committer(sink, settings, LOCAL).commit_all(state.pending_sequences("job"),
                                                    done=lambda _: collections_on.append(gc.isenabled()))
    finally:
        sink.close()
        writer.close()
    assert collections_on == [False] * SEQUENCES
    assert gc.isenabled()


def test_parallel_fence_checks_share_probes_and_a_newer_writer_fences_them_all(log: EventLog) -> None:
    writer = CountingWriter(log.writer("job"))
    sink = EventSink(writer, State())
    threads = 32
    errors: list[BaseException] = []

    def check() -> None:
        try:
            sink.check_fenced(among_others=True)
        except FencedError as e:
            errors.append(e)

    def all_check() -> None:
        workers = [threading.Thread(target=check) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    try:
        all_check()
        assert errors == [] and writer.probes < threads
        log.writer("job").close()  # a newer holder of the name fences ours
        time.sleep(FENCE_FRESH_S)  # the probe that passed answers no check any more
        all_check()
        assert len(errors) == threads
        with pytest.raises(FencedError):
            sink.emit([_any_event()])
    finally:
        sink.close()
        writer.close()


def _any_event() -> Event:
    return CommitSequencePlanned(job="job", run_id="r2", dataset_urn="ds", sequence_id="r2", steps=())


def test_checks_one_after_another_share_a_probe_for_a_few_milliseconds_only(log: EventLog) -> None:
    """A commit on one thread checks its fence before each rename: a probe answers the next checks of FENCE_FRESH_S
    (at most FRESH_USES_MAX of them), not every check a round trip; once it is older, a newer writer's fence is
    found."""
    writer = CountingWriter(log.writer("job"))
    sink = EventSink(writer, State())
    try:
        for _ in range(3 * FRESH_USES_MAX):
            sink.check_fenced()
        assert 3 <= writer.probes < 3 * FRESH_USES_MAX
        log.writer("job").close()  # a newer holder of the name fences ours
        time.sleep(FENCE_FRESH_S)
        with pytest.raises(FencedError):
            sink.check_fenced()
        with pytest.raises(FencedError):
            sink.check_fenced()  # a failed probe answers no later check
    finally:
        sink.close()
        writer.close()


def test_a_job_without_a_fresh_window_probes_before_every_check(tmp_path: Path, log: EventLog) -> None:
    """`job.commit.fence.fresh.ms: 0` reaches the committer's sink: no probe answers a later check."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"job.name": "job",
                                   "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
                                   "writer.staging.dir": str(tmp_path / "staging"),
                                   "writer.output.dir": str(tmp_path / "out"),
                                   "data.publisher.final.dir": str(tmp_path / "pub"),
                                   "job.commit.fence.fresh.ms": 0}))
    settings = commit_settings(load_job_config(job))
    assert settings.fence_fresh_s == 0
    writer = CountingWriter(log.writer("job"))
    sink = EventSink(writer, State(), fresh_s=settings.fence_fresh_s)
    try:
        for _ in range(5):
            sink.check_fenced()
        assert writer.probes == 5
    finally:
        sink.close()
        writer.close()


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "per-event"])
def test_a_completion_is_recorded_as_its_events_batched_or_not(log: EventLog, tmp_path: Path, batched: bool) -> None:
    """What a sequence records as it completes, as the log's readers get it: its watermark moves, a CommitStepApplied
    for each step found done, CommitSequenceCompleted and DatasetPublished, each under its own key; one record for
    the sequences of a partition of the log when batches are on (a sequence alone in its partition keeps its own),
    a record each when they are off."""
    settings = CommitSettings(PublishRoots.of([tmp_path / "task-output"], [tmp_path / "published"]))
    plans = [planned(tmp_path, i) for i in range(5)]  # ds-0 to ds-3 in one partition of the log, ds-4 alone
    with open_session(log, "job", settings, LOCAL) as session:
        session.sink.emit(plans)
    done_before = plans[1].steps[0]  # renamed before the commit (a crash after it): found done by verify()
    assert isinstance(done_before, FsRenameStep)
    Path(done_before.dst).parent.mkdir(parents=True)
    Path(done_before.src).rename(done_before.dst)
    records_before = sum(1 for _ in log.read_records())
    sink = EventSink(log.writer("job"), strict_state(log), pack=batched)
    try:
        results = Committer(sink, settings, LOCAL).recover("job")
    finally:
        sink.close()
        sink.writer.close()
    assert [r.outcome for r in results] == [Outcome.COMPLETED] * len(plans)
    read = [logged.event for logged in log.read()][len(plans):]
    by_dataset = {plan.dataset_urn: [e for e in read if getattr(e, "dataset_urn", None) == plan.dataset_urn]
                  for plan in plans}
    for index, plan in enumerate(plans):
        rename, watermark = plan.steps
        assert isinstance(rename, FsRenameStep) and isinstance(watermark, HighWatermarkStep)
        events = by_dataset[plan.dataset_urn]
        kinds = [type(e).__name__ for e in events]
        found = ["CommitStepApplied"] if index == 1 else []
        assert kinds == ["WatermarkAdvanced", *found, "CommitSequenceCompleted", "DatasetPublished"]
        moved, *_, completed, published = events
        assert isinstance(moved, WatermarkAdvanced) and isinstance(completed, CommitSequenceCompleted)
        assert (moved.partition, moved.low_watermark, moved.value) == (watermark.partition, 0, index + 1)
        assert (completed.steps_applied, completed.executed, completed.verified) == (2, 1 if found else 2, len(found))
        assert len(completed.step_ms) == 2
        if found:
            applied = events[1]
            assert isinstance(applied, CommitStepApplied)
            assert (applied.step_index, applied.outcome) == (0, "verified")
        assert isinstance(published, DatasetPublished)
        assert published.files == (PublishedFile(path=rename.dst, size=rename.size, checksum=rename.checksum,
                                                 records=1),)
        assert published.watermarks == (WatermarkRange(partition=watermark.partition, low_watermark=0,
                                                       high_watermark=index + 1),)
        assert (published.files_published, published.records_published) == (1, 1)
        assert len({e.key for e in events}) == len(events)
    commit_records = sum(1 for _ in log.read_records()) - records_before
    alone = by_dataset["ds-4"]  # a batch of one sequence: its own records
    assert commit_records == (1 + len(alone) if batched else len(read))
    assert verify(log).ok


def test_a_lease_answers_many_checks_at_once_until_its_probe_is_stale(log: EventLog) -> None:
    """Moves made by another process share one fence check (`EventSink.lease`): it spends a probe's answers at once,
    lasts as long as that probe answers, and a newer writer's fence is found by the next lease's probe."""
    writer = CountingWriter(log.writer("job"))
    sink = EventSink(writer, State())
    try:
        before = time.monotonic()
        deadline = sink.lease(64)
        assert writer.probes == 1 and before < deadline <= time.monotonic() + FENCE_FRESH_S
        assert sink.lease(64) == deadline and writer.probes == 1  # the same probe answers them too
        sink.lease(FRESH_USES_MAX)  # more than it has left: a probe of its own
        assert writer.probes == 2
        with pytest.raises(ValueError, match="1 to 1024"):
            sink.lease(FRESH_USES_MAX + 1)
        log.writer("job").close()  # a newer holder of the name fences ours
        time.sleep(FENCE_FRESH_S)
        with pytest.raises(FencedError):
            sink.lease(64)
    finally:
        sink.close()
        writer.close()


def test_without_a_fresh_window_a_lease_lets_no_move_be_made_elsewhere(log: EventLog) -> None:
    writer = CountingWriter(log.writer("job"))
    sink = EventSink(writer, State(), fresh_s=0)
    try:
        assert sink.lease(1) < time.monotonic()
    finally:
        sink.close()
        writer.close()
