"""A run extracts a dataset only when its history is completely read and settled (issue 8's regression tests).

Each test reproduces, with ordinary faults and no test hooks, a way the first version published a record twice
or lost one. Tasks run in-process (the launcher's in-process engine), the log is a real SQLite file, the folders
real folders.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from events.codec import UNCHECKED_FRAME_MAGIC, Record
from events.commit import CommitSequencePlanned, CommitStepRolledBack, FsRenameStep
from events.errors import ConfigError, LogNotStableError
from events.job import DatasetSkipped, WorkUnitsPlanned
from events.log import EventLog, LogWriter, open_log
from events.log.kafka.writer import transactional_id
from filesystems.local import LOCAL, LocalFileSystem
from projections.projector import Projector
from projections.views import RunStatus
from replay.audit import audit
from replay.audit_html import render_html
from replay.render import audit_json
from replay.verify import verify
from spark_pipeline.commit.session import IncompleteHistoryError, open_session
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.steps import (
    CommitStepError,
    FsRenameCommitStep,
    PublishRoots,
)
from spark_pipeline.commit.store import CommitStepStore
from spark_pipeline.engines.base import InProcessTaskEngine
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult, commit_settings
from tests.events.log.kafka.test_log_stability import kill_inside_a_transaction
from tests.fault.pipeline_checks import published_records


def job_config(base: Path, url: str, name: str = "orders", folder: str | None = None,
               extra: dict[str, Any] | None = None) -> JobConfig:
    """A synthetic job of two one-partition datasets, five records a run, under base/<folder or name>."""
    root = base / (folder or name)
    job = {
        "job.name": name, "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": 2, "source.synthetic.partitions": 1, "source.synthetic.records.per.run": 5,
        "dataset.urn": "ds", "writer.staging.dir": str(root / "staging"),
        "writer.output.dir": str(root / "task-output"), "data.publisher.final.dir": str(root / "published"),
        "task.maxretries": 0, "commit.parallelism": 1, "oncelog.log.url": url, **(extra or {}),
    }
    path = base / f"{name}.yaml"
    path.write_text(yaml.safe_dump(job))
    return load_job_config(path)


def run(config: JobConfig, log: EventLog) -> RunResult:
    """One run of the job, tasks in this process."""
    return JobLauncher(config, engine=InProcessTaskEngine(log.writer), log=log).run()


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[EventLog]:
    log = open_log(f"sqlite:///{tmp_path / 'events.db'}")
    log.ensure_topic()
    yield log
    log.close()


def test_a_dataset_still_pending_after_recovery_is_skipped_not_extracted_again(tmp_path: Path, sqlite: EventLog
                                                                               ) -> None:
    config = job_config(tmp_path, sqlite.url, extra={"commit.sequence.max.attempts": 5})
    blocker = tmp_path / "orders" / "published" / "ds.0" / "ds.0%3A0_0-5.avro"
    blocker.mkdir(parents=True)  # a folder where the file must go: the rename fails with an ordinary OSError
    first = run(config, sqlite)
    assert first.status is RunStatus.FAILED and "ds.0" in (first.error or "")

    second = run(config, sqlite)  # its recovery fails again: ds.0 must not be pulled a second time
    assert list(second.skipped) == ["ds.0"] and "still pending" in second.skipped["ds.0"]
    assert {c.dataset_urn for c in second.commits} == {"ds.1"}
    events = [e.event for e in sqlite.read() if e.event.run_id == second.run_id]
    assert any(isinstance(e, DatasetSkipped) and e.dataset_urn == "ds.0" for e in events)
    planned = next(e for e in events if isinstance(e, WorkUnitsPlanned))
    assert {w.dataset_urn for w in planned.work_units} == {"ds.1"}
    document = audit_json(audit(sqlite, second.run_id))
    assert document["run"]["datasets_skipped"] == ["ds.0"]
    assert [s["dataset_urn"] for s in document["skipped"]] == ["ds.0"] and "ds.0" in render_html(audit(sqlite,
                                                                                                   second.run_id))

    blocker.rmdir()  # the operator fixes the disk: the next run finishes the old sequence, then pulls on
    third = run(config, sqlite)
    assert third.status is RunStatus.COMMITTED and not third.skipped
    state, _ = Projector(sqlite).rebuild(use_snapshot=False)
    assert state.datasets[("orders", "ds.0")].watermarks == {"ds.0:0": 10}
    seen = published_records(tmp_path / "orders" / "published")
    assert set(seen) == {(f"ds.{d}", 0, o) for d in (0, 1) for o in range(10 if d == 0 else 15)}
    assert max(seen.values()) == 1 and verify(sqlite).ok


def test_a_run_stops_before_extracting_when_the_log_holds_an_event_it_cannot_read(tmp_path: Path,
                                                                                  sqlite: EventLog) -> None:
    config = job_config(tmp_path, sqlite.url)
    assert run(config, sqlite).status is RunStatus.COMMITTED
    name = b"CommitSequencePlanned"
    newer = bytes([UNCHECKED_FRAME_MAGIC, len(name)]) + name + (99).to_bytes(2, "big") + b"\x00" * 8
    with sqlite.writer("a-newer-oncelog") as writer:
        writer.append_records([Record(0, b"commit/orders/ds.0/future/PLANNED/3", newer, 0)])
    before = published_records(tmp_path / "orders" / "published")
    with pytest.raises(IncompleteHistoryError, match=r"version 99 is newer.*upgrade"):
        run(config, sqlite)
    assert published_records(tmp_path / "orders" / "published") == before


def test_a_damaged_byte_in_the_log_stops_the_run(tmp_path: Path, sqlite: EventLog) -> None:
    config = job_config(tmp_path, sqlite.url)
    assert run(config, sqlite).status is RunStatus.COMMITTED
    with sqlite3.connect(tmp_path / "events.db") as conn:
        seq, value = conn.execute("SELECT seq, value FROM oncelog_records WHERE CAST(key AS TEXT) LIKE '%COMPLETED%' "
                                  "ORDER BY seq LIMIT 1").fetchone()
        damaged = bytearray(value)
        damaged[-3] ^= 0x20
        conn.execute("UPDATE oncelog_records SET value = ? WHERE seq = ?", (bytes(damaged), seq))
    with pytest.raises(IncompleteHistoryError, match=rf"@{seq}"):
        run(config, sqlite)


def test_another_jobs_cleanup_never_deletes_this_jobs_pending_output(tmp_path: Path, sqlite: EventLog) -> None:
    config_a = job_config(tmp_path, sqlite.url, name="a", extra={"commit.sequence.max.attempts": 5})
    blocker = tmp_path / "a" / "published" / "ds.0" / "ds.0%3A0_0-5.avro"
    blocker.mkdir(parents=True)
    assert run(config_a, sqlite).status is RunStatus.FAILED  # a's sequence of ds.0 is pending, its output kept
    pending_output = list((tmp_path / "a" / "task-output").iterdir())
    assert pending_output
    config_b = job_config(tmp_path, sqlite.url, name="b", folder="a")  # b was given a's folders
    with pytest.raises(ConfigError, match="two jobs must not share folders"):
        run(config_b, sqlite)
    assert list((tmp_path / "a" / "task-output").iterdir()) == pending_output
    blocker.rmdir()
    assert run(config_a, sqlite).status is RunStatus.COMMITTED
    assert max(published_records(tmp_path / "a" / "published").values()) == 1


def test_cleanup_deletes_only_folders_of_this_jobs_own_runs(tmp_path: Path, sqlite: EventLog) -> None:
    config = job_config(tmp_path, sqlite.url)
    stranger = tmp_path / "orders" / "task-output" / "20260101T000000000Z-abcdef"
    stranger.mkdir(parents=True)  # looks like a run folder, but no run of this job in the log has that id
    assert run(config, sqlite).status is RunStatus.COMMITTED
    assert stranger.is_dir()


def test_releasing_an_abandoned_dataset_rolls_back_what_it_published(tmp_path: Path, sqlite: EventLog) -> None:
    config = job_config(tmp_path, sqlite.url,
                        extra={"commit.sequence.max.attempts": 1, "source.synthetic.partitions": 2})
    blocker = tmp_path / "orders" / "published" / "ds.0" / "ds.0%3A1_0-5.avro"
    blocker.mkdir(parents=True)  # ds.0's second file cannot be published; its first one is
    assert run(config, sqlite).status is RunStatus.FAILED
    published = tmp_path / "orders" / "published" / "ds.0" / "ds.0%3A0_0-5.avro"
    assert published.is_file()
    blocker.rmdir()
    with open_session(sqlite, "orders", commit_settings(JobLauncher(config).config), LOCAL) as session:
        session.committer.release("orders", "ds.0", "disk fixed")
    assert not published.exists()  # moved back: the range is published once, by a later run
    rolled = [e.event for e in sqlite.read() if isinstance(e.event, CommitStepRolledBack)]
    assert [(e.dataset_urn, e.step_index, e.outcome) for e in rolled] == [("ds.0", 0, "moved_back")]
    assert run(config, sqlite).status is RunStatus.COMMITTED
    seen = published_records(tmp_path / "orders" / "published")
    assert max(seen.values()) == 1 and {(d, p, o) for d, p, o in seen if d == "ds.0"} == {
        ("ds.0", p, o) for p in (0, 1) for o in range(5)}
    assert verify(sqlite).ok


def test_a_source_changed_after_its_task_wrote_it_is_never_published(tmp_path: Path) -> None:
    src, dst = tmp_path / "out" / "a.avro", tmp_path / "pub" / "a.avro"
    src.parent.mkdir()
    src.write_bytes(b"what the task wrote")
    spec = FsRenameStep(src=str(src), dst=str(dst), size=src.stat().st_size, checksum=LOCAL.checksum(str(src)))
    src.write_bytes(b"what someone wrote")
    with pytest.raises(CommitStepError, match="does not hold the content its task recorded"):
        FsRenameCommitStep(spec, LOCAL).execute()
    assert not dst.exists()


class CountingFileSystem(LocalFileSystem):
    """The local disk, counting the sizes asked per path."""

    def __init__(self) -> None:
        self.sizes_asked: Counter[str] = Counter()

    def size(self, path: str) -> int | None:
        self.sizes_asked[path] += 1
        return super().size(path)


def test_a_rename_verified_then_executed_asks_its_sources_size_once(tmp_path: Path) -> None:
    src, dst = tmp_path / "out" / "a.avro", tmp_path / "pub" / "a.avro"
    src.parent.mkdir()
    src.write_bytes(b"what the task wrote")
    spec = FsRenameStep(src=str(src), dst=str(dst), size=src.stat().st_size, checksum=LOCAL.checksum(str(src)))
    fs = CountingFileSystem()
    step = FsRenameCommitStep(spec, fs)
    assert not step.verify()
    assert step.execute() == []
    assert dst.read_bytes() == b"what the task wrote" and not src.exists()
    assert fs.sizes_asked[str(src)] == 1
    assert step.verify()  # asked again: nothing kept from the call before
    assert fs.sizes_asked[str(src)] == 2


def test_every_plan_the_commit_step_store_records_has_a_key_of_its_own(tmp_path: Path, sqlite: EventLog) -> None:
    settings = CommitSettings(PublishRoots.of([tmp_path / "out"], [tmp_path / "pub"]))
    with open_session(sqlite, "store", settings, LOCAL) as session:
        store = CommitStepStore(session.committer, run_id="r1")
        for name in ("a", "b"):
            store.put("store", "urn", FsRenameStep(src=str(tmp_path / "out" / name), dst=str(tmp_path / "pub" / name),
                                                   size=0, checksum="0" * 64))
    plans = [e.event for e in sqlite.read() if isinstance(e.event, CommitSequencePlanned)]
    assert len(plans) == 2 and len({p.key for p in plans}) == 2 and len({p.event_id for p in plans}) == 2



@pytest.mark.kafka
def test_a_run_stops_before_extracting_while_another_writers_transaction_holds_the_log(tmp_path: Path,
                                                                                       kafka_bootstrap: str) -> None:
    topic = f"oncelog.test.{uuid.uuid4().hex[:12]}"
    url = f"kafka://{kafka_bootstrap}?topic={topic}&partitions=1&read_timeout_s=3"
    config = job_config(tmp_path, url)
    with open_log(url) as log:
        log.ensure_topic()
        assert run(config, log).status is RunStatus.COMMITTED
        kill_inside_a_transaction(kafka_bootstrap, topic, f"another-job-{uuid.uuid4().hex[:6]}")
        before = published_records(tmp_path / "orders" / "published")
        with pytest.raises(LogNotStableError, match=rf"{topic}.*0"):
            run(config, log)
        assert published_records(tmp_path / "orders" / "published") == before


class Died(BaseException):
    """The driver's process ending where it stands (what SIGKILL does): nothing after it is recorded."""


@pytest.mark.kafka
def test_a_run_after_one_killed_inside_a_task_transaction_fences_that_task_and_publishes(
        tmp_path: Path, kafka_bootstrap: str) -> None:
    topic = f"oncelog.test.{uuid.uuid4().hex[:12]}"
    url = f"kafka://{kafka_bootstrap}?topic={topic}&partitions=1"  # write_timeout_s 120: no timeout frees the log
    config = job_config(tmp_path, url)

    def killed_in_its_transaction(name: str) -> LogWriter:
        kill_inside_a_transaction(kafka_bootstrap, topic, transactional_id(topic, name))
        raise Died

    with open_log(url) as log:
        log.ensure_topic()
        with pytest.raises(Died):
            JobLauncher(config, engine=InProcessTaskEngine(killed_in_its_transaction), log=log).run()
        with pytest.raises(LogNotStableError):
            log.await_stable(timeout_s=1)  # the dead run's task holds the log

        after = run(config, log)
        assert after.status is RunStatus.COMMITTED, after.error
        assert [w for w in after.warnings if "(dead)" in w], after.warnings
    counts = published_records(tmp_path / "orders" / "published")
    assert len(counts) == 10 and set(counts.values()) == {1}, counts
