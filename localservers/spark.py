"""A real Spark standalone cluster on loopback: one master and two workers, run with pyspark's own `spark-class`.

Why: on a real cluster the tasks run in executors the workers start, so a worker can die under a run (a machine
lost); tests and demos need that without Docker. pip's pyspark ships `bin/spark-class` but no `sbin` start
scripts, so the daemons are run through `spark-class` directly, each in a session of its own: a worker's executor
JVM and the executor's Python workers (PySpark's daemon moves them to process groups of their own) all stay in the
worker's session, which is what :meth:`LocalSparkCluster.kill_worker` kills, as losing the machine would.
Executors run this interpreter (``PYSPARK_PYTHON``) with the repository importable (``PYTHONPATH``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from localservers.errors import SparkClusterError

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
LOOPBACK = "127.0.0.1"
REPO = Path(__file__).resolve().parents[1]
WORKERS = 2
WORKER_MEMORY = "512m"
"""What each worker offers executors: an application's `spark.executor.memory` must fit in it."""
DAEMON_MEMORY = "256m"
"""The heap of the master and worker JVMs themselves (Spark's default is 1g each)."""
WORKER_TIMEOUT_S = 10
"""How long the master waits for a silent worker before it calls it dead (Spark's default: 60s)."""
DAEMON_JAVA_OPTS = ("-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dspark.master.rest.enabled=false "
                    f"-Dspark.worker.timeout={WORKER_TIMEOUT_S}")
"""C1 alone and the serial collector start short-lived daemons markedly faster on a small box. The worker timeout
goes to both daemons: a worker heartbeats every quarter of its own setting, the master expects one within its own."""
START_TIMEOUT_S = 90.0
POLL_S = 0.1
LOG_TAIL_LINES = 20


@dataclass
class Daemon:
    """A master or worker JVM we started: its process, RPC port and log file."""

    name: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a daemon's log, for an error message."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def session_pids(session: int) -> set[int]:
    """The live (not zombie) processes of a session, from /proc (Linux)."""
    pids: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[3]) == session and fields[0] not in {"Z", "X"}:
            pids.add(int(stat.parent.name))
    return pids


def rss_bytes(pid: int) -> int:
    """A process's resident memory (VmRSS), 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def daemon_env(work_dir: Path) -> dict[str, str]:
    """The environment of the daemons and, through the workers, of the executors and their Python workers."""
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH", "")]))
    return {**os.environ, "SPARK_LOCAL_IP": LOOPBACK, "SPARK_CONF_DIR": str(work_dir / "conf"),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONPATH": python_path}


class LocalSparkCluster:
    """A master and `workers` workers (1 core, 512m each) on 127.0.0.1, their logs and work folders in `work_dir`."""

    def __init__(self, work_dir: Path, workers: int = WORKERS, timeout_s: float = START_TIMEOUT_S) -> None:
        self.work_dir = work_dir.resolve()
        self.worker_count = workers
        self.timeout_s = timeout_s
        self.master: Daemon | None = None
        self.webui_port = 0
        self.workers: list[Daemon | None] = []
        self._started = 0

    @property
    def master_url(self) -> str:
        """`spark://127.0.0.1:<port>`: the `spark.master` of an application that runs on this cluster."""
        if self.master is None:
            raise SparkClusterError(f"the Spark cluster in {self.work_dir} is not started")
        return f"spark://{LOOPBACK}:{self.master.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"

    def start(self) -> LocalSparkCluster:
        """Start the master, then the workers; returns once every worker is registered ALIVE with the master."""
        if not SPARK_CLASS.exists():
            raise SparkClusterError(f"{SPARK_CLASS} is missing: is pyspark installed in {sys.prefix}?")
        (self.work_dir / "conf").mkdir(parents=True, exist_ok=True)
        try:
            self.webui_port = free_port()
            port = free_port()
            self.master = self._spawn("master", [MASTER_CLASS, "--host", LOOPBACK, "--port", str(port),
                                                 "--webui-port", str(self.webui_port)], port)
            self._await_master()  # a worker registering with a master not yet ALIVE retries only 5-15s later
            self.workers = [None] * self.worker_count
            for index in range(self.worker_count):
                self.workers[index] = self._spawn_worker(index)
            for index in range(self.worker_count):
                self._await_worker(index)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, name: str, args: list[str], port: int) -> Daemon:
        """Run `spark-class args` in a session of its own, its output in `<work_dir>/<name>.log`."""
        self._started += 1
        log = self.work_dir / f"{name}.{self._started}.log"
        with log.open("wb") as out:
            try:
                process = subprocess.Popen([str(SPARK_CLASS), *args], stdout=out, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=daemon_env(self.work_dir),
                                           cwd=self.work_dir, start_new_session=True)
            except OSError as e:
                raise SparkClusterError(f"cannot run {SPARK_CLASS} for the Spark {name}: {e}") from e
        return Daemon(name, process, port, log)

    def _spawn_worker(self, index: int) -> Daemon:
        port = free_port()
        work = self.work_dir / f"worker-{index}"
        work.mkdir(exist_ok=True)
        return self._spawn(f"worker-{index}", [WORKER_CLASS, "--host", LOOPBACK, "--port", str(port),
                                               "--webui-port", "0", "--cores", "1", "--memory", WORKER_MEMORY,
                                               "--work-dir", str(work), self.master_url], port)

    def status(self) -> dict[str, Any]:
        """The master's JSON status page (its workers, their states, the applications)."""
        try:
            with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2) as response:
                document = json.loads(response.read())
        except (OSError, urllib.error.URLError, json.JSONDecodeError) as e:
            raise SparkClusterError(f"the Spark master's status page {self.webui_url}/json/ does not answer: "
                                    f"{e}") from e
        if not isinstance(document, dict):
            raise SparkClusterError(f"the Spark master's status page {self.webui_url}/json/ is not an object")
        return document

    def _await_master(self) -> None:
        """Wait until the master says it is ALIVE; its exit or the timeout raises, naming its log."""
        assert self.master is not None
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                if self.status().get("status") == "ALIVE":
                    return
            except SparkClusterError:
                pass  # not answering yet
            self._check_running(self.master, "became ALIVE", deadline)
            time.sleep(POLL_S)

    def _check_running(self, daemon: Daemon, waiting_for: str, deadline: float) -> None:
        """Raise (naming the daemon's log) when it exited or the deadline passed before what we wait for."""
        if daemon.process.poll() is not None:
            raise SparkClusterError(f"the Spark {daemon.name} exited with {daemon.process.returncode} before it "
                                    f"{waiting_for}; its log {daemon.log}:\n{log_tail(daemon.log)}")
        if time.monotonic() > deadline:
            raise SparkClusterError(f"the Spark {daemon.name} had not {waiting_for} after {self.timeout_s:.0f}s; "
                                    f"its log {daemon.log}:\n{log_tail(daemon.log)}")

    def _alive_worker_ports(self) -> set[int]:
        """The RPC ports of the workers the master holds ALIVE (none while it does not answer yet)."""
        try:
            workers = self.status().get("workers", [])
        except SparkClusterError:
            return set()
        return {int(w["port"]) for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE"}

    def _await_worker(self, index: int) -> None:
        """Wait until worker `index` is registered ALIVE; an exited daemon or the timeout raises, naming logs."""
        worker = self._worker(index)
        assert self.master is not None
        deadline = time.monotonic() + self.timeout_s
        while worker.port not in self._alive_worker_ports():
            self._check_running(self.master, f"seen worker {index} register", deadline)
            self._check_running(worker, f"registered with the master {self.master_url}", deadline)
            time.sleep(POLL_S)

    def _worker(self, index: int) -> Daemon:
        if not 0 <= index < len(self.workers):
            raise SparkClusterError(f"no Spark worker {index}: the cluster has {len(self.workers)}")
        worker = self.workers[index]
        if worker is None:
            raise SparkClusterError(f"Spark worker {index} is not running (killed, and not restarted)")
        return worker

    def worker_pids(self) -> list[int | None]:
        """The pid of each worker's JVM, None for a killed one."""
        return [None if w is None else w.pid for w in self.workers]

    def worker_processes(self, index: int) -> set[int]:
        """Every live process of worker `index`: its JVM, its executors' JVMs and their Python workers."""
        return session_pids(self._worker(index).pid)

    def daemon_rss(self) -> dict[str, int]:
        """Resident memory of the master's and workers' JVMs (without executors), by daemon name."""
        daemons = [d for d in (self.master, *self.workers) if d is not None]
        return {d.name: rss_bytes(d.pid) for d in daemons}

    def kill_worker(self, index: int) -> set[int]:
        """SIGKILL worker `index` as a lost machine: its JVM, executor JVMs and Python workers; returns their pids."""
        worker = self._worker(index)
        killed: set[int] = set()
        deadline = time.monotonic() + self.timeout_s
        while pids := session_pids(worker.pid):
            if time.monotonic() > deadline:
                raise SparkClusterError(f"processes {sorted(pids)} of Spark worker {index} survived SIGKILL")
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            killed |= pids
            worker.process.poll()  # reap the JVM, our child
            time.sleep(0.01)
        worker.process.wait()
        self.workers[index] = None
        return killed

    def restart_worker(self, index: int) -> None:
        """Start worker `index` again (after a kill) and wait until it is registered ALIVE."""
        if self.workers[index] is not None:
            raise SparkClusterError(f"Spark worker {index} is still running")
        self.workers[index] = self._spawn_worker(index)
        try:
            self._await_worker(index)
        except BaseException:
            self.kill_worker(index)
            raise

    def stop(self) -> None:
        """Kill the workers (with their executors), then the master."""
        for index, worker in enumerate(self.workers):
            if worker is not None:
                self.kill_worker(index)
        if self.master is not None:
            for pid in session_pids(self.master.pid) | {self.master.pid}:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.master.process.wait()
            self.master = None

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()
