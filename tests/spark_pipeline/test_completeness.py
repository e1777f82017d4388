"""Partition completeness, planned and folded, without Spark: runs of a two-source-partition dataset are simulated
(random event times, some runs caught up), each run's Completeness step planned from the state the previous ones
folded, executed and folded. Checked against the definition computed independently: a time partition is completed
once, never before every source partition was published past its end plus the lateness, and always once all are;
late records are counted exactly, never dropped."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.completeness import EventTimeAdvanced, PartitionCompleted
from events.task import OutputFile, WorkUnitResult
from filesystems.router import FileSystems
from projections.commits import reduce_dataset
from projections.completeness import Completeness, advance
from projections.snapshot_codec import decode_state, encode_state
from projections.state import State
from projections.views import DatasetView
from spark_pipeline.commit.steps import CompletenessCommitStep, SequenceRef
from spark_pipeline.completeness import completeness_step, with_completeness
from spark_pipeline.constructs import DatasetOutput
from spark_pipeline.jobfile.config import JobConfig, JobConfigError
from spark_pipeline.jobfile.partitions import TimePartitioning, partitioning_of
from spark_pipeline.jobs import config_from_properties

HOUR = 3_600_000
MINUTE = 60_000
SOURCES = ("ds:0", "ds:1")
LATENESS = {"0": 0, "30m": 30 * MINUTE, "1h": HOUR}


def job(base: Path, lateness: str = "0", success_file: bool = False) -> JobConfig:
    """A synthetic job with an hourly UTC partitioner."""
    return config_from_properties({
        "job.name": "clicks", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
        "data.publisher.final.dir": str(base / "published"),
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
        "writer.partition.timezone": "UTC", "writer.partition.allowed.lateness": lateness,
        "writer.partition.success.file": str(success_file).lower()})


@dataclass(frozen=True)
class RunInput:
    """One run: per source partition the event times (minutes) it publishes, whether it is caught up, and when the
    run planned (minutes)."""

    minutes: tuple[tuple[int, ...], tuple[int, ...]]
    caught_up: tuple[bool, bool]
    planned_at: int


def output_of(partitioning: TimePartitioning, run: RunInput, index: int) -> DatasetOutput:
    """The dataset's output of a run: one file per source partition and hour, as the writers make them."""
    results = []
    for source, minutes in zip(SOURCES, run.minutes):
        per_hour: dict[str, int] = {}
        for minute in minutes:
            label = partitioning.path(minute * MINUTE)
            per_hour[label] = per_hour.get(label, 0) + 1
        files = tuple(OutputFile(path=f"/out/{index}/{source}/{label}.avro", size=1, checksum="0" * 64, records=n,
                                 partition=label) for label, n in sorted(per_hour.items()))
        results.append(WorkUnitResult(work_unit_id=f"{source}@{index}", dataset_urn="ds", partition=source,
                                      low_watermark=index, expected_high_watermark=index + 1,
                                      actual_high_watermark=index + 1, records_written=len(minutes),
                                      output_files=files))
    caught = frozenset(s for s, c in zip(SOURCES, run.caught_up) if c)
    return DatasetOutput("ds", tuple(results), caught, run.planned_at * MINUTE)


def fold_run(config: JobConfig, view: DatasetView, output: DatasetOutput, index: int
             ) -> tuple[DatasetView, list[PartitionCompleted], EventTimeAdvanced | None]:
    """Plan the run's Completeness step from the view, execute it, and fold its events."""
    partitioning = partitioning_of(config.properties)
    assert partitioning is not None
    step = completeness_step(config, partitioning, output, view)
    if step is None:
        return view, [], None
    ref = SequenceRef("clicks", f"run-{index}", "ds", f"run-{index}")
    events = CompletenessCommitStep(step, ref, State(), FileSystems.of({})).execute()
    for event in events:
        assert isinstance(event, PartitionCompleted | EventTimeAdvanced)
        view = reduce_dataset(view, event, None)
    advanced = next(e for e in events if isinstance(e, EventTimeAdvanced))
    return view, [e for e in events if isinstance(e, PartitionCompleted)], advanced


minutes = st.lists(st.integers(0, 8 * 60), max_size=4).map(tuple)
runs = st.lists(st.builds(RunInput, st.tuples(minutes, minutes), st.tuples(st.booleans(), st.booleans()),
                          st.integers(0, 10 * 60)), min_size=1, max_size=6)


@settings(max_examples=150, deadline=None)
@given(runs=runs, lateness=st.sampled_from(sorted(LATENESS)))
def test_partitions_complete_once_never_early_always_eventually_and_late_records_are_counted(
        tmp_path_factory: pytest.TempPathFactory, runs: list[RunInput], lateness: str) -> None:
    config = job(tmp_path_factory.getbasetemp(), lateness)
    partitioning = partitioning_of(config.properties)
    assert partitioning is not None
    late_ms = LATENESS[lateness]
    final = RunInput(((), ()), (True, True), 20 * 60)  # both caught up, long after every event time
    view = DatasetView("clicks", "ds", watermarks=dict.fromkeys(SOURCES, 0))
    reached = dict.fromkeys(SOURCES, -1)  # how far (ms) each source is published, by the definition
    completed: dict[str, int] = {}
    written: dict[str, int] = {}
    late_expected: dict[str, int] = {}
    horizon_before: int | None = None
    for index, run in enumerate([*runs, final]):
        for source, times, caught in zip(SOURCES, run.minutes, run.caught_up):
            for minute in times:
                label = partitioning.path(minute * MINUTE)
                written[label] = written.get(label, 0) + 1
                start, end = partitioning.bounds(label) or (0, 0)
                if label in completed or (horizon_before is not None and end <= horizon_before):
                    late_expected[label] = late_expected.get(label, 0) + 1
                reached[source] = max(reached[source], start)
            if caught:
                reached[source] = max(reached[source], run.planned_at * MINUTE)
        view, done, _ = fold_run(config, view, output_of(partitioning, run, index), index)
        for event in done:
            assert event.partition not in completed, f"{event.partition} completed twice"
            completed[event.partition] = index
            assert all(r >= event.end_ms + late_ms for r in reached.values()), (
                f"{event.partition} (ending {event.end_ms}) completed early: sources reached {reached}")
        state = view.completeness or Completeness()
        if horizon_before is not None:
            assert state.horizon_ms is not None and state.horizon_ms >= horizon_before, "the horizon moved back"
        horizon_before = state.horizon_ms
    assert set(completed) == set(written), "a partition with records was never completed"
    assert view.completeness is not None
    assert view.completeness.late_records == late_expected
    assert view.completeness.open_partitions == {}


def test_an_idle_dataset_completes_its_open_partition_in_a_sequence_of_its_own(tmp_path: Path) -> None:
    config = job(tmp_path, "30m", success_file=True)
    partitioning = partitioning_of(config.properties)
    assert partitioning is not None
    busy = RunInput(((10, 70), (20, 75)), (False, False), 80)  # hours 0 and 1 published, not caught up
    view, done, _ = fold_run(config, DatasetView("clicks", "ds", watermarks=dict.fromkeys(SOURCES, 0)),
                             output_of(partitioning, busy, 0), 0)
    assert [e.partition for e in done] == []  # reached hour 1's start (60 min) < hour 0's end + 30 min
    idle = DatasetOutput("ds", (), frozenset(SOURCES), 200 * MINUTE)  # no work unit: caught up at 200 min
    planned = with_completeness(config, "run-1", [], [idle], {"ds": view})
    assert len(planned) == 1 and [s.kind for s in planned[0].steps] == ["Completeness"]
    step = planned[0].steps[0]
    assert step.kind == "Completeness"
    assert [b.partition for b in step.completes] == ["1970/01/01/00", "1970/01/01/01"]
    assert step.completes[0].markers == (str(tmp_path / "published" / "ds" / "1970" / "01" / "01" / "00" /
                                             "_SUCCESS"),)
    # Once complete, the same idle output plans nothing more.
    ref = SequenceRef("clicks", "run-1", "ds", "run-1")
    for event in CompletenessCommitStep(step, ref, State(), FileSystems.of({})).execute():
        assert isinstance(event, PartitionCompleted | EventTimeAdvanced)
        view = reduce_dataset(view, event, None)
    assert (tmp_path / "published" / "ds" / "1970" / "01" / "01" / "00" / "_SUCCESS").exists()
    assert with_completeness(config, "run-2", [], [idle], {"ds": view}) == []


def test_a_dataset_view_with_completeness_survives_a_snapshot() -> None:
    state = State()
    completeness = advance(None, EventTimeAdvanced(job="j", run_id="r", dataset_urn="ds", sequence_id="r",
                                                   frontiers={"ds:0": 5}, horizon_ms=3, open_partitions={"a": 9},
                                                   late_records={"b": 2}, late_files={"b": 1}))
    completeness = advance(completeness, PartitionCompleted(job="j", run_id="r", dataset_urn="ds", sequence_id="r",
                                                            partition="a", start_ms=0, end_ms=9, horizon_ms=10))
    state.datasets[("j", "ds")] = DatasetView("j", "ds", completeness=completeness)
    assert decode_state(encode_state(state)).datasets[("j", "ds")].completeness == completeness
    assert completeness.completed == frozenset({"a"}) and completeness.open_partitions == {}
    assert completeness.horizon_ms == 10


@pytest.mark.parametrize(("value", "problem"), [
    ("15 minutes", "'15 minutes' is not a duration"), ("-1h", "'-1h' is not a duration"),
    ("1.5h", "'1.5h' is not a duration")])
def test_a_bad_lateness_is_refused_naming_the_key(tmp_path: Path, value: str, problem: str) -> None:
    with pytest.raises(JobConfigError) as raised:
        job(tmp_path, value)
    assert "writer.partition.allowed.lateness" in str(raised.value) and problem in str(raised.value)


def test_a_bad_success_file_flag_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(JobConfigError) as raised:
        config_from_properties({**job(tmp_path).properties, "writer.partition.success.file": "sometimes"})
    assert "writer.partition.success.file" in str(raised.value) and "'sometimes' is not a boolean" in str(raised.value)


@pytest.mark.parametrize("properties", [
    {"writer.partition.timezone": "UTC"},
    {"writer.partition.timezone": "Europe/Berlin", "oncelog.writer.partition.style": "hive",
     "writer.partition.prefix": "hourly"},
    {"writer.partition.granularity": "day", "writer.partition.timezone": "America/Los_Angeles"},
    {"writer.partition.granularity": "month", "writer.partition.timezone": "UTC", "writer.partition.suffix": "x"},
    {"writer.partition.pattern": "yyyy/MM/dd/HH/mm", "writer.partition.timezone": "UTC"},
])
def test_a_partition_folder_gives_back_the_event_times_it_holds(properties: dict[str, str]) -> None:
    partitioning = partitioning_of({
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
        **properties})
    assert partitioning is not None
    for millis in (0, 1_795_000_000_123, 1_711_846_800_000, 1_704_067_199_999):  # a DST change, a year's end
        label = partitioning.path(millis)
        bounds = partitioning.bounds(label)
        assert bounds is not None and bounds[0] <= millis < bounds[1], (label, bounds, millis)
        assert partitioning.path(bounds[0]) == label and partitioning.path(bounds[1] - 1) == label
        assert partitioning.path(bounds[1]) != label


def test_a_folder_without_the_year_has_no_bounds() -> None:
    partitioning = partitioning_of({
        "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
        "writer.partition.pattern": "HH", "writer.partition.timezone": "UTC"})
    assert partitioning is not None and partitioning.bounds(partitioning.path(0)) is None
