"""Errors of the local development servers (Kafka, HDFS, S3, a standalone Spark cluster)."""

from __future__ import annotations

from events.errors import OncelogError


class KafkaProvisioningError(OncelogError):
    """The local Kafka broker could not be resolved, formatted, started or stopped."""


class HdfsProvisioningError(OncelogError):
    """The local HDFS could not be provisioned: jars, Java, ports, formatting or a daemon's start-up."""


class S3ProvisioningError(OncelogError):
    """The local S3 server could not be built, started, reached or stopped."""


class SparkClusterError(OncelogError):
    """The local standalone cluster could not start, or a worker could not be started or killed; names its log."""
