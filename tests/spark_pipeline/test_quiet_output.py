"""Spark's output while oncelog works goes to the run's log file, not the terminal: PySpark's query-context loggers
(a JSON line per SQL analysis error, made when first used) included."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_pysparks_sql_query_context_logger_writes_to_the_log_file_not_the_pipe(tmp_path: Path) -> None:
    """As `validate --deep` meets a SQL error: PySpark makes its logger inside the quiet block, its handler on the
    stderr it finds then (the terminal's); the JSON line must land in the log file. A process of its own: the logger
    is made once per process."""
    log_file = tmp_path / "spark.log"
    script = textwrap.dedent(f"""
        from pathlib import Path
        from pyspark.logger import PySparkLogger
        from spark_pipeline.progress import quiet_native_output
        with quiet_native_output(Path({str(log_file)!r})):
            logger = PySparkLogger.getLogger("SQLQueryContextLogger")
            logger.propagate = False
            logger.exception("[UNRESOLVED_COLUMN.WITH_SUGGESTION] nope", errorClass="UNRESOLVED_COLUMN")
        print("done")
        """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done\n" and "SQLQueryContextLogger" not in done.stderr, done.stderr
    assert '"logger": "SQLQueryContextLogger"' in log_file.read_text()
