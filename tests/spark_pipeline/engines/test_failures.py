"""What a failed attempt's error comes down to (engines/failures.py), and the attempt loop acting on it: a failure no
retry can fix ends its task after one attempt, whatever task.maxretries says; one a retry may fix is retried, each
failure recorded with its root cause's first line, the work unit and dataset it failed on and the next attempt."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from events.errors import ConfigError
from events.job import WorkUnitSpec
from events.log import open_log
from events.model import Event
from events.task import TaskFailed, TaskRetried, WorkUnitResult
from filesystems.base import FileSystemError
from localservers.s3 import LocalS3
from projections.views import RunStatus
from spark_pipeline.constructs import MultiWorkUnit
from spark_pipeline.engines.attempts import AttemptPlan, run_attempts
from spark_pipeline.engines.failures import Permanent, classify, root_cause
from spark_pipeline.engines.records.task import run_task
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.launcher import JobLauncher
from tests.remote_fs_plugin import s3_settings

RUN_ID = "20261121T120000123Z-abcdef"

PY4J_PYTHON_WORKER = (
    "An error occurred while calling o87.save.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most "
    "recent failure: Lost task 0.0 in stage 3.0 (TID 3) (10.0.0.5 executor driver): "
    "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
    '  File "/opt/spark/python/lib/pyspark.zip/pyspark/worker.py", line 1898, in main\n'
    "    process()\n"
    '  File "/opt/job/converters.py", line 12, in convert\n'
    '    raise ValueError("field \'amount\' is not a number: \'12,5\'")\n'
    "ValueError: field 'amount' is not a number: '12,5'\n"
    "\n\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:581)"
    "\n\tat org.apache.spark.scheduler.Task.run(Task.scala:147)\n")
PY4J_JAVA_CAUSE = (
    "An error occurred while calling o44.load.\n"
    ": java.util.concurrent.ExecutionException: java.nio.file.AccessDeniedException: s3a://hb/in: getFileStatus\n"
    "\tat java.base/java.util.concurrent.FutureTask.report(FutureTask.java:122)\n"
    "Caused by: java.nio.file.AccessDeniedException: s3a://hb/in: getFileStatus on s3a://hb/in: "
    "com.amazonaws.services.s3.model.AmazonS3Exception: Forbidden (Service: Amazon S3; Status Code: 403)\n"
    "\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException(S3AUtils.java:255)\n"
    "Caused by: com.amazonaws.services.s3.model.AmazonS3Exception: Forbidden (Service: Amazon S3; Status Code: 403; "
    "Error Code: 403 Forbidden)\n"
    "\tat com.amazonaws.http.AmazonHttpClient.handleErrorResponse(AmazonHttpClient.java:1879)\n")


PY4J_STAGE_FAILURE = (
    "An error occurred while calling o51.save.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 2.0 failed 1 times, most "
    "recent failure: Lost task 1.0 in stage 2.0 (TID 5) (vm executor driver): java.io.FileNotFoundException: File "
    "file:/data/in/part-7.avro does not exist\n"
    "\tat org.apache.hadoop.fs.RawLocalFileSystem.deprecatedGetFileStatus(RawLocalFileSystem.java:915)\n")


class Wrapper(Exception):
    """An error whose text carries a stack trace, as py4j's and Spark's wrappers do."""


def test_a_python_worker_error_inside_a_py4j_error_comes_down_to_the_python_error() -> None:
    failure = classify(Wrapper(PY4J_PYTHON_WORKER))
    assert failure.cause == "ValueError: field 'amount' is not a number: '12,5'"
    assert failure.retriable


def test_a_java_error_comes_down_to_its_deepest_cause_and_credentials_are_not_retried() -> None:
    failure = classify(Wrapper(PY4J_JAVA_CAUSE))
    assert failure.cause.startswith("com.amazonaws.services.s3.model.AmazonS3Exception: Forbidden")
    assert failure.permanent is Permanent.CREDENTIALS


def test_a_spark_stage_failure_comes_down_to_the_task_s_own_error() -> None:
    failure = classify(Wrapper(PY4J_STAGE_FAILURE))
    assert failure.cause == "java.io.FileNotFoundException: File file:/data/in/part-7.avro does not exist"
    assert failure.permanent is Permanent.MISSING_PATH


def test_an_error_of_ours_stays_as_it_is_and_only_failures_a_retry_cannot_fix_are_permanent() -> None:
    cross = FileSystemError("/data/staging/x.avro and s3a://hb/out/x.avro lie on different file systems: oncelog "
                            "moves files within one")
    assert classify(cross).cause == f"FileSystemError: {cross}"
    assert classify(cross).permanent is Permanent.CROSS_FILE_SYSTEMS
    assert classify(FileSystemError("S3 listing of s3a://hb/out failed: NoSuchBucket: The specified bucket does not "
                                    "exist")).permanent is Permanent.MISSING_BUCKET
    assert classify(ConfigError("'converter.sql' bad")).permanent is Permanent.CONFIGURATION
    assert classify(FileNotFoundError(2, "No such file or directory", "/in/a.avro")).permanent is Permanent.MISSING_PATH
    assert classify(ConnectionError("broker went away")).retriable
    assert classify(TimeoutError("read timed out")).retriable
    assert root_cause(RuntimeError("first\nsecond\n\tat x.y(Z.java:1)")) == "RuntimeError: first"


def unit(index: int) -> WorkUnitSpec:
    return WorkUnitSpec(work_unit_id=f"ds.{index}:0@0", dataset_urn=f"ds.{index}", partition=f"ds.{index}:0",
                        low_watermark=0, expected_high_watermark=10, estimated_records=10,
                        properties={"synthetic.partition": "0"})


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, events: Sequence[Event]) -> None:
        self.events.extend(events)


def test_a_failure_no_retry_can_fix_ends_the_task_after_one_attempt(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Task output on S3 with no credentials to be found: every attempt would fail the same way. With Gobblin's
    default retries (5, every 300 s) the task would take 25 minutes to fail; it ends after its first attempt."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    config = config_from_properties({
        "job.name": "nocreds", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": "3", "source.synthetic.partitions": "1", "dataset.urn": "ds",
        "task.maxretries": "5", "task.retry.intervalinsec": "300", "job.commit.policy": "successful",
        "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": "s3a://hb/task-output",
        "data.publisher.final.dir": "s3a://hb/published"})
    pauses: list[float] = []
    emit = Recorder()
    outcome = run_task(config, RUN_ID, MultiWorkUnit("task-00000", (unit(2), unit(10))), emit, sleep=pauses.append)
    assert not outcome.succeeded and outcome.attempts == 1 and pauses == []
    assert not any(isinstance(e, TaskRetried) for e in emit.events)
    (failed,) = [e for e in emit.events if isinstance(e, TaskFailed)]
    assert failed.cause.startswith("FileSystemError: S3 status of s3a://hb/task-output/") and failed.cause.endswith(
        "failed: Unable to locate credentials")
    assert (failed.failed_work_unit, failed.failed_dataset) == ("ds.2:0@0", "ds.2")
    assert not failed.retriable and failed.next_attempt == 0
    assert outcome.error is not None and "work unit ds.2:0@0 of ds.2: FileSystemError: " in outcome.error
    assert outcome.error.endswith("(not retried: credentials or permissions refused)")


@pytest.mark.parametrize("retries", [0, 2])
def test_a_failure_a_retry_may_fix_is_retried_and_each_failure_says_what_follows(retries: int, tmp_path: Path
                                                                                  ) -> None:
    config = config_from_properties({
        "job.name": "flaky", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "task.maxretries": str(retries), "task.retry.intervalinsec": "7",
        "writer.staging.dir": str(tmp_path / "staging"), "writer.output.dir": str(tmp_path / "output"),
        "data.publisher.final.dir": str(tmp_path / "published")})
    pauses: list[float] = []
    emit = Recorder()

    def attempt(task: MultiWorkUnit, number: int, last: bool) -> Sequence[WorkUnitResult]:
        raise ConnectionError(f"broker went away (attempt {number})")

    outcome = run_attempts(config, RUN_ID, MultiWorkUnit("task-00003", (unit(7),)), attempt, AttemptPlan.of(config),
                           emit, sleep=pauses.append)
    failed = [e for e in emit.events if isinstance(e, TaskFailed)]
    assert [f.attempt for f in failed] == list(range(1, retries + 2)) and pauses == [7.0] * retries
    assert [(f.next_attempt, f.retry_delay_s) for f in failed] == [(n + 2, 7.0) for n in range(retries)] + [(0, 0.0)]
    assert all(f.retriable and f.failed_dataset == "ds.7" for f in failed)
    assert failed[-1].cause == f"ConnectionError: broker went away (attempt {retries + 1})"
    assert outcome.error == f"work unit ds.7:0@0 of ds.7: ConnectionError: broker went away (attempt {retries + 1})"


def test_a_bucket_gone_after_preflight_fails_the_task_at_once_naming_the_bucket(
        s3: LocalS3, tmp_path: Path, spark: SparkSession) -> None:
    """Pre-flight finds a missing bucket before Spark starts; one deleted after it (here: never created) is met by
    the engine (here the records engine): its first attempt's error names
    the bucket, and no retry waits (Gobblin's 5 retries every 300 s)."""
    bucket = f"gone-{uuid.uuid4().hex[:8]}"
    url = f"sqlite:///{tmp_path / 'events.db'}"
    config = config_from_properties({
        "job.name": "gone", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": "2", "source.synthetic.partitions": "1", "dataset.urn": "ds",
        "source.synthetic.records.per.run": "20", "task.engine": "records", "oncelog.log.url": url,
        "task.maxretries": "5", "task.retry.intervalinsec": "300", "job.commit.policy": "successful",
        "writer.staging.dir": f"s3a://{bucket}/staging", "writer.output.dir": f"s3a://{bucket}/task-output",
        "data.publisher.final.dir": f"s3a://{bucket}/published", **s3_settings(s3)})
    result = JobLauncher(config, spark=spark).run()
    assert result.status is RunStatus.FAILED
    with open_log(url) as log:
        events = [e.event for e in log.read()]
    failed = [e for e in events if isinstance(e, TaskFailed)]
    assert failed and not [e for e in events if isinstance(e, TaskRetried)], failed
    for event in failed:
        assert f"NoSuchBucket: the bucket {bucket!r} does not exist" in event.cause, event.cause
        assert not event.retriable and "closed file" not in (event.error or ""), event.error
    assert result.error is not None and "closed file" not in result.error, result.error
    assert "(not retried: a bucket that does not exist)" in result.error, result.error
