"""Row policies of every type and Python DataFrame converters on the DataFrame engine: the records written, the
counts in the events, the ERR_FILE content, and the watermarks (what was read, whatever a policy dropped).

Real Spark (the session fixture), real files, a SQLite log.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from events.errors import ConfigError
from events.log import open_log
from events.task import TaskFailed, TaskStarted, TaskSucceeded, WorkUnitResult
from projections.projector import Projector
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.constructs import (
    Converter,
    Record,
    RowLevelPolicy,
    Schema,
    TaskLevelPolicy,
    TaskStats,
    WorkUnitState,
)
from spark_pipeline.engines.choice import choose
from spark_pipeline.jobfile.config import TaskEngineKind
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher, RunResult
from spark_pipeline.sources.synthetic import synthetic_record
from tests.fault.pipeline_checks import (
    DATASETS,
    PARTITIONS,
    RECORDS,
    avro_records,
    write_job,
)
from tests.kafka_plugin import create_topic
from tests.spark_pipeline.engines.dataframe.test_dataframe_engine import KAFKA_SOURCE, kafka_job, produce

pytestmark = [pytest.mark.spark]

PAYLOAD = 8
ROOT = Path(__file__).parents[4]
ODD = "amount % 10 <> 0"
"""A condition about a tenth of the synthetic records fail."""


def source_records() -> list[dict[str, Any]]:
    """Every record the synthetic job reads, in work-unit order."""
    return [synthetic_record(0, f"ds.{d}", p, o, PAYLOAD)
            for d in range(DATASETS) for p in range(PARTITIONS) for o in range(RECORDS)]


def run(job: Path, spark: SparkSession) -> RunResult:
    """One run of the job, which must commit."""
    result = JobLauncher(load_job_config(job), spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error
    return result


def unit_results(log_url: str) -> list[WorkUnitResult]:
    """The work unit results of every TaskSucceeded in the log."""
    with open_log(log_url) as log:
        return [r for e in log.read() if isinstance(e.event, TaskSucceeded) for r in e.event.results]


def committed_watermarks(log_url: str, published: Path) -> dict[tuple[str, str], int]:
    """Each dataset partition's committed watermark (verify must pass over the published files)."""
    with open_log(log_url) as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
        report = verify(log, str(published))
    assert report.ok, "\n".join(str(v) for v in report.violations)
    return {(urn, p): v for (_, urn), d in state.datasets.items() for p, v in d.watermarks.items()}


def error_lines(err: Path) -> list[dict[str, Any]]:
    """Every record of every error file under `err`, file by file in name order."""
    return [json.loads(line) for path in sorted(err.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def key(record: dict[str, Any]) -> tuple[str, int, int]:
    return record["dataset"], record["partition"], record["offset"]


def test_err_file_sql_policy_diverts_failing_records_to_the_error_file_and_keeps_the_watermarks(
        tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{
        "task.engine": "dataframe", "source.synthetic.payload.bytes": PAYLOAD,
        "qualitychecker.row.sql": ODD, "qualitychecker.row.sql.type": "err_file",
        "qualitychecker.row.err.file": str(tmp_path / "err")})
    result = run(job, spark)

    source = source_records()
    failing = [r for r in source if r["amount"] % 10 == 0]
    assert 0 < len(failing) < len(source) // 4
    published = avro_records(tmp_path / "published")
    assert sorted(map(key, published)) == sorted(key(r) for r in source if r["amount"] % 10 != 0)
    assert all(r == synthetic_record(0, r["dataset"], r["partition"], r["offset"], PAYLOAD) for r in published)
    diverted = error_lines(tmp_path / "err")
    assert sorted(diverted, key=key) == sorted(failing, key=key)  # the record engine's lines: the whole record
    files = sorted(p.name for p in (tmp_path / "err" / result.run_id).iterdir())
    assert files and all(name.startswith("task-") and name.endswith(".jsonl") for name in files)

    results = unit_results(url)
    assert len(results) == DATASETS * PARTITIONS
    for r in results:
        failed = sum(1 for f in failing if (f["dataset"], f"{f['dataset']}:{f['partition']}") ==
                     (r.dataset_urn, r.partition))
        assert (r.records_extracted, r.records_written) == (RECORDS, RECORDS - failed), r
        assert r.actual_high_watermark == r.expected_high_watermark == RECORDS
        assert sum(f.records for f in r.output_files) == RECORDS - failed
    assert set(committed_watermarks(url, tmp_path / "published").values()) == {RECORDS}


def test_optional_sql_policy_counts_only_and_writes_every_record(tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{
        "task.engine": "dataframe", "source.synthetic.payload.bytes": PAYLOAD,
        "qualitychecker.row.sql": ODD, "qualitychecker.row.sql.type": "OPTIONAL"})
    run(job, spark)
    assert len(avro_records(tmp_path / "published")) == len(source_records())
    assert {(r.records_extracted, r.records_written) for r in unit_results(url)} == {(RECORDS, RECORDS)}


def test_err_file_policy_type_without_an_error_file_names_the_key(tmp_path: Path) -> None:
    job = write_job(tmp_path, "sqlite:///unused.db", "full", None, **{
        "task.engine": "dataframe", "qualitychecker.row.sql": ODD, "qualitychecker.row.sql.type": "ERR_FILE"})
    with pytest.raises(ConfigError, match="qualitychecker.row.sql.type.*qualitychecker.row.err.file"):
        load_job_config(job)


def with_cents(frame: DataFrame) -> DataFrame:
    """A DataFrame converter: amount in cents as a column of its own."""
    return frame.withColumn("amount_cents", F.col("amount") * 100).drop("payload")


def even_offsets(frame: DataFrame) -> DataFrame:
    """A DataFrame converter that drops records: those at odd offsets."""
    return frame.where(F.col("offset") % 2 == 0)


def only_units(frame: DataFrame) -> DataFrame:
    """A DataFrame converter that loses the work unit column."""
    return frame.select("dataset", "offset")


def test_python_dataframe_functions_convert_the_records_after_the_sql_stages(
        tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{
        "task.engine": "dataframe", "source.synthetic.payload.bytes": PAYLOAD,
        "converter.sql.select": "*, upper(payload) AS code",
        "converter.dataframe.functions": f"{__name__}:with_cents"})
    run(job, spark)
    published = avro_records(tmp_path / "published")
    assert len(published) == len(source_records())
    assert set(published[0]) == {"dataset", "partition", "offset", "amount", "amount_cents", "code"}
    for record in published:
        source = synthetic_record(0, record["dataset"], record["partition"], record["offset"], PAYLOAD)
        assert (record["amount_cents"], record["code"]) == (source["amount"] * 100, source["payload"].upper())


@pytest.mark.parametrize(("path", "says"), [
    ("tests.integration.nowhere:f", "'converter.dataframe.functions': cannot use 'tests.integration.nowhere:f': "
                                    "cannot import module 'tests.integration.nowhere'"),
    (f"{__name__}.nope", f"'converter.dataframe.functions': cannot use '{__name__}.nope': module '{__name__}' has "
                         f"no function 'nope'"),
    (f"{__name__}.only_units", f"converter.dataframe.functions: {__name__}.only_units dropped the work unit column"),
])
def test_a_bad_dataframe_function_fails_the_run_before_any_task_naming_it(
        path: str, says: str, tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{"task.engine": "dataframe", "converter.dataframe.functions": path})
    with pytest.raises(ConfigError) as raised:
        JobLauncher(load_job_config(job), spark=spark).run()
    assert says in str(raised.value), raised.value
    assert unit_results(url) == []


class RoundAmount(RowLevelPolicy):
    """Fails records whose amount in cents ends in 000 (after the converter: it judges the converted record)."""

    def check(self, record: Record) -> bool:
        return bool(record["amount_cents"] % 1000 != 0)


class EvenOffsetsOnly(RowLevelPolicy):
    """Passes records with an even offset."""

    def check(self, record: Record) -> bool:
        return bool(record["offset"] % 2 == 0)


class SmallAmount(RowLevelPolicy):
    """Passes amounts under 50 000 (OPTIONAL in the tests: counted, never dropped)."""

    def check(self, record: Record) -> bool:
        return bool(record["amount"] < 50_000)


class EveryCopyJudged(TaskLevelPolicy):
    """With test_pipeline.Doubled (1:N) before the row policies, every converted record is written or rejected: the
    counts add up."""

    def check(self, stats: TaskStats) -> bool:
        return stats.records_written + stats.rows_rejected == 2 * stats.records_extracted


class ValueText(Converter):
    """Kafka records with their value as text."""

    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        return {**input_schema, "fields": [*input_schema["fields"], {"name": "text", "type": ["null", "string"]}]}

    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        yield {**record, "text": None if record["value"] is None else record["value"].decode()}


class NotDropped(RowLevelPolicy):
    """Fails records whose text starts with `drop`."""

    def check(self, record: Record) -> bool:
        return not str(record["text"]).startswith("drop")


class Opaque(Converter):
    """A converter whose records are not Avro records: it cannot say a schema Spark can hold."""

    def convert_schema(self, input_schema: Schema, state: WorkUnitState) -> Schema:
        return "opaque"

    def convert_record(self, output_schema: Schema, record: Record, state: WorkUnitState) -> Iterable[Record]:
        yield record


RECORD_CONSTRUCTS = {"source.synthetic.payload.bytes": PAYLOAD,
                     "converter.classes": "spark_pipeline.examples.converters.AmountInCents, "
                                          "tests.spark_pipeline.test_pipeline.Doubled",
                     "qualitychecker.row.policies": f"{__name__}.RoundAmount, {__name__}.EvenOffsetsOnly, "
                                                    f"{__name__}.SmallAmount",
                     "qualitychecker.row.policy.types": "ERR_FILE, MANDATORY, OPTIONAL",
                     "qualitychecker.task.policies": f"{__name__}.EveryCopyJudged"}


def run_on(engine: str, base: Path, spark: SparkSession) -> tuple[RunResult, list[dict[str, Any]]]:
    """The record-constructs job on one engine under `base`: its result and its published records."""
    base.mkdir()
    url = f"sqlite:///{base / 'events.db'}"
    job = write_job(base, url, "full", None, **{**RECORD_CONSTRUCTS, "task.engine": engine,
                                  "qualitychecker.row.err.file": str(base / "err")})
    result = run(job, spark)
    return result, avro_records(base / "published")


def test_record_converters_and_row_policies_publish_the_record_engines_records_on_the_dataframe_engine(
        tmp_path: Path, spark: SparkSession) -> None:
    records_run, by_records = run_on("records", tmp_path / "records", spark)
    frames_run, by_frames = run_on("dataframe", tmp_path / "dataframe", spark)
    assert records_run.engine is not None and records_run.engine[0] == "records"
    assert frames_run.engine is not None and frames_run.engine[0] == "dataframe"

    def order(r: dict[str, Any]) -> tuple[str, int, int, bool]:
        return r["dataset"], r["partition"], r["offset"], r["copy"]

    source = source_records()
    expected = [{**r, "amount_cents": r["amount"] * 100, "copy": c} for r in source for c in (False, True)
                if r["offset"] % 2 == 0 and r["amount"] % 10 != 0]
    assert sorted(by_frames, key=order) == sorted(by_records, key=order) == sorted(expected, key=order)

    def err(base: Path) -> list[dict[str, Any]]:
        return sorted(error_lines(base / "err"), key=order)

    diverted = err(tmp_path / "dataframe")
    assert diverted == err(tmp_path / "records")
    assert diverted and all(r["amount_cents"] % 1000 == 0 for r in diverted)
    assert len(diverted) == 2 * sum(1 for r in source if r["amount"] % 10 == 0)

    def err_files(base: Path, run_id: str) -> set[str]:
        """The error files' names past their task id (the DataFrame engine runs one task per run)."""
        return {p.name.split("-", 2)[2] for p in (base / "err" / run_id).iterdir()}

    assert err_files(tmp_path / "dataframe", frames_run.run_id) == err_files(tmp_path / "records", records_run.run_id)

    def counts(base: Path) -> list[tuple[str, str, int, int, int]]:
        return sorted((r.dataset_urn, r.partition, r.records_extracted, r.records_written, r.actual_high_watermark)
                      for r in unit_results(f"sqlite:///{base / 'events.db'}"))

    assert counts(tmp_path / "dataframe") == counts(tmp_path / "records")
    assert {c[2] for c in counts(tmp_path / "dataframe")} == {RECORDS}
    assert {c[4] for c in counts(tmp_path / "dataframe")} == {RECORDS}


def test_auto_runs_record_constructs_on_the_dataframe_engine_unless_a_converter_cannot_say_its_schema(
        tmp_path: Path) -> None:
    job = write_job(tmp_path, "sqlite:///unused.db", "full", None, **RECORD_CONSTRUCTS, **{
        "qualitychecker.row.err.file": str(tmp_path / "err")})
    config = load_job_config(job)
    assert choose(config).kind is TaskEngineKind.DATAFRAME
    opaque = config_from_properties({**config.properties, "converter.classes": f"{__name__}.Opaque"})
    choice = choose(opaque)
    assert choice.kind is TaskEngineKind.RECORDS
    assert (f"converter.classes ({__name__}.Opaque) cannot say its output as an Avro record schema Spark can hold"
            in choice.reason), choice.reason
    with pytest.raises(ConfigError, match=f"task.engine=dataframe: .*converter.classes \\({__name__}.Opaque\\)"):
        choose(config_from_properties({**opaque.properties, "task.engine": "dataframe"}))


@pytest.mark.parametrize("kind", ["MANDATORY", "OPTIONAL"])
def test_task_level_policies_judge_each_work_units_counts_after_the_write(
        kind: str, tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{
        "task.engine": "dataframe", "source.synthetic.payload.bytes": PAYLOAD,
        "qualitychecker.row.sql": "offset % 2 = 0",
        "qualitychecker.row.sql.type": "ERR_FILE",
        "qualitychecker.row.err.file": str(tmp_path / "err"),
        "qualitychecker.task.policies": "spark_pipeline.examples.policies.WroteEverything",
        "qualitychecker.task.policy.types": kind, "task.maxretries": 0})
    result = JobLauncher(load_job_config(job), spark=spark).run()
    with open_log(url) as log:
        events = [e.event for e in log.read()]
    if kind == "OPTIONAL":
        assert result.status is RunStatus.COMMITTED, result.error
        assert len(avro_records(tmp_path / "published")) == len(source_records()) // 2
        assert {(r.records_extracted, r.records_written) for r in unit_results(url)} == {(RECORDS, RECORDS // 2)}
        return
    assert result.status is RunStatus.FAILED
    failed = [e for e in events if isinstance(e, TaskFailed)]
    assert failed and len(failed) == len([e for e in events if isinstance(e, TaskStarted)])
    assert all("TaskQualityError: task-level policy WroteEverything failed for branch 0 of work unit" in e.error
               for e in failed), failed[0].error
    assert avro_records(tmp_path / "published") == [] and unit_results(url) == []
    assert not list((tmp_path / "staging").rglob("*.avro")), "a failed attempt left its files in staging"
    assert not (tmp_path / "err").exists(), "a failed attempt wrote its diverted records"


@pytest.mark.kafka
def test_a_kafka_job_with_a_record_converter_a_record_policy_and_an_err_file_sql_policy(
        kafka_bootstrap: str, tmp_path: Path, spark: SparkSession) -> None:
    topic = create_topic(kafka_bootstrap, 1, "dataframe-policies")
    produce(kafka_bootstrap, topic, 0, ["keep-0", "drop-1", "keep-2", "err-3", "keep-4"])
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = kafka_job(write_job(tmp_path, url, "full", None, **{
        "job.name": "kafka-policies", "source.class": KAFKA_SOURCE, "kafka.brokers": kafka_bootstrap,
        "topic.whitelist": topic, "task.engine": "dataframe", "converter.classes": f"{__name__}.ValueText",
        "qualitychecker.row.policies": f"{__name__}.NotDropped", "qualitychecker.row.sql": "text NOT LIKE 'err%'",
        "qualitychecker.row.sql.type": "ERR_FILE", "qualitychecker.row.err.file": str(tmp_path / "err")}))
    run(job, spark)

    published = avro_records(tmp_path / "published")
    assert sorted((r["offset"], r["text"], r["value"]) for r in published) == [
        (0, "keep-0", b"keep-0"), (2, "keep-2", b"keep-2"), (4, "keep-4", b"keep-4")]
    (diverted,) = error_lines(tmp_path / "err")
    assert (diverted["offset"], diverted["text"], diverted["value"]) == (3, "err-3", str(b"err-3"))
    (result,) = unit_results(url)
    assert (result.records_extracted, result.records_written, result.actual_high_watermark) == (5, 3, 5)
    watermarks = committed_watermarks(url, tmp_path / "published")
    assert watermarks == {(f"{topic}.0", f"{topic}:0"): 5}


def test_run_explain_shows_the_arrow_adapter_in_sparks_plan(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **RECORD_CONSTRUCTS,
                    **{"qualitychecker.row.err.file": str(tmp_path / "err")})
    shown = subprocess.run([sys.executable, "-m", "oncelog", "run", str(job), "--explain", "--json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    document = json.loads(shown.stdout)
    assert document["engine"]["kind"] == "dataframe"
    assert "MapInArrow" in document["spark_plan"] and "amount_cents" in document["spark_plan"]
    with open_log(url) as log:
        assert list(log.read()) == [], "explaining appended to the log"


def test_a_dataframe_function_that_drops_records_changes_the_counts_written_not_the_watermarks(
        tmp_path: Path, spark: SparkSession) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "full", None, **{
        "task.engine": "dataframe", "source.synthetic.payload.bytes": PAYLOAD,
        "converter.dataframe.functions": f"{__name__}.even_offsets"})
    run(job, spark)
    published = avro_records(tmp_path / "published")
    assert sorted(map(key, published)) == sorted(key(r) for r in source_records() if r["offset"] % 2 == 0)
    assert {(r.records_extracted, r.records_written, r.actual_high_watermark) for r in unit_results(url)} == {
        (RECORDS, RECORDS // 2, RECORDS)}
    assert set(committed_watermarks(url, tmp_path / "published").values()) == {RECORDS}
