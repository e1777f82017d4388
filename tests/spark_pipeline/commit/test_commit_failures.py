"""Commit steps that fail or must be refused: abandoned for their dataset alone, nothing moved that should not."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.commit import (
    CommitSequenceAbandoned,
    CommitSequencePlanned,
    CommitStepFailed,
    CommitStepRolledBack,
    FsRenameStep,
    HighWatermarkStep,
    TableCommitStep,
)
from events.errors import FencedError
from events.log import EventLog, open_log
from events.model import SequenceFields
from filesystems.local import LOCAL
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.commit.sequence import Outcome
from spark_pipeline.commit.session import open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.steps import CommitStepError, PublishRoots, TableCommitCommitStep
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from tests.fault.pipeline_checks import write_job
from tests.spark_pipeline.tables.test_iceberg_step import parquet, table_step


def settings(base: Path, max_attempts: int = 3) -> CommitSettings:
    return CommitSettings(PublishRoots.of([base / "task-output"], [base / "published"]), max_attempts)


def file_checksum(path: Path) -> str:
    return LOCAL.checksum(str(path))


def planned(job: str, urn: str, *steps: FsRenameStep | HighWatermarkStep | TableCommitStep) -> CommitSequencePlanned:
    return CommitSequencePlanned(job=job, run_id="r1", dataset_urn=urn, sequence_id="r1", steps=steps)


def test_a_step_outside_the_roots_is_refused_before_anything_moves(event_log: EventLog, tmp_path: Path) -> None:
    inside = tmp_path / "task-output" / "a.avro"
    inside.parent.mkdir(parents=True)
    inside.write_bytes(b"data")
    escape = tmp_path / "published" / ".." / ".." / "etc-passwd-copy"
    steps = (FsRenameStep(src=str(inside), dst=str(tmp_path / "published" / "a.avro"), size=4,
                          checksum=file_checksum(inside)),
             FsRenameStep(src=str(inside), dst=str(escape), size=4, checksum=file_checksum(inside)))
    with open_session(event_log, "job", settings(tmp_path), LOCAL) as session:
        session.sink.emit([planned("job", "ds", *steps)])
        result = session.committer.recover("job")[0]
        assert result.outcome is Outcome.ABANDONED
        assert "step 1 (FsRename) has destination" in (result.error or "") and "outside the configured roots" in (
            result.error or "")
        assert inside.exists() and not (tmp_path / "published").exists()  # nothing moved, not even step 0
        assert session.state.datasets[("job", "ds")].blocked_by == "r1"


def test_a_step_that_keeps_failing_abandons_its_dataset_alone(event_log: EventLog, tmp_path: Path) -> None:
    good = tmp_path / "task-output" / "good.avro"
    good.parent.mkdir(parents=True)
    good.write_bytes(b"good")
    missing = tmp_path / "task-output" / "vanished.avro"
    ok = planned("job", "fine", FsRenameStep(src=str(good), dst=str(tmp_path / "published" / "good.avro"), size=4,
                                             checksum=file_checksum(good)),
                 HighWatermarkStep(partition="fine:0", low_watermark=0, value=10))
    doomed = planned("job", "doomed", FsRenameStep(src=str(missing), dst=str(tmp_path / "published" / "x.avro"),
                                                   size=4, checksum="0" * 64))
    outcomes = []
    for attempt in range(3):
        with open_session(event_log, "job", settings(tmp_path, 3), LOCAL) as session:
            if attempt == 0:
                session.sink.emit([ok, doomed])
            outcomes.append({r.dataset_urn: r.outcome for r in session.committer.recover("job")})
    assert outcomes[0] == {"fine": Outcome.COMPLETED, "doomed": Outcome.FAILED}
    assert outcomes[1] == {"doomed": Outcome.FAILED} and outcomes[2] == {"doomed": Outcome.ABANDONED}
    with open_session(event_log, "job", settings(tmp_path), LOCAL) as session:
        state = session.state
        assert state.pending_sequences("job") == []
        assert state.datasets[("job", "fine")].watermarks == {"fine:0": 10}
        assert state.datasets[("job", "doomed")].blocked_by == "r1"
        assert "is gone and the destination does not hold the recorded content" in (
            state.datasets[("job", "doomed")].blocked_error or "")
    assert verify(event_log).ok  # abandoned before publishing anything: no broken invariant


@pytest.mark.spark
def test_a_run_skips_a_blocked_dataset_and_keeps_its_watermark(tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{"source.synthetic.partitions": 1})
    assert JobLauncher(load_job_config(job), spark=spark).run().status is RunStatus.COMMITTED
    config = load_job_config(job)

    with open_log(url) as log, open_session(log, "crashy", settings(tmp_path, 1), LOCAL) as session:
        session.sink.emit([CommitSequencePlanned(
            job="crashy", run_id="manual", dataset_urn="ds.0", sequence_id="manual",
            steps=(FsRenameStep(src=str(tmp_path / "task-output" / "nope"), dst=str(tmp_path / "published" / "n"),
                                size=1, checksum="0" * 64),))])
        assert session.committer.recover("crashy")[0].outcome is Outcome.ABANDONED
    second = JobLauncher(config, spark=spark).run()
    assert second.status is RunStatus.COMMITTED
    planned_urns = {c.dataset_urn for c in second.commits}
    assert planned_urns == {"ds.1"}  # ds.0 is blocked: not pulled, its watermark kept
    with open_log(url) as log, open_session(log, "crashy", settings(tmp_path), LOCAL) as session:
        assert session.state.datasets[("crashy", "ds.0")].watermarks == {"ds.0:0": 200}
        assert session.state.datasets[("crashy", "ds.1")].watermarks == {"ds.1:0": 400}


def test_an_operator_releases_a_blocked_dataset(event_log: EventLog, tmp_path: Path) -> None:
    doomed = planned("job", "doomed", FsRenameStep(src=str(tmp_path / "task-output" / "gone"),
                                                   dst=str(tmp_path / "published" / "x"), size=1, checksum="0" * 64))
    with open_session(event_log, "job", settings(tmp_path, 1), LOCAL) as session:
        session.sink.emit([doomed])
        session.committer.recover("job")
        assert session.state.datasets[("job", "doomed")].blocked_by == "r1"
        assert session.committer.release("job", "doomed", "fixed the disk") == "r1"
        assert session.state.datasets[("job", "doomed")].blocked_by is None
        with pytest.raises(CommitStepError, match="not blocked"):
            session.committer.release("job", "doomed", "again")
    with open_session(event_log, "job", settings(tmp_path), LOCAL) as session:
        assert session.state.datasets[("job", "doomed")].blocked_by is None  # as folded from the log


def test_a_release_rolls_back_only_once_a_fenced_writers_checks_fail(event_log: EventLog, tmp_path: Path) -> None:
    """A probe or append that passed answers the checks of the next FENCE_FRESH_S: a release waits that long before it
    moves anything back, so an older writer cannot then begin a rename that publishes the range again."""
    doomed = planned("job", "doomed", FsRenameStep(src=str(tmp_path / "task-output" / "gone"),
                                                   dst=str(tmp_path / "published" / "x"), size=1, checksum="0" * 64))
    with open_session(event_log, "job", settings(tmp_path, 1), LOCAL) as older:
        older.sink.emit([doomed])
        older.committer.recover("job")  # abandoned: its failure appended, a probe that passed
        with open_session(event_log, "job", settings(tmp_path, 1), LOCAL) as newer:
            newer.committer.release("job", "doomed", "fixed the disk")
            with pytest.raises(FencedError):
                older.sink.check_fenced()


def test_release_moves_back_a_rename_that_was_done_but_never_recorded(event_log: EventLog, tmp_path: Path) -> None:
    """Found by the DataFrame engine's simulation: a rename done just before the driver died is not in the log, and
    the recovery's verify of it failed (an I/O error) until the sequence was abandoned. Releasing the dataset must
    still move that file back: the range is extracted and published again, and must not be there twice."""
    src, dst = tmp_path / "task-output" / "a.avro", tmp_path / "published" / "a.avro"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"data")
    steps = (FsRenameStep(src=str(src), dst=str(dst), size=4, checksum=file_checksum(src)),
             HighWatermarkStep(partition="ds:0", low_watermark=0, value=1))
    fields: SequenceFields = {"job": "job", "run_id": "r1", "dataset_urn": "ds", "sequence_id": "r1"}
    with open_session(event_log, "job", settings(tmp_path, 1), LOCAL) as session:
        session.sink.emit([planned("job", "ds", *steps)])
        dst.parent.mkdir()
        src.rename(dst)  # the step ran; the driver died before recording it
        error = f"step 0 (FsRename): [Errno 5] I/O error in size: {dst}"
        session.sink.emit([CommitStepFailed(**fields, step_index=0, attempt=1, error=error),
                           CommitSequenceAbandoned(**fields, attempts=1, error=error)])
        session.committer.release("job", "ds", "fixed the disk")
    assert src.read_bytes() == b"data" and not dst.exists()
    rolled = [e.event for e in event_log.read() if isinstance(e.event, CommitStepRolledBack)]
    assert [(r.step_index, r.outcome) for r in rolled] == [(0, "moved_back")]


def test_release_of_a_rename_moved_back_then_changed_at_its_source_completes(event_log: EventLog,
                                                                            tmp_path: Path) -> None:
    """Found by the simulation (seed 7046): a release moved a published file back and the driver died before
    recording it; the file was then changed in the task output. Nothing is published at the destination, so the
    release completes (the range is extracted again) instead of refusing for good."""
    src, dst = tmp_path / "task-output" / "a.avro", tmp_path / "published" / "a.avro"
    src.parent.mkdir(parents=True)
    src.write_bytes(b"data")
    steps = (FsRenameStep(src=str(src), dst=str(dst), size=4, checksum=file_checksum(src)),
             FsRenameStep(src=str(tmp_path / "task-output" / "gone"), dst=str(tmp_path / "published" / "b.avro"),
                          size=1, checksum="0" * 64))
    with open_session(event_log, "job", settings(tmp_path, 1), LOCAL) as session:
        session.sink.emit([planned("job", "ds", *steps)])
        session.committer.recover("job")  # step 0 published and recorded, step 1 fails: abandoned
        assert dst.exists() and session.state.datasets[("job", "ds")].blocked_by == "r1"
        dst.rename(src)  # the release's move back, before the driver died
        src.write_bytes(b"dat!")  # then changed in the task output
        session.committer.release("job", "ds", "fixed the disk")
        assert session.state.datasets[("job", "ds")].blocked_by is None
    assert not dst.exists()
    rolled = [e.event for e in event_log.read() if isinstance(e.event, CommitStepRolledBack)]
    assert [(r.step_index, r.outcome) for r in rolled] == [(0, "already_back")]


def test_a_sequence_whose_table_commit_was_made_before_a_crash_is_never_abandoned(event_log: EventLog,
                                                                                   tmp_path: Path) -> None:
    """Found by the simulation (seeds 813, 1576, 1621): the table commit was made and the driver died before it was
    recorded; the rerun's rename step then failed until the attempts ran out. Giving the sequence up would leave a
    release to roll back files the table holds (it refuses): it stays pending, and completes once the cause is fixed."""
    data = tmp_path / "published" / "lake" / "events" / "data"
    src = tmp_path / "task-output" / "a.parquet"
    parquet(src, 0)
    rename = FsRenameStep(src=str(src), dst=str(data / "a.parquet"), size=src.stat().st_size,
                          checksum=file_checksum(src))
    commit = table_step(tmp_path / "published", "job/ds/r1")
    with open_session(event_log, "job", settings(tmp_path, 1), LOCAL) as session:
        session.sink.emit([planned("job", "ds", rename, commit)])
        data.mkdir(parents=True)
        src.rename(data / "a.parquet")
        TableCommitCommitStep(commit, [rename.dst]).execute()  # made; the driver dies before recording anything
        (data / "a.parquet").rename(tmp_path / "aside.parquet")  # the published file out of reach for a while
        result = session.committer.recover("job")[0]
        assert result.outcome is Outcome.FAILED, result
        assert [s.sequence_id for s in session.state.pending_sequences("job")] == ["r1"]
        (tmp_path / "aside.parquet").rename(data / "a.parquet")
        assert session.committer.recover("job")[0].outcome is Outcome.COMPLETED
