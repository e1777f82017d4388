"""Servers run for real on loopback from the registries (Kafka, HDFS, S3, Spark): the plumbing they share."""
