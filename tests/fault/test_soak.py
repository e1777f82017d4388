"""The real-process SIGKILL soak (tests.fault.soak) in `make test`, and the checks it relies on.

The soak runs 10 iterations per log store, SQLite and Kafka at once (each `oncelog run` starts a Spark JVM: run one
after the other, the two soaks would take half as long again); every third iteration kills a run right after its
commit sequences were planned. `make soak` runs hundreds (SOAK_ITERATIONS). SOAK_SEED picks another schedule.
The soak of the same job publishing into an hourly-partitioned Iceberg table runs 2 iterations here (the first killed
within the commit that creates the table, the second within milliseconds of its table commit); `make soak-iceberg`
runs hundreds.
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
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

from spark_pipeline.sources.kafka_topic import SCHEMA
from spark_pipeline.tables import iceberg
from spark_pipeline.tables.partitioning import PARTITION_SPEC, Period, TablePartitioning
from tests.fault.soak import (
    KillMode,
    Output,
    SoakFailure,
    SoakReport,
    SoakSettings,
    Source,
    Store,
    check_no_duplicates,
    check_none_missing,
    check_table,
    kill_session,
    soak,
    table_ref,
)

ITERATIONS = 10
TABLE_ITERATIONS = 2
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


@pytest.mark.kafka
@pytest.mark.spark
@pytest.mark.slow
def test_an_hourly_iceberg_job_killed_anywhere_then_rerun_has_every_record_once_in_the_table(kafka_bootstrap: str,
                                                                                           tmp_path: Path) -> None:
    settings = SoakSettings(TABLE_ITERATIONS, Store.SQLITE, SEED, kafka_bootstrap, tmp_path, Output.ICEBERG)
    report = soak(settings)
    print(report.as_json(settings))
    assert report.iterations == TABLE_ITERATIONS
    # A run killed within its commit, one at its table commit (either may end before its kill: the delays are random)
    aimed = report.kills[KillMode.DURING_COMMIT.name] + report.kills[KillMode.AT_TABLE_COMMIT.name]
    assert aimed + report.exited_before_kill == TABLE_ITERATIONS, report.kills


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


HOUR = 3_600_000
FIRST_HOUR = 1_795_651_200_000  # 2026-11-26T00:00Z
HOURLY = {PARTITION_SPEC: TablePartitioning("timestamp", Period.HOUR).encode()}


def table_file(published: Path, name: str, stamps: dict[str, int]) -> str:
    """A Parquet data file in the soak table's data folder: these ids (Kafka record values) at these timestamps."""
    path = published / "lake" / "events" / "data" / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"value": pa.array([i.encode() for i in stamps], pa.binary()),
                             "timestamp": pa.array(list(stamps.values()), pa.int64())}), path)
    return str(path)


def commit(published: Path, commit_id: str, stamps: dict[str, int]) -> None:
    """One oncelog table commit of one file holding `stamps`."""
    iceberg.append(table_ref(published), [table_file(published, commit_id, stamps)], commit_id, HOURLY)


def loaded(published: Path) -> Table:
    table = iceberg.load_table(table_ref(published))
    assert table is not None
    return table


def test_the_table_check_catches_a_duplicate_a_wrong_timestamp_and_a_file_in_two_snapshots(tmp_path: Path) -> None:
    source = Source("unused:9092", "MyTopic", {0: ["p0-0", "p0-1", "p0-2"], 1: ["p1-0"]}, FIRST_HOUR,
                    {"p0-0": FIRST_HOUR + 5, "p0-1": FIRST_HOUR + HOUR, "p0-2": FIRST_HOUR + HOUR + 9,
                     "p1-0": FIRST_HOUR + 7})
    assert check_table(tmp_path, source, "no run") == Counter()  # no table yet
    commit(tmp_path, "a", {"p0-0": FIRST_HOUR + 5, "p1-0": FIRST_HOUR + 7})
    commit(tmp_path, "b", {"p0-1": FIRST_HOUR + HOUR})
    seen = check_table(tmp_path, source, "run 1")
    assert seen == Counter({"p0-0": 1, "p1-0": 1, "p0-1": 1})
    with pytest.raises(SoakFailure, match=r"1 produced id\(s\) never published, e.g. \['p0-2'\]"):
        check_none_missing(seen, source, "run 1")

    source.timestamps["p0-1"] += 1
    with pytest.raises(SoakFailure, match=r"after run 2: records whose timestamp is not the one produced: "
                                          r"\[\('p0-1', 1795654800000\)\]"):
        check_table(tmp_path, source, "run 2")
    source.timestamps["p0-1"] -= 1

    commit(tmp_path, "c", {"p0-1": FIRST_HOUR + HOUR, "p0-2": FIRST_HOUR + HOUR + 9})
    with pytest.raises(SoakFailure, match=r"after run 3: 1 id\(s\) published more than once, e.g. \[\('p0-1', 2\)\]"):
        check_table(tmp_path, source, "run 3")

    doubled = tmp_path / "doubled"
    commit(doubled, "a", {"p0-0": FIRST_HOUR + 5})
    again = loaded(doubled).transaction()  # the same file added in a second snapshot, as a broken append would
    again.add_files([f"{doubled}/lake/events/data/a.parquet"], snapshot_properties={"oncelog.commit-id": "a2"},
                    check_duplicate_files=False)
    again.commit_transaction()
    with pytest.raises(SoakFailure, match=r"after run 4: a data file in two snapshots: the snapshots added 2 files, "
                                          r"the table references 2 \(1 distinct\)"):
        check_table(doubled, source, "run 4")

    twice = tmp_path / "twice"
    commit(twice, "a", {"p0-0": FIRST_HOUR + 5})
    again = loaded(twice).transaction()
    again.add_files([table_file(twice, "other", {"p1-0": FIRST_HOUR + 7})],
                    snapshot_properties={"oncelog.commit-id": "a"})
    again.commit_transaction()
    with pytest.raises(SoakFailure, match=r"after run 5: one sequence's table commit in more than one snapshot, or a "
                                          r"snapshot of none: \['a'\]"):
        check_table(twice, source, "run 5")


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
