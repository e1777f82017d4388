"""Job files written for the earlier layout load unchanged: every dotted class path a job file could name then (the
built-in sources, writer, publisher, fork operator and the examples' converter and policies) names the same class
now, with no warning, and the shipped example jobs load."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from spark_pipeline.jobfile.plugins import import_class
from spark_pipeline.jobs import load_job_config

ROOT = Path(__file__).parents[3]
CLASS_PATHS = {
    "spark_pipeline.sources.synthetic.SyntheticSource": "SyntheticSource",
    "spark_pipeline.sources.kafka_topic.KafkaTopicSource": "KafkaTopicSource",
    "spark_pipeline.sources.directory.DirectorySource": "DirectorySource",
    "spark_pipeline.writers.AvroDataWriterBuilder": "AvroDataWriterBuilder",
    "spark_pipeline.publisher.BaseDataPublisher": "BaseDataPublisher",
    "spark_pipeline.constructs.ForkOperator": "ForkOperator",
    "spark_pipeline.examples.converters.AmountInCents": "AmountInCents",
    "spark_pipeline.examples.policies.NonNegativeAmount": "NonNegativeAmount",
    "spark_pipeline.examples.policies.WroteEverything": "WroteEverything",
}


@pytest.mark.parametrize("path", list(CLASS_PATHS))
def test_every_class_path_of_the_earlier_layout_still_names_its_class(path: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert import_class(path).__name__ == CLASS_PATHS[path]


def test_a_job_file_of_the_earlier_layout_naming_every_construct_loads(tmp_path: Path) -> None:
    job = yaml.safe_load((ROOT / "spark_pipeline" / "examples" / "demo.yaml").read_text())
    job.update({
        "converter.classes": "spark_pipeline.examples.converters.AmountInCents",
        "qualitychecker.row.policies": "spark_pipeline.examples.policies.NonNegativeAmount",
        "qualitychecker.task.policies": "spark_pipeline.examples.policies.WroteEverything",
        "fork.operator.class": "spark_pipeline.constructs.ForkOperator",
        "writer.builder.class": "spark_pipeline.writers.AvroDataWriterBuilder",
        "data.publisher.type": "spark_pipeline.publisher.BaseDataPublisher",
        "oncelog.log.url": f"sqlite:///{tmp_path / 'events.db'}",
    })
    job = {k: v for k, v in job.items() if k not in ("qualitychecker.row.sql", "converter.sql.select")}
    path = tmp_path / "old.yaml"
    path.write_text(yaml.safe_dump(job))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = load_job_config(path)
    assert config.converter_classes == ("spark_pipeline.examples.converters.AmountInCents",)
    assert config.fork_operator_class == "spark_pipeline.constructs.ForkOperator"
