"""Shared fixtures: a real Kafka broker, HDFS, S3-compatible server and Spark cluster, and fresh logs of every store."""

from __future__ import annotations

pytest_plugins = ["tests.kafka_plugin", "tests.log_fixtures", "tests.spark_plugin", "tests.hdfs_plugin",
                  "tests.s3_plugin", "tests.remote_fs_plugin", "tests.spark_cluster_plugin", "tests.browser"]
