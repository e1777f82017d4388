"""A class-data-sharing archive (AppCDS) of the Spark driver JVM, for the short-lived drivers the tests start.

An `oncelog run` a test starts spends most of its life starting Spark: its JVM loads and verifies some ten thousand
classes. Mapped from an archive made once by a run of the same JVM over the same jars, a local session and its first
job took 4.2-4.7 s instead of 8.7-9.6 s on 2 cores, and an `oncelog run` of a small synthetic job 9.1-9.4 s
instead of 13.1-13.6 s. The archive is made in the background (`start_making`) by a synthetic job on each engine in
one driver JVM that dumps the classes it loaded when it exits, and kept in the cache folder under a name derived
from the JVM, PySpark and its jars, so that another of them makes another archive. It is renamed into place when
whole: a JVM started before that, or given an archive it cannot use (another JVM's), starts as without one.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

from localservers.tools import JAVA_HINT, default_cache_dir, find_tool

log = logging.getLogger(__name__)

QUIET = "-Xshare:auto -Xlog:cds=off -Xlog:cds+dynamic=off -Xlog:class+path=off"
"""An archive the JVM cannot map (made by another JVM, say) is passed over without a word on the command's output."""
MAKE_TIMEOUT_S = 300.0


def archive_path(cache: Path | None = None) -> Path:
    """Where the archive of this JVM, PySpark and its jars lives (made or not)."""
    java = find_tool("java", JAVA_HINT, RuntimeError)
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    jars = sorted(p.name for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    key = hashlib.sha256("\n".join([os.path.realpath(java), version, pyspark.__version__, *jars]).encode())
    return (cache or default_cache_dir()) / "cds" / f"spark-driver-{key.hexdigest()[:16]}.jsa"


def start_making(path: Path, jvm_options: str) -> None:
    """Make the archive at `path` in a process of its own unless it exists; its output goes to `<path>.log`."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".log"), "w") as output:
        subprocess.Popen([sys.executable, "-m", "tests.spark_archive", "--make", str(path), jvm_options],
                         stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                         cwd=Path(__file__).parents[1])


def ensure_archive(path: Path, jvm_options: str) -> None:
    """Make the archive at `path` unless it exists, one maker at a time across processes."""
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.exists():
            make_archive(path, jvm_options)


def make_archive(path: Path, jvm_options: str) -> None:
    """Run the workload in a driver JVM that archives its classes at exit into `path` (atomically: renamed when
    whole)."""
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    options = f"{jvm_options} -XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off"
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f'--driver-java-options "{options}" pyspark-shell'}
    try:
        made = subprocess.run([sys.executable, "-m", "tests.spark_archive", "--workload"], env=env,
                              capture_output=True, text=True, timeout=MAKE_TIMEOUT_S, check=False,
                              cwd=Path(__file__).parents[1])
    except subprocess.TimeoutExpired:
        log.warning("the Spark driver's class archive was not made within %.0fs: drivers start without", MAKE_TIMEOUT_S)
        return
    if made.returncode != 0 or not partial.exists():
        log.warning("the Spark driver's class archive was not made (exit %d): drivers start without it\n%s",
                    made.returncode, made.stderr[-2000:])
        return
    partial.rename(path)


def workload() -> None:
    """A synthetic job on each engine in this process's one driver JVM; then that JVM exits (and archives)."""
    from pyspark import SparkContext

    from events.log import open_log
    from spark_pipeline.jobs import load_job_config
    from spark_pipeline.launcher import JobLauncher
    from tests.fault.pipeline_checks import write_job

    with tempfile.TemporaryDirectory(prefix="oncelog-cds-") as folder:
        for engine in ("records", "dataframe"):
            base = Path(folder) / engine
            base.mkdir()
            url = f"sqlite:///{base / 'events.db'}"
            job = write_job(base, url, **{"task.engine": engine, "spark.master": "local[1]"})
            with open_log(url) as events:
                JobLauncher(load_job_config(job), log=events).run()
    gateway = SparkContext._gateway
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    if gateway is not None and getattr(gateway, "proc", None) is not None:
        gateway.proc.stdin.close()  # the gateway JVM exits when its input closes; the archive is written then
        gateway.proc.wait(timeout=MAKE_TIMEOUT_S)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--workload"]:
        workload()
    elif sys.argv[1:2] == ["--make"] and len(sys.argv) == 4:
        logging.basicConfig(level=logging.INFO)
        ensure_archive(Path(sys.argv[2]), sys.argv[3])
    else:
        sys.exit("usage: python -m tests.spark_archive --make <archive path> <driver JVM options> | --workload")
