"""Moving Gobblin jobs over: Gobblin keys with no meaning here are one warning, keys with an equivalent are mapped
(writer.fs.uri puts bare folders on HDFS or S3), HOCON `.conf` job files load like `.pull` files, and a folder of
Gobblin jobs gets one report per job. Fixtures are Gobblin's own documented examples (tests/fixtures/gobblin/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from spark_pipeline.jobfile.config import JobConfigError
from spark_pipeline.jobfile.partitions import partitioning_of
from spark_pipeline.jobfile.validation import MigrationReport, Verdict
from spark_pipeline.jobs import (
    load_job,
    load_job_config,
    load_job_dir,
    migration_report,
    migration_reports,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gobblin"
SYNTHETIC = "spark_pipeline.sources.synthetic.SyntheticSource"
PORTED = {  # a Gobblin job whose constructs are oncelog's: what a user has after replacing the Java classes
    "job.name": "Ported",
    "source.class": SYNTHETIC,
    "writer.staging.dir": "/gobblin/task-staging",
    "writer.output.dir": "/gobblin/task-output",
    "data.publisher.final.dir": "/gobblin/job-output",
}
TYPICAL_GOBBLIN_KEYS = {  # the 15 common Gobblin keys issue 13 found reported as bare "unknown key"s, and one more
    "extract.namespace": "com.shop.orders",
    "extract.table.type": "snapshot_append",
    "extract.table.name": "orders",
    "bootstrap.with.offset": "earliest",
    "writer.destination.type": "HDFS",
    "writer.file.path.type": "tablename",
    "writer.partitioner.class": "org.apache.gobblin.writer.partitioner.TimeBasedAvroWriterPartitioner",
    "metrics.enabled": "true",
    "metrics.reporting.file.enabled": "true",
    "metrics.log.dir": "/gobblin/metrics",
    "job.history.store.enabled": "false",
    "email.notification.enabled": "false",
    "mr.job.max.mappers": "4",
    "state.store.dir": "/gobblin/state-store",
    "writer.fs.uri": "file:///",
    "data.publisher.fs.uri": "file:///",
}


def write_pull(folder: Path, name: str, props: dict[str, str]) -> Path:
    """A `.pull` file of `key=value` lines."""
    path = folder / name
    path.write_text("".join(f"{key}={value}\n" for key, value in props.items()), encoding="utf-8")
    return path


def problems_of(path: Path, **environ: str) -> list[str]:
    """The problems loading `path` raises, as printed."""
    with pytest.raises(JobConfigError) as caught:
        load_job_config(path, environ=environ)
    return [str(p) for p in caught.value.problems]


# --- Gobblin's documented examples -------------------------------------------------------------------------------


def test_wikipedia_pull_reports_what_carries_over_and_only_the_true_problems() -> None:
    report = migration_report(FIXTURES / "wikipedia.pull", environ={})
    assert report.job_name == "PullFromWikipedia" and report.verdict is Verdict.WILL_NOT_RUN
    assert [i.key for i in report.ignored] == ["extract.namespace", "writer.destination.type"]
    assert [(m.key, m.value) for m in report.mapped] == [
        ("data.publisher.type", "spark_pipeline.publisher.BaseDataPublisher")]
    # what is left: Gobblin's Java constructs (its own partitioner too: not a time-based one oncelog applies), and
    # the folders Gobblin takes from its work dir
    assert sorted(p.key or p.message.split("'")[1] for p in report.problems) == [
        "converter.classes", "data.publisher.final.dir", "source.class", "writer.output.dir",
        "writer.partitioner.class", "writer.staging.dir"]
    assert all("Gobblin Java class" in p.message for p in report.problems
               if p.key and p.key != "writer.partitioner.class")
    assert any("WikipediaPartitioner' is not a partitioner oncelog applies" in p.message for p in report.problems)
    assert report.summary.endswith("will not run — 6 problems, 2 Gobblin keys ignored, 1 mapped")


def test_kafka_hdfs_pull_maps_task_data_root_and_writer_fs_uri() -> None:
    report = migration_report(FIXTURES / "kafka-hdfs.pull", environ={})
    final = {m.target: m.value for m in report.mapped}  # the last mapping of each key wins
    assert final == {
        "data.publisher.type": "spark_pipeline.publisher.BaseDataPublisher",
        "writer.staging.dir": "hdfs://localhost:9000/jobs/kafkaetl/gobblin/gobblin-kafka/task-data/task-staging",
        "writer.output.dir": "hdfs://localhost:9000/jobs/kafkaetl/gobblin/gobblin-kafka/task-data/task-output",
        "data.publisher.final.dir": "hdfs://localhost:9000/gobblintest/job-output",  # falls back to writer.fs.uri
    }
    ignored = {i.key for i in report.ignored}
    assert {"extract.namespace", "writer.destination.type", "mr.job.max.mappers", "metrics.log.dir",
            "bootstrap.with.offset", "fs.uri", "state.store.fs.uri", "state.store.dir", "mr.job.root.dir"} <= ignored
    assert [p.key for p in report.problems] == ["source.class", "writer.builder.class"]  # Java classes only


def test_a_hocon_conf_from_gobblins_docs_loads_with_substitutions_and_writer_fs_uri() -> None:
    report = migration_report(FIXTURES / "gobblin-on-yarn.conf", environ={})
    final = {m.target: m.value for m in report.mapped}
    # ${fs.uri} and ${gobblin.yarn.work.dir} are set later in the file (its reference.conf part): HOCON resolves them
    assert final["writer.staging.dir"] == "hdfs://localhost:9000/user/gobblin/gobblin-yarn/task-staging"
    assert final["data.publisher.final.dir"] == "hdfs://localhost:9000/user/gobblin/gobblin-yarn/job-output"
    ignored = {i.key: i for i in report.ignored}
    assert {"gobblin.yarn.work.dir", "state.store.dir", "job.lock.dir", "job.lock.type", "metrics.log.dir",
            "data.publisher.replace.final.dir", "zookeeper.connection.string"} <= set(ignored)
    assert ignored["state.store.dir"].line == 35  # lines are found in HOCON files too
    # a cluster configuration, not a job: no name, no source
    assert {p.message for p in report.problems} == {"required key 'job.name' is missing or empty",
                                                    "required key 'source.class' is missing or empty"}


def test_the_one_warning_lists_every_ignored_key_with_its_reason() -> None:
    report = migration_report(FIXTURES / "kafka-hdfs.pull", environ={})
    assert report.warning is not None and "\n" not in report.warning
    assert all(i.key in report.warning and i.reason in report.warning for i in report.ignored)
    assert report.warnings[0] == report.warning and len(report.warnings) == 1 + len(report.mapped)
    assert any("kafka-hdfs.pull:31: writer.fs.uri → data.publisher.final.dir" in n for n in report.notes)


# --- the typical ported .pull ------------------------------------------------------------------------------------


def test_a_typical_gobblin_pull_keeps_only_its_true_problem(tmp_path: Path) -> None:
    # before issue 13 these 16 keys were 16 problems; now they are one warning and two mappings, and the typo stays;
    # the time-based partitioner is applied (issue 24): not ignored
    path = write_pull(tmp_path, "orders.pull", {**PORTED, **TYPICAL_GOBBLIN_KEYS, "job.comit.policy": "full"})
    assert problems_of(path) == [f"{path}:22: unknown key 'job.comit.policy' (did you mean 'job.commit.policy'?)"]
    path = write_pull(tmp_path, "orders.pull", {**PORTED, **TYPICAL_GOBBLIN_KEYS})
    loaded = load_job(path, environ={})
    assert loaded.report.verdict is Verdict.WILL_RUN
    assert len(loaded.report.ignored) == 13
    partitioning = partitioning_of(loaded.config.properties)
    assert partitioning is not None and partitioning.zone == "America/Los_Angeles"  # Gobblin's defaults: hourly, PST
    assert {m.key for m in loaded.report.mapped} == {"writer.fs.uri", "data.publisher.fs.uri"}
    assert loaded.config.writer_output_dir == "/gobblin/task-output"  # file:/// keeps folders local
    (warning,) = [w for w in loaded.warnings if "ignored" in w]
    assert "13 Gobblin keys" in warning and "bootstrap.with.offset" in warning


def test_a_construct_that_reads_a_gobblin_key_gives_it_its_meaning(tmp_path: Path) -> None:
    props = {**PORTED, "source.class": "spark_pipeline.sources.kafka_topic.KafkaTopicSource",
             "kafka.brokers": "localhost:9092", "topic.whitelist": "orders", "bootstrap.with.offset": "latest"}
    loaded = load_job(write_pull(tmp_path, "kafka.pull", props), environ={})
    assert loaded.warnings == ()  # read by KafkaTopicSource: not ignored


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [("writer.fs.url", "writer.fs.uri"), ("data.publisher.fs.uri.x", "data.publisher.fs.uri"),
     ("job.comit.policy", "job.commit.policy"), ("extract.namepsace", "extract.namespace"),
     ("writer.outptu.dir", "writer.output.dir")],
)
def test_a_typo_stays_an_error_with_a_suggestion(tmp_path: Path, key: str, suggestion: str | None) -> None:
    path = write_pull(tmp_path, "job.pull", {**PORTED, key: "x"})
    (found,) = problems_of(path)
    hint = f" (did you mean {suggestion!r}?)" if suggestion else ""
    assert found == f"{path}:6: unknown key {key!r}{hint}"


def test_data_publisher_fs_uri_is_mapped_not_a_did_you_mean(tmp_path: Path) -> None:
    props = {**PORTED, "data.publisher.fs.uri": "s3a://lake-bucket"}
    loaded = load_job(write_pull(tmp_path, "job.pull", props), environ={})
    assert loaded.config.publisher_final_dir == "s3a://lake-bucket/gobblin/job-output"
    assert loaded.config.writer_output_dir == "/gobblin/task-output"  # the writer stays local
    (note,) = loaded.warnings
    assert note == (f"{tmp_path / 'job.pull'}:6: data.publisher.fs.uri → data.publisher.final.dir: "
                    f"'/gobblin/job-output' on 's3a://lake-bucket' is 's3a://lake-bucket/gobblin/job-output'")


# --- writer.fs.uri -----------------------------------------------------------------------------------------------


def test_writer_fs_uri_resolves_bare_writer_and_publisher_folders(tmp_path: Path) -> None:
    props = {**PORTED, "writer.fs.uri": "hdfs://nn:8020", "writer.output.dir": "/gobblin/out/../out"}
    config = load_job_config(write_pull(tmp_path, "job.pull", props), environ={})
    assert config.writer_output_dir == "hdfs://nn:8020/gobblin/out"
    assert config.writer_staging_dir == "hdfs://nn:8020/gobblin/task-staging"
    assert config.publisher_final_dir == "hdfs://nn:8020/gobblin/job-output"


def test_writer_fs_uri_leaves_a_folder_that_names_its_file_system(tmp_path: Path) -> None:
    props = {**PORTED, "writer.fs.uri": "hdfs://nn:8020", "data.publisher.final.dir": "s3a://bucket/lake"}
    report = load_job(write_pull(tmp_path, "job.pull", props), environ={}).report
    assert report.verdict is Verdict.WILL_RUN
    assert "'s3a://bucket/lake' already names its file system" in "\n".join(report.notes)


def test_branch_fs_uris_apply_to_their_branch_folders(tmp_path: Path) -> None:
    props = {**PORTED, "fork.branches": "2", "writer.fs.uri.1": "hdfs://other:8020",
             "writer.output.dir.1": "/branch1/out", "writer.staging.dir.1": "/branch1/staging",
             "data.publisher.final.dir.1": "/branch1/final"}
    config = load_job_config(write_pull(tmp_path, "job.pull", props), environ={})
    assert config.branch(0).writer_output_dir == "/gobblin/task-output/fork_0"
    assert config.branch(1).writer_output_dir == "hdfs://other:8020/branch1/out"
    assert config.branch(1).publisher_final_dir == "hdfs://other:8020/branch1/final"  # falls back to writer.fs.uri.1


@pytest.mark.parametrize(
    ("props", "fragment"),
    [({"writer.fs.uri": "nn:8020"}, "6: 'writer.fs.uri': scheme 'nn' is not supported"),
     ({"writer.fs.uri": "gs://bucket"}, "6: 'writer.fs.uri': scheme 'gs' is not supported"),
     ({"writer.fs.uri": "hdfs://nn:8020", "writer.output.dir": "relative/out"},
      "4: 'writer.output.dir': 'relative/out' is relative, and 'writer.fs.uri' puts it on hdfs://nn:8020"),
     ({"fork.branches": "2", "writer.fs.uri.1": "hdfs://nn:8020"},
      "7: 'writer.fs.uri.1' applies to branch 1's own folders, and none is set"),
     ({"data.publisher.replace.final.dir": "true"}, "6: 'data.publisher.replace.final.dir': oncelog never deletes")],
)
def test_a_gobblin_key_oncelog_cannot_honour_is_an_error_on_its_line(tmp_path: Path, props: dict[str, str],
                                                                     fragment: str) -> None:
    path = write_pull(tmp_path, "job.pull", {**PORTED, **props})
    found = problems_of(path)
    assert any(p.startswith(f"{path}:{fragment}") for p in found), found


def test_task_data_root_and_parallel_commits_map_to_oncelog_keys(tmp_path: Path) -> None:
    props = {key: value for key, value in PORTED.items() if key not in ("writer.staging.dir", "writer.output.dir")}
    props |= {"task.data.root.dir": "/gobblin/task-data", "job.commit.parallelize": "true",
              "job.commit.parallel.commits": "8"}
    config = load_job_config(write_pull(tmp_path, "job.pull", props), environ={})
    assert (config.writer_staging_dir, config.writer_output_dir) == ("/gobblin/task-data/task-staging",
                                                                     "/gobblin/task-data/task-output")
    assert config.commit_parallelism == 8
    serial = load_job_config(write_pull(tmp_path, "job.pull", {**PORTED, "job.commit.parallelize": "false"}),
                             environ={})
    assert serial.commit_parallelism == 1  # Gobblin commits datasets one at a time unless told otherwise


# --- HOCON -------------------------------------------------------------------------------------------------------


HOCON_JOB = """# a ported job in HOCON
data.publisher.final.dir = ${LAKE}/final
job {
  name = Hocon
  description = "literal ${not.substituted} in quotes"
}
source.class = spark_pipeline.sources.synthetic.SyntheticSource
source.synthetic { datasets = 3, partitions: ${source.synthetic.datasets} }
writer {
  staging.dir = ${data.publisher.final.dir}/../staging
  output.dir = ${LAKE}"/out"
}
spark.jars.packages = [a, b]
oncelog.log.url = ${?ONCELOG_TEST_LOG}
"""


def test_hocon_flattens_and_substitutes_like_gobblins_typesafe_config(tmp_path: Path) -> None:
    path = tmp_path / "job.conf"
    path.write_text(HOCON_JOB, encoding="utf-8")
    config = load_job_config(path, environ={"LAKE": "/lake"})
    assert config.job_name == "Hocon" and config.job_description == "literal ${not.substituted} in quotes"
    assert (config.writer_staging_dir, config.writer_output_dir) == ("/lake/final/../staging", "/lake/out")
    assert config.publisher_final_dir == "/lake/final"  # an environment variable, from the environment given
    assert config.properties["source.synthetic.partitions"] == "3"
    assert config.properties["spark.jars.packages"] == "a,b"
    assert "oncelog.log.url" not in config.properties  # ${?VAR} unset: the key is not set


def test_hocon_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "job.conf"
    path.write_text(HOCON_JOB, encoding="utf-8")
    missing = "invalid HOCON: ${LAKE} names no key of this file and no environment variable"
    assert problems_of(path) == [f"{path}:2: {missing}", f"{path}:11: {missing}"]  # each use, on its line
    path.write_text("job.name = x\nwriter {\n  output.dir = /a\n", encoding="utf-8")
    (found,) = problems_of(path)
    assert found.startswith(f"{path}:4: invalid HOCON: Expected '}}'"), found
    path.write_text("a = ${b}\nb = ${a}\n", encoding="utf-8")
    (found,) = problems_of(path)
    assert found.startswith(f"{path}:1: invalid HOCON: ") and "cycles" in found
    path.write_text('include required("missing.conf")\n', encoding="utf-8")
    (found,) = problems_of(path)
    assert found == f"{path}: invalid HOCON: cannot include {tmp_path / 'missing.conf'}: No such file or directory"


def test_a_key_problem_in_a_hocon_file_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "job.conf"
    path.write_text(HOCON_JOB.replace("partitions:", "partitons:"), encoding="utf-8")
    assert problems_of(path, LAKE="/lake") == [
        f"{path}:8: unknown key 'source.synthetic.partitons' (did you mean 'source.synthetic.partitions'?)"]


# --- a folder of Gobblin jobs ------------------------------------------------------------------------------------


def test_a_folder_of_gobblin_jobs_gets_one_report_per_job(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES, tmp_path / "jobs")
    write_pull(tmp_path / "jobs", "ported.pull", {**PORTED, **TYPICAL_GOBBLIN_KEYS})
    twin_folders = {"writer.staging.dir": "/twin/staging", "writer.output.dir": "/twin/out",
                    "data.publisher.final.dir": "/twin/final"}
    write_pull(tmp_path / "jobs", "twin.pull", {**PORTED, **twin_folders})
    reports = migration_reports(tmp_path / "jobs", environ={})
    assert all(isinstance(r, MigrationReport) for r in reports)
    verdicts = {Path(r.file).name: r.verdict for r in reports}
    assert verdicts == {"gobblin-on-yarn.conf": Verdict.WILL_NOT_RUN, "kafka-hdfs.pull": Verdict.WILL_NOT_RUN,
                        "ported.pull": Verdict.WILL_RUN, "twin.pull": Verdict.WILL_NOT_RUN,
                        "wikipedia.pull": Verdict.WILL_NOT_RUN}
    (twin,) = [r for r in reports if r.file.endswith("twin.pull")]
    assert [p.key for p in twin.problems] == ["job.name"]  # the same job.name as ported.pull: across-job check
    assert reports[2].as_dict()["verdict"] == "will run" and reports[2].as_dict()["mapped"]
    with pytest.raises(JobConfigError) as caught:
        load_job_dir(tmp_path / "jobs", environ={})  # the scheduler's view: every problem of every file at once
    assert len(caught.value.problems) == sum(len(r.problems) for r in reports)


def test_a_folder_report_needs_a_folder(tmp_path: Path) -> None:
    with pytest.raises(JobConfigError, match="not a directory of job files"):
        migration_reports(tmp_path / "nothing")
