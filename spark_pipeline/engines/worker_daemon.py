"""PySpark's Python worker daemon, holding the modules an oncelog task runs before it forks its workers.

Spark starts one daemon per executor and forks a Python worker from it per task slot; a worker that had to import
oncelog's task modules itself spent about 0.6 s of CPU on it (each worker, each run). Forked from a daemon that has
them, it starts with them. Named by `spark.python.daemon.module` in oncelog's Spark defaults (a job may name another).
"""

from __future__ import annotations

from pyspark.daemon import manager

import spark_pipeline.engines.dataframe.results  # noqa: F401 (the DataFrame engine's file moves)
import spark_pipeline.engines.spark  # noqa: F401 (the records engine's tasks and the commit shards)

if __name__ == "__main__":
    manager()
