"""Real file-system servers (HDFS, S3-compatible) run locally on loopback for development and tests."""
