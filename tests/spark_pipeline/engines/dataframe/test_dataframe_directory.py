"""The directory source and forks on the DataFrame engine: Spark's readers on exactly the planned files, the records
engine's records and watermarks, a file published once; a forked job's records written once per branch.

Real Spark (the session fixture), real files, a SQLite log.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import fastavro
import pytest
import yaml
from pyspark.sql import SparkSession

from events.errors import ConfigError
from events.job import ENGINE_PROPERTY, JobRunStarted, WorkUnitSpec, WorkUnitsPlanned
from events.log import open_log
from events.task import TaskFailed, TaskSucceeded
from projections.projector import Projector
from projections.views import RunStatus
from replay.verify import verify
from spark_pipeline.engines.choice import choose, unsupported
from spark_pipeline.jobfile.config import JobConfigError, TaskEngineKind
from spark_pipeline.jobs import config_from_properties, load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.sources.directory import (
    FILE,
    SPARK_SCHEMA_PROPERTY,
    DirectorySource,
    complete,
    position,
)
from spark_pipeline.sources.directory_frame import file_frame
from tests.fault.pipeline_checks import avro_records

pytestmark = [pytest.mark.spark]

DIRECTORY_SOURCE = "spark_pipeline.sources.directory.DirectorySource"
N_SCHEMA = json.dumps({"type": "record", "name": "N", "namespace": "test",
                       "fields": [{"name": "n", "type": "long"}, {"name": "tag", "type": "string"}]})


def write_job(base: Path, name: str, data: Path, **keys: Any) -> Path:
    """A directory job reading `data`, writing under `base`, logging to a SQLite file there."""
    job = {"job.name": name, "source.class": DIRECTORY_SOURCE, "source.filebased.data.directory": str(data),
           "writer.staging.dir": str(base / "staging"), "writer.output.dir": str(base / "task-output"),
           "data.publisher.final.dir": str(base / "publish"), "oncelog.log.url": f"sqlite:///{base / 'events.db'}",
           "task.maxretries": 0, "task.retry.intervalinsec": 0, "task.engine": "dataframe",
           "spark.master": "local[2]", "spark.ui.enabled": "false", **keys}
    path = base / f"{name}.yaml"
    path.write_text(json.dumps(job))
    return path


def run(job: Path, spark: SparkSession) -> list[int]:
    """One committed run; the records each of its tasks wrote."""
    result = JobLauncher(load_job_config(job), spark=spark).run()
    assert result.status is RunStatus.COMMITTED, result.error
    return [r.records_written for t in result.tasks for r in t.results]


def state_of(base: Path, name: str) -> dict[str, dict[str, int]]:
    """The job's committed watermarks by dataset, after verify passed over the log and the published files."""
    with open_log(f"sqlite:///{base / 'events.db'}") as log:
        report = verify(log, base / "publish")
        state, _ = Projector(log).rebuild(use_snapshot=False)
    assert report.ok, report.violations
    assert state.pending_sequences(name) == []
    return {urn: dict(view.watermarks) for urn, view in state.dataset_states(name).items()}


def events_of(base: Path, kind: type) -> list[Any]:
    with open_log(f"sqlite:///{base / 'events.db'}") as log:
        return [e.event for e in log.read() if isinstance(e.event, kind)]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def jsonl(path: Path, values: range, tag: str) -> Path:
    """JSON lines with blank lines between some and after the last (the records engine's blank-line rule)."""
    return write(path, "".join(json.dumps({"n": n, "tag": tag}) + ("\n\n" if n % 3 == 0 else "\n") for n in values))


def test_json_files_are_read_by_spark_once_each_with_the_records_engines_watermarks(
        tmp_path: Path, spark: SparkSession) -> None:
    data = tmp_path / "in"
    a, b = jsonl(data / "a.jsonl", range(0, 40), "a"), jsonl(data / "sub" / "b.jsonl", range(40, 50), "b")
    write(data / "_hidden.jsonl", '{"n": -1, "tag": "x"}\n')
    job = write_job(tmp_path, "dir-json", data, **{"source.filebased.format": "json", "source.filebased.recursive":
                                                   True, "source.filebased.json.schema": N_SCHEMA})
    assert sorted(run(job, spark)) == [10, 40]
    c = jsonl(data / "c.jsonl", range(50, 55), "c")
    assert sorted(run(job, spark)) == [5], "the second run reads the new file only"
    assert run(job, spark) == [], "nothing new: nothing planned, nothing published"

    records = avro_records(tmp_path / "publish")
    assert Counter((r["n"], r["tag"]) for r in records) == Counter(
        [(n, "a") for n in range(40)] + [(n, "b") for n in range(40, 50)] + [(n, "c") for n in range(50, 55)])
    assert state_of(tmp_path, "dir-json") == {
        "dir-json": {"a.jsonl": complete(a.stat().st_size), "c.jsonl": complete(c.stat().st_size)},
        "dir-json/sub": {"sub/b.jsonl": complete(b.stat().st_size)}}
    assert {p[ENGINE_PROPERTY] for p in (e.properties for e in events_of(tmp_path, JobRunStarted))} == {"dataframe"}


def parquet_file(spark: SparkSession, path: Path, values: range) -> Path:
    """One Parquet file of (id BIGINT, name STRING) rows, written by Spark (its one part file, renamed)."""
    folder = path.parent / f".{path.name}.spark"
    spark.createDataFrame([(v, f"n{v}") for v in values], "id BIGINT, name STRING").coalesce(1).write.parquet(
        folder.as_uri())  # a file: URI: a bare path goes to the default file system (HDFS, once its fixture ran)
    (part,) = folder.glob("part-*.parquet")
    part.rename(path)
    shutil.rmtree(folder)
    return path


@pytest.mark.parametrize("ddl", [None, "id BIGINT, name STRING"])
def test_parquet_files_with_an_inferred_or_given_schema_recorded_in_the_work_units(
        tmp_path: Path, spark: SparkSession, ddl: str | None) -> None:
    data = tmp_path / "in"
    first = [parquet_file(spark, data / f"p{i}.parquet", range(i * 100, i * 100 + 100)) for i in range(3)]
    keys: dict[str, Any] = {"source.filebased.format": "parquet", "source.filebased.files.pattern": "*.parquet"}
    if ddl:
        keys["source.filebased.schema"] = ddl
    job = write_job(tmp_path, "dir-parquet", data, **keys)
    assert sorted(run(job, spark)) == [100, 100, 100]
    late = parquet_file(spark, data / "p9.parquet", range(900, 950))
    assert run(job, spark) == [50]
    assert run(job, spark) == []

    records = avro_records(tmp_path / "publish")
    assert sorted((r["id"], r["name"]) for r in records) == [
        (v, f"n{v}") for v in [*range(300), *range(900, 950)]]
    assert state_of(tmp_path, "dir-parquet") == {"dir-parquet": {
        p.name: complete(p.stat().st_size) for p in [*first, late]}}
    planned = [u for e in events_of(tmp_path, WorkUnitsPlanned) for u in e.work_units]
    assert len(planned) == 4
    assert {u.properties[SPARK_SCHEMA_PROPERTY] for u in planned} == {"id BIGINT,name STRING"}


def test_records_and_dataframe_engines_publish_the_same_records_and_watermarks(
        tmp_path: Path, spark: SparkSession) -> None:
    data = tmp_path / "in"
    write(data / "a.log", "a1\r\na2\n\n  \na3")  # CRLF, blank lines, no final newline
    write(data / "b.log", "".join(f"b{i} é\n" for i in range(30)))
    write(data / "c.log", '{"k": 1}\n\n{"k": [2, 3]}\n\n\n')
    jsonl(data / "d.jsonl", range(7), "d")
    avro_file(tmp_path / "avro" / "e.avro", range(700), opt=True)
    cases: dict[str, tuple[Path, dict[str, Any]]] = {
        "lines": (data, {"source.filebased.files.pattern": "*.log"}),
        "json": (data, {"source.filebased.format": "json", "source.filebased.files.pattern": "c.log"}),
        "json-schema": (data, {"source.filebased.format": "json", "source.filebased.files.pattern": "*.jsonl",
                               "source.filebased.json.schema": N_SCHEMA}),
        "avro": (tmp_path / "avro", {"source.filebased.format": "avro"})}
    results: dict[str, tuple[Counter[str], dict[str, dict[str, int]]]] = {}
    for case, (folder, keys) in cases.items():
        for engine in ("records", "dataframe"):
            base = tmp_path / f"{case}-{engine}"
            base.mkdir()
            job = write_job(base, "same", folder, **{"task.engine": engine, **keys})
            run(job, spark)
            assert run(job, spark) == []
            assert {e.properties[ENGINE_PROPERTY] for e in events_of(base, JobRunStarted)} == {engine}
            records = Counter(json.dumps(r, sort_keys=True) for r in avro_records(base / "publish"))
            results[f"{case}-{engine}"] = (records, state_of(base, "same"))
        assert results[f"{case}-records"] == results[f"{case}-dataframe"], case
    assert sum(results["avro-dataframe"][0].values()) == 700 and sum(results["json-schema-dataframe"][0].values()) == 7
    lines = [json.loads(r) for r in results["lines-dataframe"][0]]
    assert {(r["file"], r["line_number"], r["text"]) for r in lines if r["file"] == "a.log"} == {
        ("a.log", 1, "a1"), ("a.log", 2, "a2"), ("a.log", 3, ""), ("a.log", 4, "  "), ("a.log", 5, "a3")}
    assert sorted(json.loads(r)["line_number"] for r in results["json-dataframe"][0]) == [1, 3]


def test_a_partly_read_file_resumes_at_its_watermark_and_bad_input_fails_naming_the_file(
        tmp_path: Path, spark: SparkSession) -> None:
    path = write(tmp_path / "partial.txt", "1\n2\n3\n")
    config = load_job_config(write_job(tmp_path, "resume", tmp_path))
    unit = WorkUnitSpec(work_unit_id="partial.txt@4", dataset_urn="resume", partition="partial.txt",
                        low_watermark=position(4), expected_high_watermark=complete(6), properties={FILE: str(path)})
    settings = DirectorySource(config).settings()
    assert [r.asDict() for r in file_frame(spark, settings, unit).collect()] == [
        {"file": "partial.txt", "line_number": 3, "text": "3"}], "the records engine's record for the same range"
    longer = unit.model_copy(update={"low_watermark": 0, "expected_high_watermark": complete(9)})
    with pytest.raises(Exception, match="ended at byte 6, before its size at planning"):
        file_frame(spark, settings, longer).collect()
    write(path, '{"ok": 1}\nnot json\n')
    json_settings = settings.model_copy(update={"format": "json"})
    bad = unit.model_copy(update={"low_watermark": 0, "expected_high_watermark": complete(19)})
    with pytest.raises(Exception, match="partial.txt line 2 is not JSON"):
        file_frame(spark, json_settings, bad).collect()


def test_a_file_read_whole_must_have_its_planned_size(tmp_path: Path, spark: SparkSession) -> None:
    path = parquet_file(spark, tmp_path / "p.parquet", range(5))
    config = load_job_config(write_job(tmp_path, "sized", tmp_path, **{"source.filebased.format": "parquet",
                                                                       "source.filebased.schema": "id BIGINT"}))
    unit = WorkUnitSpec(work_unit_id="p.parquet@0", dataset_urn="sized", partition="p.parquet", low_watermark=0,
                        expected_high_watermark=complete(path.stat().st_size),
                        properties={FILE: str(path), SPARK_SCHEMA_PROPERTY: "id BIGINT"})
    settings = DirectorySource(config).settings()
    assert [r.id for r in file_frame(spark, settings, unit).collect()] == list(range(5))
    grown = unit.model_copy(update={"expected_high_watermark": complete(path.stat().st_size - 1)})
    with pytest.raises(Exception, match="p.parquet is .* bytes, .* when the run was planned"):
        file_frame(spark, settings, grown).collect()


def test_csv_files_with_a_header_and_a_given_schema(tmp_path: Path, spark: SparkSession) -> None:
    data = tmp_path / "in"
    write(data / "a.csv", "id,name\n1,one\n2,two\n")
    write(data / "b.csv", "id,name\n3,three\n")
    job = write_job(tmp_path, "dir-csv", data, **{"source.filebased.format": "csv",
                                                  "source.filebased.schema": "id INT, name STRING",
                                                  "writer.output.format": "json"})
    assert sorted(run(job, spark)) == [1, 2]
    assert run(job, spark) == []
    rows = [json.loads(line) for path in sorted((tmp_path / "publish").rglob("*.json"))
            for line in path.read_text().splitlines()]
    assert sorted((r["id"], r["name"]) for r in rows) == [(1, "one"), (2, "two"), (3, "three")]
    assert set(state_of(tmp_path, "dir-csv")["dir-csv"]) == {"a.csv", "b.csv"}
    write(data / "c.csv", "id,name\n4,four\n")
    bad = write_job(tmp_path, "dir-csv", data, **{"source.filebased.format": "csv",
                                                  "source.filebased.schema": "id INTEGR, name"})
    with pytest.raises(ConfigError, match="source.filebased.schema='id INTEGR, name' is not a Spark DDL schema"):
        JobLauncher(load_job_config(bad), spark=spark).run()


def test_spark_only_formats_are_refused_on_the_records_engine(tmp_path: Path) -> None:
    job = write_job(tmp_path, "pq", tmp_path, **{"task.engine": "records", "source.filebased.format": "parquet"})
    with pytest.raises(JobConfigError, match="'source.filebased.format': parquet is read by the DataFrame engine only "
                                             ".*task.engine=records"):
        load_job_config(job)
    keys = {k: str(v) for k, v in yaml.safe_load(job.read_text()).items()}
    config = config_from_properties({**keys, "task.engine": "dataframe"}).model_copy(
        update={"task_engine": TaskEngineKind.RECORDS})  # past validation: choose refuses it too
    with pytest.raises(ConfigError, match="source.filebased.format=parquet is read by the DataFrame engine only"):
        choose(config)
    lines_with_ddl = write_job(tmp_path, "ddl", tmp_path, **{"source.filebased.schema": "a INT"})
    with pytest.raises(JobConfigError, match="source.filebased.schema"):
        load_job_config(lines_with_ddl)
    auto = load_job_config(write_job(tmp_path, "lines", tmp_path, **{"task.engine": "auto"}))
    assert unsupported(auto) == [] and choose(auto).kind.value == "dataframe"


# --- forks ---------------------------------------------------------------------------------------------------------

R_SCHEMA: dict[str, Any] = {"type": "record", "name": "R", "namespace": "test",
                            "fields": [{"name": "i", "type": "long"}, {"name": "s", "type": "string"}]}


def avro_file(path: Path, values: range, opt: bool = False) -> Path:
    """An Avro file of R records (`opt`: with a nullable field, null for every third), in several blocks."""
    schema = {**R_SCHEMA, "fields": [*R_SCHEMA["fields"], {"name": "o", "type": ["null", "string"], "default": None}]}
    rows = [{"i": v, "s": f"s{v}", **({"o": None if v % 3 else f"o{v}"} if opt else {})} for v in values]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as stream:
        fastavro.writer(stream, fastavro.parse_schema(schema if opt else R_SCHEMA), rows, sync_interval=200)
    return path


def parquet_rows(spark: SparkSession, folder: Path) -> list[tuple[int, str]]:
    """(i, s) of every row of every Parquet file under `folder`, read by Spark."""
    rows = spark.read.option("recursiveFileLookup", True).option("pathGlobFilter", "*.parquet").parquet(folder.as_uri())
    return [(row["i"], row["s"]) for row in rows.collect()]


def test_two_branches_with_different_formats_write_the_cached_records_once_each(
        tmp_path: Path, spark: SparkSession) -> None:
    data = tmp_path / "in"
    files = [avro_file(data / f"f{i}.avro", range(i * 500, i * 500 + 500)) for i in range(2)]
    job = write_job(tmp_path, "forked", data, **{"source.filebased.format": "avro", "fork.branches": 2,
                                                 "writer.output.format.1": "parquet", "writer.codec.type.0": "deflate"})
    assert sorted(run(job, spark)) == [1000, 1000], "each work unit's records written once per branch"
    files.append(avro_file(data / "f9.avro", range(9_000, 9_010)))
    assert run(job, spark) == [20]
    assert run(job, spark) == []

    expected = [(v, f"s{v}") for v in [*range(1000), *range(9_000, 9_010)]]
    assert sorted((r["i"], r["s"]) for r in avro_records(tmp_path / "publish" / "fork_0")) == expected
    assert sorted(parquet_rows(spark, tmp_path / "publish" / "fork_1")) == expected
    assert not list((tmp_path / "publish" / "fork_0").rglob("*.parquet"))
    assert not list((tmp_path / "publish" / "fork_1").rglob("*.avro"))
    assert state_of(tmp_path, "forked") == {"forked": {p.name: complete(p.stat().st_size) for p in files}}
    outputs = [f for e in events_of(tmp_path, TaskSucceeded) for r in e.results for f in r.output_files]
    # <output.dir>/fork_<b>/<run>/<task>/attempt-<n>/<dataset>/<file>: the attempt's own folder, recorded with the file
    assert all(Path(f.path).parent.parent == Path(f.folder) for f in outputs)
    assert sorted((f.branch, Path(f.folder).parents[2].name, Path(f.path).name.split("_")[0])
                  for f in outputs) == sorted(
        [(b, f"fork_{b}", name) for b in (0, 1) for name in ("f0.avro", "f1.avro", "f9.avro")]), \
        "each branch's files in its own task output folder, named by the work unit's range"
    assert all(Path(f.path).name.endswith(".avro" if f.branch == 0 else ".parquet") for f in outputs)


def test_a_branch_the_dataframe_engine_cannot_run_keeps_the_job_on_records(tmp_path: Path) -> None:
    keys = {"task.engine": "auto", "fork.branches": 2,
            "converter.classes.1": "spark_pipeline.examples.converters.AmountInCents"}
    config = load_job_config(write_job(tmp_path, "forked-records", tmp_path, **keys))
    choice = choose(config)
    assert choice.kind.value == "records"
    assert "converter.classes.1 names a branch's record constructs" in choice.reason
    with pytest.raises(ConfigError, match=r"converter.classes.1 names a branch's record constructs"):
        choose(load_job_config(write_job(tmp_path, "forked-df", tmp_path, **{**keys, "task.engine": "dataframe"})))


def test_a_branch_that_fails_to_write_moves_no_branchs_files_and_the_retry_publishes_each_once(
        tmp_path: Path, spark: SparkSession) -> None:
    data = tmp_path / "in"
    jsonl(data / "a.jsonl", range(20), "a")
    blocked = write(tmp_path / "blocked", "a file where branch 1's staging folder should be")
    job = write_job(tmp_path, "forked-fail", data, **{
        "source.filebased.format": "json", "fork.branches": 2, "writer.output.format.1": "json",
        "writer.staging.dir.1": str(blocked / "staging"), "writer.output.dir.1": str(tmp_path / "task-output-1"),
        "data.publisher.final.dir.1": str(tmp_path / "publish-1")})
    with pytest.raises(NotADirectoryError):  # the task failed; then the run cannot clean branch 1's staging either
        JobLauncher(load_job_config(job), spark=spark).run()
    (failure,) = events_of(tmp_path, TaskFailed)
    assert "ParentNotDirectoryException" in failure.error and failure.results == ()
    assert not [p for p in (tmp_path / "task-output").rglob("*") if p.is_file()], \
        "branch 0 was written, but nothing moved to its task output: branch 1 failed"
    assert not (tmp_path / "publish").exists() or not any((tmp_path / "publish").rglob("*.avro"))

    blocked.unlink()
    assert run(job, spark) == [40], "both branches' records, each once"
    assert run(job, spark) == []
    assert sorted(r["line_number"] for r in avro_records(tmp_path / "publish" / "fork_0")) == [
        n + 1 + (n + 2) // 3 for n in range(20)], "line numbers count the blank lines after n = 0, 3, 6, …"
    published_json = [json.loads(line) for p in (tmp_path / "publish-1").rglob("*.json")
                      for line in p.read_text().splitlines()]
    assert len(published_json) == 20
    size = (data / "a.jsonl").stat().st_size
    assert state_of(tmp_path, "forked-fail") == {"forked-fail": {"a.jsonl": complete(size)}}
