"""Job configuration: both syntaxes, substitution, Gobblin's keys and defaults, branches, constructs, and errors
that name every problem's key and file."""

from __future__ import annotations

import sys
import tempfile
import types
from collections.abc import Callable, Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from events.errors import ConfigError
from spark_pipeline.jobfile.config import (
    DEFAULT_PUBLISHER,
    DEFAULT_WRITER_BUILDER,
    JobCommitPolicy,
    JobConfig,
    JobConfigError,
    PolicyType,
    QualityPolicy,
    WorkUnitRetryPolicy,
    WriterOutputFormat,
)
from spark_pipeline.jobfile.cron import parse_cron
from spark_pipeline.jobs import config_from_properties, load_job, load_job_config, load_job_dir

M = __name__  # the constructs below are named by dotted path, as a job file names them


# --- test constructs -----------------------------------------------------------------------------------------------


class FakeSource:
    """A source that declares no keys."""


class KafkaSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    brokers: tuple[str, ...] = Field(alias="kafka.brokers")
    topics: tuple[str, ...] = Field(default=(), alias="topic.whitelist")
    fetch_max: int = Field(default=500, ge=1, alias="kafka.fetch.max")


class KafkaLikeSource:
    """A source that declares the keys it reads."""

    CONFIG_MODEL: ClassVar[type[BaseModel]] = KafkaSettings


class CodecSettings(BaseModel):
    codec: Literal["deflate", "snappy", "null"] = Field(default="deflate", alias="writer.codec.type")


class FileWriterBuilder:
    """A writer builder with its own keys and formats."""

    CONFIG_MODEL: ClassVar[type[BaseModel]] = CodecSettings
    SUPPORTED_OUTPUT_FORMATS: ClassVar[tuple[str, ...]] = ("AVRO", "JSON")


class FilePublisher:
    """A publisher without keys of its own."""


class UpperConverter:
    """A converter."""


class TrimConverter:
    """Another converter."""


class RowCountPolicy:
    """A task-level policy."""


class NotNullPolicy:
    """A row-level policy."""


class BadModelSource:
    """A CONFIG_MODEL that is no pydantic model."""

    CONFIG_MODEL: ClassVar[Any] = dict


class SecretSettings(BaseModel):
    password: str = Field(alias="source.password", min_length=12)
    timeout: int = Field(default=30, alias="source.timeout")


class SecretSource:
    """A source with a secret."""

    CONFIG_MODEL: ClassVar[type[BaseModel]] = SecretSettings


class Outer:
    class NestedSource:
        """A nested class, named module.Outer.NestedSource."""


not_a_class = 42

BASE: dict[str, str] = {
    "job.name": "PullOrders",
    "source.class": f"{M}.FakeSource",
    "writer.builder.class": f"{M}.FileWriterBuilder",
    "data.publisher.type": f"{M}.FilePublisher",
    "writer.staging.dir": "/tmp/oncelog/staging",
    "writer.output.dir": "/tmp/oncelog/output",
    "data.publisher.final.dir": "/data/final",
}


# --- helpers -------------------------------------------------------------------------------------------------------


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def properties_text(props: dict[str, str], separator: str = "=") -> str:
    return "".join(f"{escape(k)}{separator}{escape(v)}\n" for k, v in props.items())


def escape(text: str) -> str:
    """Java properties escaping, for keys and values alike (always safe for both)."""
    out: list[str] = []
    for i, char in enumerate(text):
        if char == "\\":
            out.append("\\\\")
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif char in "=:#!" or (char == " " and i == 0):
            out.append("\\" + char)
        elif ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def load_props(tmp_path: Path, props: dict[str, str], name: str = "job.properties", **env: str) -> JobConfig:
    return load_job_config(write(tmp_path, name, properties_text(props)), environ=env)


def problems(action: Callable[[], object]) -> list[str]:
    with pytest.raises(JobConfigError) as caught:
        action()
    return [str(p) for p in caught.value.problems]


def one_problem(action: Callable[[], object]) -> str:
    found = problems(action)
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def default_constructs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Stand-ins for the product's default writer builder and publisher (no CONFIG_MODEL)."""
    for path in (DEFAULT_WRITER_BUILDER, DEFAULT_PUBLISHER):
        module_name, _, class_name = path.rpartition(".")
        module = types.ModuleType(module_name)
        setattr(module, class_name, type(class_name, (), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    yield


# --- YAML ----------------------------------------------------------------------------------------------------------


def test_flat_and_nested_yaml_load_the_same_job(tmp_path: Path) -> None:
    flat = write(tmp_path, "flat.yaml", yaml.safe_dump({**BASE, "converter.classes": f"{M}.UpperConverter"}))
    nested = write(tmp_path, "nested.yml", f"""
job: {{name: PullOrders}}
source: {{class: {M}.FakeSource}}
converter:
  classes: [{M}.UpperConverter]
writer:
  builder.class: {M}.FileWriterBuilder
  staging: {{dir: /tmp/oncelog/staging}}
  output:
    dir: /tmp/oncelog/output
data.publisher:
  type: {M}.FilePublisher
  final.dir: /data/final
""")
    a, b = load_job_config(flat), load_job_config(nested)
    assert a == b
    assert a.job_name == "PullOrders" and a.converter_classes == (f"{M}.UpperConverter",)


def test_yaml_lists_and_scalars_read_as_properties_strings(tmp_path: Path) -> None:
    text = yaml.safe_dump(BASE) + (
        "task.maxretries: 7\njob.lock.enabled: no\nconverter.classes:\n"
        f"  - {M}.UpperConverter\n  - {M}.TrimConverter\n"
        "spark.some.date: 2024-01-01\nspark.ratio: 1.5\nspark.nothing:\nspark.hex: 0x10\n"
    )
    config = load_job_config(write(tmp_path, "job.yaml", text))
    assert config.task_max_retries == 7 and config.job_lock_enabled is False
    assert config.converter_classes == (f"{M}.UpperConverter", f"{M}.TrimConverter")
    props = config.properties
    assert props["converter.classes"] == f"{M}.UpperConverter,{M}.TrimConverter"
    assert props["task.maxretries"] == "7" and props["job.lock.enabled"] == "false"
    assert props["spark.some.date"] == "2024-01-01" and props["spark.ratio"] == "1.5"
    assert props["spark.nothing"] == "" and props["spark.hex"] == "16"


def test_yaml_merge_keys_and_anchors(tmp_path: Path) -> None:
    text = yaml.safe_dump(BASE) + "spark: {<<: &mem {executor.memory: 2g}, driver.memory: 1g}\n"
    config = load_job_config(write(tmp_path, "job.yaml", text))
    assert config.spark_conf == {"spark.master": "local[*]", "spark.executor.memory": "2g", "spark.driver.memory": "1g"}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("- a\n- b\n", "top level must be a mapping"),
        ("job.name: [a, {b: c}]\n", "'job.name': list items must be plain values"),
        ("converter.classes: ['a,b']\n", "contains a comma"),
        ("job: {name: x}\njob.name: y\n", "key 'job.name' is set more than once (first set on line 1)"),
        ("job.name: x\n  bad indent: [\n", "invalid YAML"),
    ],
)
def test_bad_yaml_is_an_error_naming_the_file(tmp_path: Path, text: str, fragment: str) -> None:
    path = write(tmp_path, "bad.yaml", text)
    found = problems(lambda: load_job_config(path))
    assert any(fragment in p and str(path) in p for p in found), found


# --- .properties syntax -------------------------------------------------------------------------------------------


def test_properties_syntax_follows_java_util_properties(tmp_path: Path) -> None:
    text = (
        "# a comment\n"
        "! another comment \\\n"
        "job.name = PullOrders\n"
        f"source.class: {M}.FakeSource\n"
        f"writer.builder.class   {M}.FileWriterBuilder\n"
        f"data.publisher.type={M}.FilePublisher\n"
        "   \t\n"
        "job.description = first \\\n"
        "      second \\\n"
        "\tthird\n"
        "spark.app.name = caf\\u00e9 \\\\ done\n"
        "spark.weird\\ key\\=x\\:y = v\n"
        "spark.trailing = keeps trailing   \n"
        "spark.even = ends with one backslash \\\\\n"
        "spark.next = not a continuation\n"
        "spark.empty =\n"
        "spark.escapes = a\\tb\\nc\\qd\n"
    )
    config = load_job_config(write(tmp_path, "job.pull", text.replace("\n", "\r\n")))
    props = config.properties
    assert config.job_name == "PullOrders"
    assert props["job.description"] == "first second third"
    assert props["spark.app.name"] == "café \\ done"
    assert props["spark.weird key=x:y"] == "v"
    assert props["spark.trailing"] == "keeps trailing   "
    assert props["spark.even"] == "ends with one backslash \\"
    assert props["spark.next"] == "not a continuation"
    assert props["spark.empty"] == ""
    assert props["spark.escapes"] == "a\tb\ncqd"
    assert "! another comment" not in str(props) and "job.name" in props


@pytest.mark.parametrize("suffix", [".properties", ".pull", ".job", ".yaml", ".yml", ".PULL"])
def test_every_job_file_extension_loads(tmp_path: Path, suffix: str) -> None:
    text = yaml.safe_dump(BASE) if suffix.lower() in (".yaml", ".yml") else properties_text(BASE)
    assert load_job_config(write(tmp_path, f"job{suffix}", text)).job_name == "PullOrders"


def test_properties_problems_name_file_and_line(tmp_path: Path) -> None:
    text = properties_text(BASE) + "spark.a = \\u12G4\njob.name = again\n= no key\n"
    path = write(tmp_path, "jobs/pull.properties", text)
    found = problems(lambda: load_job_config(path))
    assert f"{path}:8: malformed \\uXXXX escape '\\u12G4' in 'spark.a'" in found
    assert f"{path}:9: key 'job.name' is set more than once (first set on line 1)" in found
    assert any(p.startswith(f"{path}:10: a line has a value but no key") for p in found)


def test_unknown_extension_and_missing_file_name_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", "x = 1\n")
    assert one_problem(lambda: load_job_config(path)).startswith(f"{path}: unknown job file extension '.toml'")
    missing = tmp_path / "absent.properties"
    assert one_problem(lambda: load_job_config(missing)).startswith(f"{missing}: cannot read the file")


# --- substitution --------------------------------------------------------------------------------------------------


def test_references_and_environment_variables_resolve(tmp_path: Path) -> None:
    props = {**BASE, "spark.root": "/lake", "writer.output.dir": "${spark.root}/out/${job.name}",
             "data.publisher.final.dir": "${env:LAKE}/final", "job.description": "costs $${price} ${ spark.root }"}
    config = load_props(tmp_path, props, LAKE="/mnt/lake")
    assert config.writer_output_dir == "/lake/out/PullOrders"
    assert config.publisher_final_dir == "/mnt/lake/final"
    assert config.job_description == "costs ${price} /lake"


def test_bad_references_are_errors_naming_key_and_file(tmp_path: Path) -> None:
    props = {**BASE, "spark.a": "${spark.b}", "spark.b": "${spark.a}", "spark.self": "x${spark.self}",
             "spark.c": "${spark.nope}", "spark.d": "${env:NOT_SET_ANYWHERE}", "spark.e": "${}"}
    path = write(tmp_path, "refs.properties", properties_text(props))
    found = problems(lambda: load_job_config(path, environ={}))
    assert f"{path}:9: 'spark.b' circular reference: spark.a -> spark.b -> spark.a" in found
    assert f"{path}:10: 'spark.self' circular reference: spark.self -> spark.self" in found
    assert f"{path}:11: 'spark.c' references ${{spark.nope}} but no key 'spark.nope' is defined in this file" in found
    assert (f"{path}:12: 'spark.d' references ${{env:NOT_SET_ANYWHERE}} but environment variable "
            f"'NOT_SET_ANYWHERE' is not set") in found
    assert f"{path}:13: 'spark.e' has an empty reference ${{}}" in found
    assert len(found) == 5


def test_a_failed_reference_in_a_required_key_is_reported_once(tmp_path: Path) -> None:
    props = {**BASE, "job.name": "${env:JOB}"}
    found = one_problem(lambda: load_props(tmp_path, props))
    assert "'job.name' references ${env:JOB}" in found


# --- core keys: values, defaults, errors -------------------------------------------------------------------------


def test_defaults_are_gobblins() -> None:
    fields = JobConfig.model_fields
    assert fields["job_commit_policy"].default is JobCommitPolicy.FULL
    assert fields["task_max_retries"].default == 5  # Gobblin's DEFAULT_MAX_TASK_RETRIES
    assert fields["task_retry_interval_s"].default == 300
    assert fields["workunit_retry_enabled"].default is True
    assert fields["workunit_retry_policy"].default is None  # unset: derived from workunit.retry.enabled
    assert fields["job_lock_enabled"].default is True
    assert fields["fork_branches"].default == 1
    assert fields["writer_output_format"].default is WriterOutputFormat.AVRO
    assert fields["writer_builder_class"].default == "spark_pipeline.writers.AvroDataWriterBuilder"
    assert fields["publisher_type"].default == "spark_pipeline.publisher.BaseDataPublisher"
    assert fields["log_url"].default == "sqlite:///.oncelog/events.db"
    assert fields["commit_sequence_max_attempts"].default == 3
    assert fields["commit_parallelism"].default == 32
    assert fields["spark_master"].default == "local[*]"


def test_a_minimal_job_gets_the_defaults(tmp_path: Path) -> None:
    config = load_props(tmp_path, BASE)
    assert config.job_commit_policy is JobCommitPolicy.FULL and config.task_max_retries == 5
    assert config.effective_workunit_retry_policy is WorkUnitRetryPolicy.ALWAYS
    assert config.retries_failed_work_units and config.job_lock_enabled and config.fork_branches == 1
    assert config.default_dataset_urn == "PullOrders" and config.schedule is None
    assert config.spark_conf == {"spark.master": "local[*]"} and config.log_settings == {}


def test_values_are_case_insensitive_where_gobblin_is(tmp_path: Path) -> None:
    config = load_props(tmp_path, {**BASE, "job.commit.policy": "Successful", "writer.output.format": "json",
                                   "workunit.retry.policy": "OnPartial", "job.lock.enabled": "FALSE"})
    assert config.job_commit_policy is JobCommitPolicy.SUCCESSFUL
    assert config.writer_output_format is WriterOutputFormat.JSON
    assert config.workunit_retry_policy is WorkUnitRetryPolicy.ONPARTIAL and not config.job_lock_enabled


@pytest.mark.parametrize(
    ("policy", "enabled", "commit", "retries"),
    [
        (None, "true", "full", True),
        (None, "false", "full", False),
        ("always", "false", "partial", True),  # an explicit policy wins over workunit.retry.enabled
        ("never", "true", "full", False),
        ("onpartial", "true", "partial", True),
        ("onpartial", "true", "full", False),
        ("onfull", "true", "full", True),
        ("onfull", "true", "successful", False),
    ],
)
def test_work_unit_retry_follows_gobblin(tmp_path: Path, policy: str | None, enabled: str, commit: str,
                                         retries: bool) -> None:
    props = {**BASE, "workunit.retry.enabled": enabled, "job.commit.policy": commit}
    if policy:
        props["workunit.retry.policy"] = policy
    assert load_props(tmp_path, props).retries_failed_work_units is retries


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("job.name", "orders/2024", "must be 1-200 letters, digits"),
        ("job.name", "-leading", "must be 1-200 letters"),
        ("job.group", "a group", "must be 1-200 letters"),
        ("source.class", "NotDotted", "is not a dotted path to a Python class"),
        ("converter.classes", f"{M}.UpperConverter, bad path", "item 2: 'bad path' is not a dotted path"),
        ("job.commit.policy", "fulll", "Input should be 'full', 'partial' or 'successful'"),
        ("task.maxretries", "-1", "greater than or equal to 0"),
        ("task.maxretries", "many", "valid integer"),
        ("task.retry.intervalinsec", "5m", "valid integer"),
        ("fork.branches", "0", "greater than or equal to 1"),
        ("writer.output.format", "XML", "Input should be 'AVRO'"),
        ("workunit.retry.policy", "sometimes", "Input should be 'always', 'onpartial', 'onfull' or 'never'"),
        ("workunit.retry.enabled", "maybe", "valid boolean"),
        ("job.lock.enabled", "sure", "valid boolean"),
        ("job.schedule", "every day", "has 2 fields"),
        ("oncelog.log.url", "postgres://db", "unknown scheme 'postgres'"),
        ("commit.parallelism", "0", "greater than or equal to 1"),
        ("commit.sequence.max.attempts", "x", "valid integer"),
        ("qualitychecker.task.policy.types", "MANDATORY,SOMETIMES", "item 2: Input should be"),
    ],
)
def test_an_invalid_value_is_an_error_naming_key_file_and_line(tmp_path: Path, key: str, value: str,
                                                                fragment: str) -> None:
    props = {**BASE, key: value}
    if key == "qualitychecker.task.policy.types":
        props["qualitychecker.task.policies"] = f"{M}.RowCountPolicy,{M}.RowCountPolicy"
    path = write(tmp_path, "jobs/pull.properties", properties_text(props))
    line = list(props).index(key) + 1
    found = one_problem(lambda: load_job_config(path))
    assert found.startswith(f"{path}:{line}: '{key}'") and fragment in found, found


def test_required_keys_missing_are_all_listed(tmp_path: Path) -> None:
    path = write(tmp_path, "empty.yaml", "job.description: nothing else\njob.name: ''\n")
    found = problems(lambda: load_job_config(path))
    assert f"{path}:2: required key 'job.name' is missing or empty" in found
    assert f"{path}: required key 'source.class' is missing or empty" in found


def test_unknown_key_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs/pull.properties", properties_text({**BASE, "job.comit.policy": "full"}))
    assert one_problem(lambda: load_job_config(path)) == (
        f"{path}:8: unknown key 'job.comit.policy' (did you mean 'job.commit.policy'?)")


def test_unknown_key_far_from_everything_has_no_suggestion(tmp_path: Path) -> None:
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "zzz": "1"}))
    assert found.endswith("unknown key 'zzz'")


def test_gobblin_keys_oncelog_does_not_use_are_a_warning_that_says_what_to_do_instead(tmp_path: Path) -> None:
    # issue 13: once an error, a Gobblin key with no meaning here is accepted and named in the job's one warning
    loaded = load_job(write(tmp_path, "job.properties", properties_text({**BASE, "launcher.type": "LOCAL"})))
    (warning,) = loaded.warnings
    assert "launcher.type" in warning and "spark.master" in warning


def test_several_problems_are_all_listed_in_one_error(tmp_path: Path) -> None:
    props = {**BASE, "job.comit.policy": "full", "task.maxretries": "lots", "fork.branches": "two",
             "writer.outptu.dir": "/x"}
    path = write(tmp_path, "many.properties", properties_text(props))
    with pytest.raises(JobConfigError) as caught:
        load_job_config(path)
    error = caught.value
    assert isinstance(error, ConfigError)
    assert len(error.problems) == 4
    message = str(error)
    assert message.startswith("invalid job configuration (4 problems); nothing was run:")
    for fragment in ("'job.comit.policy' (did you mean 'job.commit.policy'?)", "'task.maxretries'",
                     "'fork.branches'", "'writer.outptu.dir' (did you mean 'writer.output.dir'?)"):
        assert fragment in message
    assert [p.line for p in error.problems] == [8, 9, 10, 11]


def test_spark_and_log_settings_pass_through(tmp_path: Path) -> None:
    config = load_props(tmp_path, {**BASE, "spark.master": "spark://m:7077", "spark.executor.memory": "4g",
                                   "oncelog.log.url": "kafka://k1:9092,k2:9092",
                                   "oncelog.log.security.protocol": "SASL_SSL"})
    assert config.spark_conf == {"spark.master": "spark://m:7077", "spark.executor.memory": "4g"}
    assert config.log_url == "kafka://k1:9092,k2:9092"
    assert config.log_settings == {"security.protocol": "SASL_SSL"}


def test_other_oncelog_keys_are_unknown(tmp_path: Path) -> None:
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "oncelog.log.ur": "x", "oncelog.lg.url": "y"}))
    assert "unknown key 'oncelog.lg.url' (did you mean 'oncelog.log.url'?)" in found


def test_secrets_are_not_echoed(tmp_path: Path) -> None:
    props = {**BASE, "source.class": f"{M}.SecretSource", "source.password": "${env:PW}", "source.timeout": "x"}
    config_error = problems(lambda: load_props(tmp_path, {**props, "source.password": "hunter2!"}))
    assert not any("hunter2" in p for p in config_error), config_error
    config = load_props(tmp_path, {**props, "source.timeout": "5"}, PW="s3cret-password")
    assert "s3cret-password" not in repr(config) and config.properties["source.password"] == "s3cret-password"


@pytest.mark.parametrize("count", ["0", "999999999"])
def test_an_invalid_branch_count_does_not_flag_every_suffix(tmp_path: Path, count: str) -> None:
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "fork.branches": count, "writer.output.dir.1": "/x"}))
    assert "'fork.branches'" in found


def test_job_config_is_frozen(tmp_path: Path) -> None:
    config = load_props(tmp_path, BASE)
    with pytest.raises(ValidationError):
        setattr(config, "job_name", "other")  # noqa: B010 - assignment must fail at runtime


def test_from_properties_validates_like_a_file() -> None:
    config = config_from_properties({**BASE, "dataset.urn": "${job.name}.0"}, environ={})
    assert config.default_dataset_urn == "PullOrders.0"
    found = problems(lambda: config_from_properties({**BASE, "fork.brances": "2"}, source="api"))
    assert found == ["api: unknown key 'fork.brances' (did you mean 'fork.branches'?)"]


# --- quality policies ---------------------------------------------------------------------------------------------


def test_policies_pair_with_types_and_default_to_mandatory(tmp_path: Path) -> None:
    config = load_props(tmp_path, {
        **BASE,
        "qualitychecker.row.policies": f"{M}.NotNullPolicy",
        "qualitychecker.task.policies": f"{M}.RowCountPolicy, {M}.NotNullPolicy",
        "qualitychecker.task.policy.types": "fail, optional",
    })
    assert config.row_policies == (QualityPolicy(f"{M}.NotNullPolicy", PolicyType.MANDATORY),)
    assert config.branch(0).task_policies == (QualityPolicy(f"{M}.RowCountPolicy", PolicyType.MANDATORY),
                                              QualityPolicy(f"{M}.NotNullPolicy", PolicyType.OPTIONAL))


def test_policy_and_type_counts_must_match(tmp_path: Path) -> None:
    props = {**BASE, "qualitychecker.task.policies": f"{M}.RowCountPolicy",
             "qualitychecker.task.policy.types": "MANDATORY,OPTIONAL"}
    found = one_problem(lambda: load_props(tmp_path, props))
    assert ("'qualitychecker.task.policy.types' lists 2 type(s) but 'qualitychecker.task.policies' lists 1 "
            "policies") in found


def test_err_file_needs_a_row_error_file_and_is_row_level_only(tmp_path: Path) -> None:
    props = {**BASE, "qualitychecker.row.policies": f"{M}.NotNullPolicy", "qualitychecker.row.policy.types": "ERR_FILE",
             "qualitychecker.task.policies": f"{M}.RowCountPolicy", "qualitychecker.task.policy.types": "err_file"}
    found = problems(lambda: load_props(tmp_path, props))
    assert any("'qualitychecker.row.policy.types' uses ERR_FILE but 'qualitychecker.row.err.file' is not set" in p
               for p in found), found
    assert any("'qualitychecker.task.policy.types': ERR_FILE applies to row-level policies only" in p
               for p in found), found
    props["qualitychecker.row.err.file"] = "/tmp/err"
    props["qualitychecker.task.policy.types"] = "OPTIONAL"
    assert load_props(tmp_path, props).row_policies[0].type is PolicyType.ERR_FILE


# --- fork branches ------------------------------------------------------------------------------------------------


def test_branch_settings_with_suffixes_and_fallbacks(tmp_path: Path) -> None:
    config = load_props(tmp_path, {
        **BASE,
        "fork.branches": "2",
        "converter.classes": f"{M}.UpperConverter",
        "converter.classes.1": f"{M}.TrimConverter",
        "qualitychecker.row.policies.0": f"{M}.NotNullPolicy",
        "qualitychecker.task.policies": f"{M}.RowCountPolicy",
        "qualitychecker.task.policies.1": f"{M}.NotNullPolicy",
        "qualitychecker.task.policy.types.1": "OPTIONAL",
        "writer.output.dir.1": "/tmp/oncelog/output-json",
        "writer.output.format.1": "JSON",
        "fork.branch.name.1": "json",
        "writer.codec.type.1": "snappy",
    })
    zero, one = config.branches
    assert config.converter_classes == (f"{M}.UpperConverter",)  # the master branch, before the fork
    assert zero.name == "fork_0" and one.name == "json"
    assert zero.converter_classes == () and one.converter_classes == (f"{M}.TrimConverter",)
    assert zero.row_policies == (QualityPolicy(f"{M}.NotNullPolicy", PolicyType.MANDATORY),)
    assert zero.task_policies == (QualityPolicy(f"{M}.RowCountPolicy", PolicyType.MANDATORY),)
    assert one.task_policies == (QualityPolicy(f"{M}.NotNullPolicy", PolicyType.OPTIONAL),)
    assert zero.writer_output_dir == "/tmp/oncelog/output/fork_0"
    assert one.writer_output_dir == "/tmp/oncelog/output-json"
    assert zero.writer_staging_dir == "/tmp/oncelog/staging/fork_0"
    assert one.writer_staging_dir == "/tmp/oncelog/staging/json"
    assert zero.publisher_final_dir == "/data/final/fork_0"
    assert zero.writer_output_format is WriterOutputFormat.AVRO
    assert one.writer_output_format is WriterOutputFormat.JSON
    assert config.construct_settings(FileWriterBuilder) == CodecSettings()
    assert config.construct_settings(FileWriterBuilder, branch=1) == CodecSettings.model_validate(
        {"writer.codec.type": "snappy"})
    with pytest.raises(IndexError):
        config.branch(2)


def test_a_single_branch_reads_unsuffixed_keys(tmp_path: Path) -> None:
    branch = load_props(tmp_path, BASE).branch(0)
    assert branch.writer_output_dir == "/tmp/oncelog/output" and branch.publisher_final_dir == "/data/final"
    assert branch.writer_builder_class == f"{M}.FileWriterBuilder"


def test_suffix_beyond_the_branches_is_an_error_naming_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "fork.properties", properties_text({**BASE, "fork.branches": "2",
                                                               "writer.output.dir.2": "/x"}))
    assert one_problem(lambda: load_job_config(path)) == (
        f"{path}:9: 'writer.output.dir.2': branch 2 does not exist: fork.branches is 2 (branches are numbered from 0)")


def test_branch_keys_need_a_suffix_and_non_branch_keys_take_none(tmp_path: Path) -> None:
    found = problems(lambda: load_props(tmp_path, {**BASE, "fork.branch.name": "x", "job.name.0": "y",
                                                    "writer.output.dirr.1": "/x", "fork.branches": "2"}))
    assert any("'fork.branch.name' needs a branch suffix: fork.branch.name.N" in p for p in found), found
    assert any("unknown key 'job.name.0' (did you mean 'job.name'?)" in p for p in found), found
    assert any("unknown key 'writer.output.dirr.1' (did you mean 'writer.output.dir.1'?)" in p for p in found), found


def test_branches_may_not_share_directories(tmp_path: Path) -> None:
    props = {**BASE, "fork.branches": "2", "writer.output.dir.0": "/same", "writer.output.dir.1": "/same",
             "writer.staging.dir.1": "/tmp/oncelog/output/fork_1"}
    found = one_problem(lambda: load_props(tmp_path, props))
    assert ("'writer.output.dir.1' (branch 1) and 'writer.output.dir.0' (branch 0) are both '/same'; staging, "
            "output and final folders must be separate: none equal to or inside another") in found
    props["writer.output.dir.1"] = "/tmp/oncelog/output/fork_1/"
    found = one_problem(lambda: load_props(tmp_path, props))
    assert "'writer.output.dir.1' (branch 1) and 'writer.staging.dir.1' (branch 1) are both" in found
    single = {**BASE, "data.publisher.final.dir": BASE["writer.output.dir"]}
    found = one_problem(lambda: load_props(tmp_path, single))
    assert "'data.publisher.final.dir' and 'writer.output.dir' are both '/tmp/oncelog/output'" in found


def test_a_folder_inside_another_is_an_error_naming_both_keys_and_paths(tmp_path: Path) -> None:
    nested = {**BASE, "data.publisher.final.dir": "/tmp/oncelog/staging/published"}
    path = write(tmp_path, "nested.properties", properties_text(nested))
    assert one_problem(lambda: load_job_config(path)) == (
        f"{path}:7: 'data.publisher.final.dir' '/tmp/oncelog/staging/published' is inside 'writer.staging.dir' "
        f"'/tmp/oncelog/staging'; staging, output and final folders must be separate: none equal to or inside another")
    around = {**BASE, "writer.staging.dir": "/tmp/oncelog", "writer.output.dir": "/tmp/oncelog-output"}
    assert load_props(tmp_path, around).writer_staging_dir == "/tmp/oncelog"  # a shared name prefix is no nesting


def test_folders_compare_resolved_relative_and_through_symlinks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lake").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "lake")
    relative = {**BASE, "writer.output.dir": "lake/../lake/out", "data.publisher.final.dir": "lake"}
    found = one_problem(lambda: load_props(tmp_path, relative))
    assert (f"'writer.output.dir' 'lake/../lake/out' ({tmp_path / 'lake' / 'out'}) is inside "
            f"'data.publisher.final.dir' 'lake' ({tmp_path / 'lake'})") in found
    linked = {**BASE, "writer.output.dir": str(tmp_path / "link"), "data.publisher.final.dir": str(tmp_path / "lake")}
    assert (f"'data.publisher.final.dir' {str(tmp_path / 'lake')!r} and 'writer.output.dir' "
            f"{str(tmp_path / 'link')!r} are one folder, {tmp_path / 'lake'}") in one_problem(
        lambda: load_props(tmp_path, linked))


def test_branch_folders_nested_in_another_branch_are_an_error(tmp_path: Path) -> None:
    props = {**BASE, "fork.branches": "2", "data.publisher.final.dir.1": "/data/final/fork_0/more"}
    found = one_problem(lambda: load_props(tmp_path, props))
    assert ("'data.publisher.final.dir.1' (branch 1) '/data/final/fork_0/more' is inside 'data.publisher.final.dir' "
            "(branch 0) '/data/final/fork_0'") in found
    assert len(load_props(tmp_path, {**BASE, "fork.branches": "3"}).branches) == 3  # shared roots: own sub-folders


# --- folders: local, HDFS, S3 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["writer.staging.dir", "writer.output.dir", "data.publisher.final.dir",
                                 "qualitychecker.row.err.file"])
@pytest.mark.parametrize("value", ["gs://b/x", "ftp://host/x", "abfs://c@a/x"])
def test_a_folder_with_an_unsupported_scheme_is_an_error_naming_key_value_and_file(tmp_path: Path, key: str,
                                                                                   value: str) -> None:
    path = write(tmp_path, "remote.properties", properties_text({**BASE, key: value}))
    found = one_problem(lambda: load_job_config(path))
    scheme = value.partition(":")[0].lower()
    assert found.startswith(f"{path}:") and f"{key!r}: {value!r}: scheme {scheme!r} is not supported" in found
    assert "use a local path (bare, or a file:///path URI), hdfs://namenode:port/path" in found


def test_hdfs_and_s3_folders_are_accepted_and_normalized(tmp_path: Path) -> None:
    props = {**BASE, "writer.staging.dir": "hdfs://NameNode:8020/lake/../staging/",
             "writer.output.dir": "webhdfs://nn:9870/output", "data.publisher.final.dir": "s3a://Bucket/final//x"}
    config = load_props(tmp_path, props)
    assert config.writer_staging_dir == "hdfs://namenode:8020/staging"
    assert config.writer_output_dir == "webhdfs://nn:9870/output"
    assert config.publisher_final_dir == "s3a://Bucket/final/x"


@pytest.mark.parametrize(("value", "reason"), [
    ("HDFS:/x", "'HDFS:/x' lacks '//': write hdfs://host:port/path"),
    ("s3a:///x", "'s3a:///x' names no bucket"),
])
def test_a_remote_folder_without_its_host_or_bucket_is_an_error(tmp_path: Path, value: str, reason: str) -> None:
    assert reason in one_problem(lambda: load_props(tmp_path, {**BASE, "writer.output.dir": value}))


def test_the_row_error_file_must_be_local(tmp_path: Path) -> None:
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "qualitychecker.row.err.file": "s3a://b/err"}))
    assert "'qualitychecker.row.err.file': 's3a://b/err': must be a local folder" in found


def test_a_branch_folder_and_the_directory_source_folder_take_remote_schemes(tmp_path: Path) -> None:
    props = {**BASE, "fork.branches": "2", "data.publisher.final.dir.1": "s3a://bucket/x",
             "source.class": "spark_pipeline.sources.directory.DirectorySource",
             "source.filebased.data.directory": "hdfs://nn:8020/in"}
    config = load_props(tmp_path, props)
    assert config.branches[1].publisher_final_dir == "s3a://bucket/x"
    assert config.properties["source.filebased.data.directory"] == "hdfs://nn:8020/in"


def test_file_uris_are_local_folders(tmp_path: Path) -> None:
    props = {**BASE, "writer.staging.dir": "file:///tmp/oncelog/staging", "writer.output.dir": "file:/tmp/o%20x",
             "data.publisher.final.dir": "file://localhost/data/final", "fork.branches": "2",
             "writer.staging.dir.1": "file:///tmp/oncelog/staging-1",
             "source.class": "spark_pipeline.sources.directory.DirectorySource",
             "source.filebased.data.directory": "file:///in"}
    config = load_props(tmp_path, props)
    zero, one = config.branches
    assert zero.writer_staging_dir == "/tmp/oncelog/staging/fork_0"
    assert one.writer_staging_dir == "/tmp/oncelog/staging-1"
    assert zero.writer_output_dir == "/tmp/o x/fork_0" and zero.publisher_final_dir == "/data/final/fork_0"
    assert config.properties["source.filebased.data.directory"] == "/in"
    for bad, reason in (("file://host/x", "naming host 'host' is not a local folder"),
                        ("file:x", "a file: URI needs an absolute path")):
        assert reason in one_problem(partial(load_props, tmp_path, {**BASE, "writer.output.dir": bad}))


def test_job_config_from_properties_refuses_an_unsupported_scheme() -> None:
    with pytest.raises(JobConfigError, match="'data.publisher.final.dir': 'gs://b/x': scheme 'gs'"):
        config_from_properties({**BASE, "data.publisher.final.dir": "gs://b/x"})


# --- Spark settings oncelog needs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["true", "TRUE", " yes "])
def test_spark_speculation_on_is_an_error_naming_the_key(tmp_path: Path, value: str) -> None:
    path = write(tmp_path, "spec.properties", properties_text({**BASE, "spark.speculation": value}))
    assert one_problem(lambda: load_job_config(path)).startswith(
        f"{path}:8: 'spark.speculation' must be false (got {value.strip()!r}): a speculative copy of a task would "
        f"fence the running copy's log writer")
    assert load_props(tmp_path, {**BASE, "spark.speculation": "False"}).spark_conf["spark.speculation"] == "False"


def test_bad_branch_values_name_the_suffixed_key(tmp_path: Path) -> None:
    props = {**BASE, "fork.branches": "2", "writer.output.format.1": "XML", "fork.branch.name.0": "a/b",
             "qualitychecker.task.policy.types.1": "OPTIONAL"}
    found = problems(lambda: load_props(tmp_path, props))
    assert any("'writer.output.format.1': Input should be 'AVRO'" in p for p in found), found
    assert any("'fork.branch.name.0': 'a/b' must be 1-200 letters" in p for p in found), found


def test_stray_task_types_for_a_branch_are_an_error(tmp_path: Path) -> None:
    props = {**BASE, "fork.branches": "2", "qualitychecker.task.policy.types.1": "OPTIONAL"}
    found = one_problem(lambda: load_props(tmp_path, props))
    assert "'qualitychecker.task.policy.types.1' is set but 'qualitychecker.task.policies.1' is not" in found


# --- writer formats and default constructs ----------------------------------------------------------------------


def test_output_format_must_be_one_the_builder_writes(tmp_path: Path) -> None:
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "writer.output.format": "PARQUET"}))
    assert f"'writer.output.format': PARQUET is not written by {M}.FileWriterBuilder (it writes AVRO, JSON)" in found


@pytest.mark.usefixtures("default_constructs")
def test_default_writer_and_publisher_need_their_directories(tmp_path: Path) -> None:
    props = {"job.name": "j", "source.class": f"{M}.FakeSource", "writer.output.format": "JSON"}
    path = write(tmp_path, "defaults.properties", properties_text(props))
    found = problems(lambda: load_job_config(path))
    assert f"{path}: required key 'writer.staging.dir' is missing: {DEFAULT_WRITER_BUILDER} needs it" in found
    assert f"{path}: required key 'writer.output.dir' is missing: {DEFAULT_WRITER_BUILDER} needs it" in found
    assert f"{path}: required key 'data.publisher.final.dir' is missing: {DEFAULT_PUBLISHER} needs it" in found
    assert any(f"JSON is not written by {DEFAULT_WRITER_BUILDER} (it writes AVRO, PARQUET)" in p for p in found), found
    ok = {k: v for k, v in BASE.items() if k not in ("writer.builder.class", "data.publisher.type")}
    config = load_props(tmp_path, ok)
    assert config.writer_builder_class == DEFAULT_WRITER_BUILDER and config.publisher_type == DEFAULT_PUBLISHER


# --- construct classes and their CONFIG_MODELs ------------------------------------------------------------------


def test_construct_keys_are_known_and_validated(tmp_path: Path) -> None:
    config = load_props(tmp_path, {**BASE, "source.class": f"{M}.KafkaLikeSource",
                                   "kafka.brokers": "k1:9092, k2:9092", "topic.whitelist": "orders"})
    settings = config.construct_settings(KafkaLikeSource)
    assert isinstance(settings, KafkaSettings)
    assert settings.brokers == ("k1:9092", "k2:9092") and settings.topics == ("orders",) and settings.fetch_max == 500
    assert config.properties["kafka.brokers"] == "k1:9092, k2:9092"


def test_construct_keys_from_yaml_lists(tmp_path: Path) -> None:
    text = yaml.safe_dump({**BASE, "source.class": f"{M}.KafkaLikeSource", "kafka": {"brokers": ["a:1", "b:2"]}})
    config = load_job_config(write(tmp_path, "kafka.yaml", text))
    assert config.construct_settings(KafkaLikeSource).brokers == ("a:1", "b:2")  # type: ignore[attr-defined]


def test_construct_key_errors_name_key_file_and_class(tmp_path: Path) -> None:
    props = {**BASE, "source.class": f"{M}.KafkaLikeSource", "kafka.fetch.max": "0", "kafka.brokerz": "k:1"}
    path = write(tmp_path, "kafka.properties", properties_text(props))
    found = problems(lambda: load_job_config(path))
    assert (f"{path}: required key 'kafka.brokers' is missing or empty (read by {M}.KafkaLikeSource, "
            f"named by 'source.class')") in found
    assert any(p.startswith(f"{path}:8: 'kafka.fetch.max': Input should be greater than or equal to 1 (got '0')")
               for p in found), found
    assert f"{path}:9: unknown key 'kafka.brokerz' (did you mean 'kafka.brokers'?)" in found


def test_construct_keys_are_unknown_without_their_construct(tmp_path: Path) -> None:
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "kafka.brokers": "k:1"}))
    assert "unknown key 'kafka.brokers'" in found


def test_construct_keys_of_a_source_take_no_branch_suffix(tmp_path: Path) -> None:
    props = {**BASE, "source.class": f"{M}.KafkaLikeSource", "kafka.brokers": "k:1", "kafka.brokers.0": "k:2"}
    assert "unknown key 'kafka.brokers.0'" in one_problem(lambda: load_props(tmp_path, props))


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("no_such_module_xyz.Source", "cannot import module 'no_such_module_xyz'"),
        (f"{M}.MissingSource", f"'{M}' has no attribute 'MissingSource'"),
        (f"{M}.not_a_class", "is a int, not a class"),
        (f"{M}.BadModelSource", "CONFIG_MODEL must be a pydantic BaseModel subclass"),
        ("org.apache.gobblin.source.extractor.extract.kafka.KafkaSimpleSource", "this is a Gobblin Java class"),
    ],
)
def test_a_class_that_cannot_be_used_is_an_error_naming_key_value_and_file(tmp_path: Path, value: str,
                                                                             fragment: str) -> None:
    path = write(tmp_path, "job.properties", properties_text({**BASE, "source.class": value, "kafka.brokers": "x"}))
    found = one_problem(lambda: load_job_config(path))  # keys it might have declared are not reported as unknown
    assert found.startswith(f"{path}:2: 'source.class': cannot use {value!r}") and fragment in found, found


def test_while_a_class_fails_to_import_only_likely_typos_are_unknown(tmp_path: Path) -> None:
    props = {**BASE, "source.class": f"{M}.KafkaLikeSorce", "kafka.brokers": "k:1", "job.comit.policy": "full"}
    found = problems(lambda: load_props(tmp_path, props))
    assert len(found) == 2 and "unknown key 'job.comit.policy' (did you mean 'job.commit.policy'?)" in found[1]


def test_nested_classes_import(tmp_path: Path) -> None:
    config = load_props(tmp_path, {**BASE, "source.class": f"{M}.Outer.NestedSource"})
    assert config.source_class == f"{M}.Outer.NestedSource"


def test_a_missing_dependency_of_a_construct_module_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "broken_constructs.py", "import no_such_dependency_xyz\n\nclass Source:\n    pass\n")
    write(tmp_path, "raising_constructs.py", "raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "source.class": "broken_constructs.Source"}))
    assert "importing module 'broken_constructs' failed: No module named 'no_such_dependency_xyz'" in found
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "source.class": "raising_constructs.Source"}))
    assert "importing module 'raising_constructs' failed: RuntimeError: boom" in found


def test_construct_settings_needs_a_config_model(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="declares no CONFIG_MODEL"):
        load_props(tmp_path, BASE).construct_settings(FakeSource)


# --- cron ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", datetime(2024, 1, 1, 10, 7), datetime(2024, 1, 1, 10, 15)),
        ("0 0/5 * * * ?", datetime(2024, 1, 1, 10, 7), datetime(2024, 1, 1, 10, 10)),  # Gobblin's examples
        ("0 0 12 ? * MON-FRI", datetime(2024, 1, 6), datetime(2024, 1, 8, 12)),  # Sat → Mon
        ("0 0 12 ? * 2", datetime(2024, 1, 2), datetime(2024, 1, 8, 12)),  # Quartz 2 = Monday
        ("0 0 12 ? * 1,7", datetime(2024, 1, 1), datetime(2024, 1, 6, 12)),  # Sunday and Saturday
        ("0 15 10 ? * 6L", datetime(2024, 1, 1), datetime(2024, 1, 26, 10, 15)),  # last Friday
        ("0 0 12 ? * 2#1", datetime(2024, 1, 2), datetime(2024, 2, 5, 12)),  # first Monday
        ("30 0 12 L * ?", datetime(2024, 2, 1), datetime(2024, 2, 29, 12, 0, 30)),
        ("0 0 12 1 * ? 2030", datetime(2024, 1, 1), datetime(2030, 1, 1, 12)),
    ],
)
def test_cron_standard_and_quartz_forms(expression: str, after: datetime, expected: datetime) -> None:
    assert parse_cron(expression).next_after(after) == expected


@pytest.mark.parametrize(
    ("expression", "fragment"),
    [
        ("61 * * * *", "out of range"),
        ("0 0 12 * * *", "'?' in exactly one of day-of-month and day-of-week"),
        ("0 0 12 ? * ?", "'?' in exactly one"),
        ("0 0 12 15W * ?", "'W' and 'L-n' are not supported"),
        ("0 0 12 ? * 0", "Quartz numbers days 1 (SUN) to 7 (SAT)"),
        ("1 2 3", "has 3 fields"),
        ("0 0 0 30 2 ?", "invalid schedule"),  # February 30th never comes
        ("0 0 12 1 1 ? 2001", "invalid schedule"),  # in the past
    ],
)
def test_bad_schedules_are_errors(tmp_path: Path, expression: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        parse_cron(expression)
    assert fragment in str(caught.value)
    found = one_problem(lambda: load_props(tmp_path, {**BASE, "job.schedule": expression}))
    assert "'job.schedule'" in found and fragment in found


def test_a_schedule_is_exposed_parsed(tmp_path: Path) -> None:
    schedule = load_props(tmp_path, {**BASE, "job.schedule": "0 0/5 * * * ?"}).schedule
    assert schedule is not None and schedule.has_seconds and schedule.croniter_expression == "0 0/5 * * * *"


# --- directories ---------------------------------------------------------------------------------------------------


def own_folders(name: str) -> dict[str, str]:
    """A job with folders of its own."""
    return {**BASE, "job.name": name, "writer.staging.dir": f"/tmp/oncelog/{name}/staging",
            "writer.output.dir": f"/tmp/oncelog/{name}/output", "data.publisher.final.dir": f"/data/{name}"}


def test_load_job_dir_loads_every_job_file_in_order(tmp_path: Path) -> None:
    write(tmp_path, "b.pull", properties_text(own_folders("B")))
    write(tmp_path, "a.yaml", yaml.safe_dump(own_folders("A")))
    write(tmp_path, "sub/c.job", properties_text(own_folders("C")))
    write(tmp_path, ".hidden/d.pull", "garbage")
    write(tmp_path, "README.md", "not a job")
    assert [c.job_name for c in load_job_dir(tmp_path)] == ["A", "B", "C"]


def test_load_job_dir_lists_the_problems_of_every_bad_file(tmp_path: Path) -> None:
    good = write(tmp_path, "good.pull", properties_text(BASE))
    bad1 = write(tmp_path, "bad1.pull", properties_text({**BASE, "job.name": "X", "job.comit.policy": "full"}))
    bad2 = write(tmp_path, "bad2.yaml", yaml.safe_dump({**BASE, "job.name": "Y", "task.maxretries": "x"}))
    twin = write(tmp_path, "twin.pull", properties_text(BASE))
    found = problems(lambda: load_job_dir(tmp_path))
    assert any(p.startswith(f"{bad1}:8: unknown key 'job.comit.policy'") for p in found), found
    assert any(p.startswith(f"{bad2}:") and "'task.maxretries'" in p for p in found), found
    assert f"{twin}: 'job.name' 'PullOrders' is already the name of the job in {good}" in found
    assert len(found) == 3


def test_load_job_dir_refuses_two_jobs_sharing_or_nesting_folders_naming_both_files(tmp_path: Path) -> None:
    first = write(tmp_path, "a.pull", properties_text(own_folders("A")))
    shared = {"writer.output.dir": "/tmp/oncelog/A/output", "data.publisher.final.dir": "/data/A/B"}
    second = write(tmp_path, "b.yaml", yaml.safe_dump({**own_folders("B"), **shared, "job.disabled": "true"}))
    found = problems(lambda: load_job_dir(tmp_path))
    assert found == [
        f"{second}: 'data.publisher.final.dir' of job 'B' (/data/A/B) is inside 'data.publisher.final.dir' of job 'A' "
        f"(/data/A): two jobs must not share folders (one job's cleanup of stale runs would delete the other's files) "
        f"(job 'A' is defined in {first})",
        f"{second}: 'writer.output.dir' of job 'A' and 'writer.output.dir' of job 'B' are both /tmp/oncelog/A/output: "
        f"two jobs must not share folders (one job's cleanup of stale runs would delete the other's files) "
        f"(job 'A' is defined in {first})",
    ]


def test_load_job_dir_needs_a_directory(tmp_path: Path) -> None:
    assert "not a directory" in one_problem(lambda: load_job_dir(tmp_path / "nope"))


# --- property: both syntaxes load to equal JobConfigs -------------------------------------------------------------

_NAMES = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
_TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="$"), max_size=20)
_SCHEDULES = st.sampled_from(["*/5 * * * *", "0 0/5 * * * ?", "0 0 12 ? * MON-FRI", "0 30 2 1 * ?", "15 3 * * 1-5"])
_OPTIONAL: dict[str, st.SearchStrategy[str]] = {
    "job.group": _NAMES,
    "job.description": _TEXT,
    "job.schedule": _SCHEDULES,
    "job.commit.policy": st.sampled_from(["full", "partial", "successful", "FULL", "Partial"]),
    "task.maxretries": st.integers(0, 50).map(str),
    "task.retry.intervalinsec": st.integers(0, 9999).map(str),
    "workunit.retry.enabled": st.sampled_from(["true", "false", "True", "yes", "0"]),
    "workunit.retry.policy": st.sampled_from(["always", "onpartial", "onfull", "never", "ONFULL"]),
    "job.lock.enabled": st.sampled_from(["true", "false"]),
    "dataset.urn": _TEXT.filter(lambda s: s.strip() != ""),
    "converter.classes": st.lists(st.sampled_from([f"{M}.UpperConverter", f"{M}.TrimConverter"]), max_size=3)
    .map(",".join),
    "writer.output.format": st.sampled_from(["AVRO", "json", "Avro"]),
    "writer.codec.type": st.sampled_from(["deflate", "snappy", "null"]),
    "fork.branches": st.integers(1, 3).map(str),
    "commit.parallelism": st.integers(1, 64).map(str),
    "spark.master": st.sampled_from(["local[2]", "spark://h:7077", "yarn"]),
    "oncelog.log.url": st.sampled_from(["sqlite:///x/events.db", "kafka://h:9092"]),
}


@st.composite
def job_properties(draw: st.DrawFn) -> dict[str, str]:
    props = dict(BASE)
    props["job.name"] = draw(_NAMES)
    for key in draw(st.lists(st.sampled_from(sorted(_OPTIONAL)), unique=True)):
        props[key] = draw(_OPTIONAL[key])
    spark_keys = draw(st.lists(st.from_regex(r"spark\.[a-z]{1,6}(\.[a-z]{1,6}){0,2}", fullmatch=True),
                               unique=True, max_size=4))
    for key in spark_keys:
        if key != "spark.master":
            props[key] = draw(_TEXT)
    return props


def nested(props: dict[str, str]) -> dict[str, Any]:
    """Dotted keys as nested maps where that is unambiguous; other keys stay flat at the top."""
    root: dict[str, Any] = {}
    for key in sorted(props, key=lambda k: -k.count(".")):
        *parents, leaf = key.split(".")
        node: Any = root
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else None
            if node is None:
                break
        if node is None or leaf in node:
            root[key] = props[key]
        else:
            node[leaf] = props[key]
    return root


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(props=job_properties(), separator=st.sampled_from(["=", ": ", " = ", " ", "\t:"]), nest=st.booleans(),
       as_list=st.booleans())
def test_properties_and_yaml_load_to_equal_configs(props: dict[str, str], separator: str, nest: bool,
                                                   as_list: bool) -> None:
    yaml_doc: dict[str, Any] = dict(props)
    if as_list and "converter.classes" in props:
        yaml_doc["converter.classes"] = [c for c in props["converter.classes"].split(",") if c]
    if "task.maxretries" in props:
        yaml_doc["task.maxretries"] = int(props["task.maxretries"])  # a YAML int reads as the same string
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        from_properties = load_job_config(write(directory, "job.properties", properties_text(props, separator)),
                                          environ={})
        text = yaml.safe_dump(nested(yaml_doc) if nest else yaml_doc)  # allow_unicode would emit a raw NEL
        from_yaml = load_job_config(write(directory, "job.yaml", text), environ={})
    assert from_properties == from_yaml
    assert from_properties.properties == {k: v for k, v in props.items()}
