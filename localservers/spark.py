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
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from localservers.daemon import Daemon, runs_command
from localservers.errors import SparkClusterError
from localservers.server import LocalServer
from localservers.tools import free_ports

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
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY, "SPARK_DAEMON_JAVA_OPTS": f"{DAEMON_JAVA_OPTS} {_marker(work_dir)}",
            "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONPATH": python_path}


def _marker(work_dir: Path) -> str:
    """The JVM option naming the cluster's work dir, by which its daemons are recognised."""
    return f"-Doncelog.spark.dir={work_dir}"


class LocalSparkCluster(LocalServer):
    """A master and `workers` workers (1 core, 512m each) on 127.0.0.1, their logs and work folders in `work_dir`.

    Each daemon runs in a session of its own, and stopping or killing one signals its whole session: a worker's
    executors and their Python workers go with it. A killed worker comes back on a new port (`restart_worker`), so
    that the master never takes it for the one it lost.
    """

    what = "Spark cluster"
    error = SparkClusterError
    stop_timeout = 10.0

    def __init__(self, work_dir: Path, workers: int = WORKERS, timeout_s: float = START_TIMEOUT_S) -> None:
        super().__init__(work_dir)
        self.worker_count = workers
        self.timeout_s = self.start_timeout = timeout_s
        master_port, self.webui_port, *worker_ports = free_ports(2 + workers, "the Spark cluster", SparkClusterError)
        self.master = self._daemon("Spark master", "master", MASTER_CLASS, (master_port, self.webui_port))
        self._workers = [self._worker_daemon(index, port) for index, port in enumerate(worker_ports)]

    def _daemon(self, name: str, stem: str, main: str, ports: tuple[int, ...], *needles: bytes) -> Daemon:
        """A master or worker JVM, its pid file and log `<stem>.pid|log` in the work dir, on `ports`."""
        def owns(pid: int) -> bool:
            return runs_command(pid, main.encode(), _marker(self.work_dir).encode(), *needles)

        return Daemon(name, self.work_dir / f"{stem}.pid", self.work_dir / f"{stem}.log", owns, SparkClusterError,
                      ports, session=True)

    def _worker_daemon(self, index: int, port: int) -> Daemon:
        return self._daemon(f"Spark worker {index}", f"worker-{index}", WORKER_CLASS, (port,),
                            os.fsencode(self._worker_dir(index)))

    def _worker_dir(self, index: int) -> Path:
        return self.work_dir / f"worker-{index}"

    @property
    def daemons(self) -> list[Daemon]:
        return [self.master, *self._workers]

    @property
    def workers(self) -> list[Daemon | None]:
        """Each worker, None where it does not run (killed, and not restarted)."""
        return [worker if worker.is_running() else None for worker in self._workers]

    @property
    def master_url(self) -> str:
        """`spark://127.0.0.1:<port>`: the `spark.master` of an application that runs on this cluster."""
        if not self.master.is_running():
            raise SparkClusterError(f"the Spark cluster in {self.work_dir} is not started")
        return f"spark://{LOOPBACK}:{self.master.ports[0]}"

    @property
    def webui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.webui_port}"

    def _launch(self, missing: list[Daemon], detached: bool) -> None:
        """Start the master and wait until it is ALIVE (a worker registering sooner retries only 5-15s later),
        then the workers."""
        if not SPARK_CLASS.exists():
            raise SparkClusterError(f"{SPARK_CLASS} is missing: is pyspark installed in {sys.prefix}?")
        (self.work_dir / "conf").mkdir(parents=True, exist_ok=True)
        if self.master in missing:
            self._run(self.master, [MASTER_CLASS, "--host", LOOPBACK, "--port", str(self.master.ports[0]),
                                    "--webui-port", str(self.webui_port)], detached)
            self._await(self.timeout_s, self._master_health, [self.master])
        for index, worker in enumerate(self._workers):
            if worker in missing:
                self._worker_dir(index).mkdir(exist_ok=True)
                self._run(worker, [WORKER_CLASS, "--host", LOOPBACK, "--port", str(worker.ports[0]),
                                   "--webui-port", "0", "--cores", "1", "--memory", WORKER_MEMORY,
                                   "--work-dir", str(self._worker_dir(index)), self.master_url], detached)

    def _run(self, daemon: Daemon, args: list[str], detached: bool) -> None:
        """Run `spark-class args` in the work dir."""
        daemon.launch([str(SPARK_CLASS), *args], detached, f"starting the {daemon.name} ({pyspark.__version__})",
                      daemon_env(self.work_dir), cwd=self.work_dir)

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

    def _master_health(self, timeout: float) -> str | None:
        """Ready once the master says it is ALIVE."""
        try:
            state = self.status().get("status")
        except SparkClusterError as e:
            return str(e)
        return None if state == "ALIVE" else f"the master is {state}, not ALIVE"

    def _health(self, timeout: float) -> str | None:
        """Ready once the master holds every worker ALIVE."""
        try:
            workers = self.status().get("workers", [])
        except SparkClusterError as e:
            return str(e)
        alive = {int(w["port"]) for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE"}
        waiting = [worker.name for worker in self._workers if worker.ports[0] not in alive]
        return f"{', '.join(waiting)} not registered with the master yet" if waiting else None

    def _worker(self, index: int) -> Daemon:
        if not 0 <= index < len(self._workers):
            raise SparkClusterError(f"no Spark worker {index}: the cluster has {len(self._workers)}")
        if not (worker := self._workers[index]).is_running():
            raise SparkClusterError(f"Spark worker {index} is not running (killed, and not restarted)")
        return worker

    def worker_pids(self) -> list[int | None]:
        """The pid of each worker's JVM, None for a killed one."""
        return [worker.pid() for worker in self._workers]

    def worker_processes(self, index: int) -> set[int]:
        """Every live process of worker `index`: its JVM, its executors' JVMs and their Python workers."""
        return self._worker(index).members()

    def daemon_rss(self) -> dict[str, int]:
        """Resident memory of the master's and workers' JVMs (without executors), by daemon name."""
        return {daemon.name: rss_bytes(pid) for daemon in self.daemons if (pid := daemon.pid()) is not None}

    def kill_worker(self, index: int) -> set[int]:
        """SIGKILL worker `index` as a lost machine: its JVM, executor JVMs and Python workers; returns their pids."""
        worker = self._worker(index)
        killed = worker.members()
        self._kill([worker])
        return killed

    def restart_worker(self, index: int) -> None:
        """Start worker `index` again (after a kill), on a new port, and wait until it is registered ALIVE."""
        if self.workers[index] is not None:
            raise SparkClusterError(f"Spark worker {index} is still running")
        taken = [port for daemon in self.daemons for port in daemon.ports]
        [port] = free_ports(1, f"Spark worker {index}", SparkClusterError, taken=taken)
        self._workers[index] = self._worker_daemon(index, port)
        self.start()
