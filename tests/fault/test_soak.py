"""The real-process SIGKILL soak (tests.fault.soak) in `make test`, and the checks it relies on.

The soak runs 10 iterations per log store, SQLite and Kafka at once (each `oncelog run` starts a Spark JVM: run one
after the other, the two soaks would take half as long again); every third iteration kills a run right after its
commit sequences were planned. `make soak` runs hundreds (SOAK_ITERATIONS). SOAK_SEED picks another schedule.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fastavro
import pytest

from spark_pipeline.sources.kafka_topic import SCHEMA
from tests.fault.soak import (
    KillMode,
    SoakFailure,
    SoakReport,
    SoakSettings,
    Source,
    Store,
    check_no_duplicates,
    check_none_missing,
    kill_session,
    soak,
)

ITERATIONS = 10
SEED = int(os.environ.get("SOAK_SEED", "20261123"))


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_runs_killed_anywhere_then_rerun_publish_every_record_exactly_once(kafka_bootstrap: str,
                                                                           tmp_path: Path) -> None:
    started = time.monotonic()
    with ThreadPoolExecutor(len(Store)) as pool:
        futures = {store: pool.submit(soak, SoakSettings(ITERATIONS, store, SEED, kafka_bootstrap,
                                                         tmp_path / str(store))) for store in Store}
    failures = [str(f.exception()) for f in futures.values() if f.exception() is not None]
    assert not failures, "\n\n".join(failures)
    reports: dict[Store, SoakReport] = {store: f.result() for store, f in futures.items()}
    for store, report in reports.items():
        print(report.as_json(SoakSettings(ITERATIONS, store, SEED, kafka_bootstrap, tmp_path)))
        assert report.iterations == ITERATIONS
        assert report.kills[KillMode.AFTER_PLANNING.name] == ITERATIONS // 3, "every third run killed after planning"
        assert sum(report.kills.values()) + report.exited_before_kill == ITERATIONS
    print(f"soak wall time, both stores: {time.monotonic() - started:.1f}s")


def write_published(path: Path, ids: list[str]) -> None:
    """A published Avro file as the Kafka source's writer makes it, holding these record ids."""
    path.parent.mkdir(parents=True, exist_ok=True)
    records = [{"topic": "MyTopic", "partition": int(i[1]), "offset": int(i.split("-")[1]), "timestamp": None,
                "key": None, "value": i.encode()} for i in ids]
    with path.open("wb") as f:
        fastavro.writer(f, fastavro.parse_schema(SCHEMA), records)


def test_the_count_catches_a_duplicate_an_unknown_id_and_a_loss(tmp_path: Path) -> None:
    source = Source("unused:9092", "MyTopic", {0: ["p0-0", "p0-1", "p0-2"], 1: ["p1-0"]})
    write_published(tmp_path / "MyTopic.0" / "a.avro", ["p0-0", "p0-1"])
    write_published(tmp_path / "MyTopic.1" / "a.avro", ["p1-0"])
    assert check_no_duplicates(tmp_path, source, "run 1") == Counter({"p0-0": 1, "p0-1": 1, "p1-0": 1})
    with pytest.raises(SoakFailure, match=r"after run 1: 1 produced id\(s\) never published, e.g. \['p0-2'\]"):
        check_none_missing(check_no_duplicates(tmp_path, source, "run 1"), source, "run 1")

    write_published(tmp_path / "MyTopic.0" / "b.avro", ["p0-1", "p0-2"])
    with pytest.raises(SoakFailure, match=r"after run 2: 1 id\(s\) published more than once, e.g. \[\('p0-1', 2\)\]"
                                          r".*MyTopic.0/a.avro', 'MyTopic.0/b.avro'"):
        check_no_duplicates(tmp_path, source, "run 2")

    (tmp_path / "MyTopic.0" / "b.avro").unlink()
    write_published(tmp_path / "MyTopic.1" / "b.avro", ["p1-7"])
    with pytest.raises(SoakFailure, match=r"published ids never produced: \['p1-7'\]"):
        check_no_duplicates(tmp_path, source, "run 3")


GRANDCHILD = """
import os, sys, time
if os.fork() == 0:
    os.setpgid(0, 0)  # as PySpark's worker daemon does: a process group of its own, in the same session
    open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(60)
"""


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for a reaper does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in {"Z", "X"}
    except (OSError, IndexError):
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds a session's processes in /proc (Linux)")
def test_the_kill_ends_every_process_group_of_the_runs_session(tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    proc = subprocess.Popen([sys.executable, "-c", GRANDCHILD, str(pid_file)], start_new_session=True)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the grandchild never started"
        time.sleep(0.01)
    grandchild = int(pid_file.read_text())
    assert os.getpgid(grandchild) != proc.pid and alive(grandchild)

    kill_session(proc)

    assert proc.returncode == -9
    assert not alive(grandchild), "a process of another group of the session survived"
