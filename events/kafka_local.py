"""A real single-node Apache Kafka broker (KRaft) run from its Maven Central jars, without Docker.

Why: oncelog's Kafka store relies on transactions, ``read_committed`` and compaction, which only the real broker
implements faithfully (a Kafka-compatible broker from PyPI leaked aborted records), so development, tests and
benchmarks run Apache Kafka itself, needing only Java 17+ and Maven. :func:`ensure_jars` resolves the jars once
into a cache; :class:`LocalKafkaBroker` formats a work dir, runs ``java kafka.Kafka`` and waits until it answers,
keeping data, cluster id and ports across restarts and crashes; :func:`up`, :func:`down` and :func:`status` manage
a detached broker that outlives the command (``oncelog kafka up``). Kafka 3.9.1 keeps the older protocol
versions aiokafka/faust still use (4.x removed them, KIP-896).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from events.errors import KafkaProvisioningError
from localservers.daemon import Daemon, runs_command, signal_and_wait
from localservers.maven import resolve_jars
from localservers.tools import JAVA_HINT, default_cache_dir, find_tool, free_port, port_is_free, tail

KAFKA_VERSION = "3.9.1"

_POM = Path(__file__).with_name("kafka") / "pom.xml"  # package data (pyproject: events = ["kafka/*.xml"])
_STATE_FILE, _PID_FILE, _LOG_FILE = "broker.json", "broker.pid", "broker.log"
_JVM_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
# WARN and above to stdout, which is broker.log, plus the one INFO line saying the server started.
_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.org.apache.kafka.clients.NetworkClient=ERROR
"""


def ensure_jars(cache_dir: Path | None = None) -> Path:
    """Resolve Kafka's jars with Maven into the cache once (atomically) and return their directory."""
    return resolve_jars(_POM, (cache_dir or default_cache_dir()) / f"kafka-{KAFKA_VERSION}",
                        f"Apache Kafka {KAFKA_VERSION}", KafkaProvisioningError)


def _new_cluster_id() -> str:
    """A cluster id in Kafka's format: URL-safe base64 of a random UUID, never starting with '-'."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


class LocalKafkaBroker:
    """A single-node Kafka (KRaft, broker+controller) living in ``work_dir``; data and ports survive restarts.

    Settings are Kafka's defaults plus what one node needs (replication factor 1 for the internal topics, no
    initial rebalance delay, a short broker session so a crashed broker re-registers within seconds) and
    ``auto.create.topics.enable=false``: oncelog creates its topic with explicit configs (``cleanup.policy=compact``),
    so a forgotten creation must fail loudly, as on a production cluster, instead of silently yielding a
    non-compacted auto-created topic.
    """

    def __init__(self, work_dir: Path, port: int | None = None, controller_port: int | None = None,
                 jars: Path | None = None) -> None:
        """Describe a broker in ``work_dir``; ports not given are those of a previous start, else free ones."""
        self.work_dir = Path(work_dir).expanduser().resolve()
        recorded = self._recorded()
        self.port = port or int(recorded.get("port", 0)) or free_port("the Kafka broker", KafkaProvisioningError)
        self.controller_port = (controller_port or int(recorded.get("controller_port", 0))
                                or free_port("the Kafka broker", KafkaProvisioningError, avoid=self.port))
        self.cluster_id = str(recorded.get("cluster_id") or _new_cluster_id())
        self._jars = jars
        self.daemon = Daemon("Kafka broker", self.work_dir / _PID_FILE, self.log_path,
                             lambda pid: runs_command(pid, b"kafka.Kafka", os.fsencode(self.config_path)),
                             KafkaProvisioningError)

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value for clients: ``127.0.0.1:<port>``."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The broker's console log (JVM output, log4j WARN and above): the place to diagnose failures."""
        return self.work_dir / _LOG_FILE

    @property
    def config_path(self) -> Path:
        """The generated ``server.properties`` (rewritten at every start)."""
        return self.work_dir / "server.properties"

    def _recorded(self) -> dict[str, int | str]:
        """The ports and cluster id recorded by an earlier start in this work dir, if any."""
        try:
            recorded = json.loads((self.work_dir / _STATE_FILE).read_text())
            return {"port": int(recorded["port"]), "controller_port": int(recorded["controller_port"]),
                    "cluster_id": str(recorded["cluster_id"])}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise KafkaProvisioningError(f"unreadable broker state {self.work_dir / _STATE_FILE}: {e}") from e

    def pid(self) -> int | None:
        """The pid of this work dir's running broker (whichever process started it), or None."""
        return self.daemon.pid()

    def is_running(self) -> bool:
        """Whether this work dir's broker process is alive (not necessarily ready yet)."""
        return self.daemon.is_running()

    def _write_config(self) -> None:
        """Write server.properties, log4j.properties and the state file (ports, cluster id)."""
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.cleaner.enable": "true",
            # A restarted broker re-registers only once its crashed predecessor's session expired (default 9 s).
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "1000",
        }
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        (self.work_dir / "log4j.properties").write_text(_LOG4J)
        state = {"port": self.port, "controller_port": self.controller_port, "cluster_id": self.cluster_id}
        (self.work_dir / _STATE_FILE).write_text(json.dumps(state) + "\n")

    def _java_command(self, main: str, *args: str) -> list[str]:
        """``java`` with our JVM options, log4j config and the cached jars, running class ``main``."""
        java = find_tool("java", JAVA_HINT, KafkaProvisioningError)
        self._jars = self._jars or ensure_jars()
        log4j = f"-Dlog4j.configuration={(self.work_dir / 'log4j.properties').as_uri()}"
        return [java, *_JVM_OPTS, log4j, "-cp", str(self._jars / "*"), main, *args]

    def _format(self) -> None:
        """Format the log dir with the recorded cluster id, on the first start only."""
        if (self.work_dir / "data" / "meta.properties").is_file():
            return
        command = self._java_command("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                                     "-c", str(self.config_path), "--ignore-formatted")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise KafkaProvisioningError(f"could not run Kafka's StorageTool: {e}") from e
        with self.log_path.open("a") as log:
            log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise KafkaProvisioningError(f"formatting the Kafka log dir in {self.work_dir} failed "
                                         f"(exit {done.returncode})\n{tail(done.stdout + done.stderr)}")

    def start(self, timeout: float = 60) -> None:
        """Start the broker as a child process (own process group) and wait until it answers clients."""
        self._start(timeout, detached=False)

    def _start(self, timeout: float, detached: bool) -> None:
        """Launch ``kafka.Kafka`` (detached: in its own session, not our child) and wait until it is ready."""
        if self.is_running():
            if (recorded := self._recorded().get("port")) != self.port:
                raise KafkaProvisioningError(f"a broker already runs in {self.work_dir} on port {recorded}")
            return
        for port in (self.port, self.controller_port):
            if not port_is_free(port):
                raise KafkaProvisioningError(f"port {port} on 127.0.0.1 is already in use; cannot start the Kafka "
                                             f"broker in {self.work_dir} (another broker? choose another port)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._format()
        command = self._java_command("kafka.Kafka", str(self.config_path))
        self.daemon.begin_log(f"starting kafka.Kafka {KAFKA_VERSION}")
        try:
            self.daemon.launch(command, detached)
            self._wait_ready(timeout)
        except KafkaProvisioningError:
            self.kill()
            raise

    def _wait_ready(self, timeout: float) -> None:
        """Poll until the port accepts connections and a metadata request lists this broker."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.is_running():
                raise KafkaProvisioningError(f"the Kafka broker in {self.work_dir} exited during start-up; "
                                             f"see {self.log_path}\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
                if admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic()))).brokers:
                    return
            except (OSError, KafkaException):
                time.sleep(0.2)
        raise KafkaProvisioningError(f"the Kafka broker in {self.work_dir} did not answer on {self.bootstrap} "
                                     f"within {timeout:.0f}s; see {self.log_path}\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the broker logged since its latest launch."""
        return self.daemon.log_tail(lines)

    def stop(self, timeout: float = 30) -> None:
        """Shut the broker down cleanly (SIGTERM), killing it if it is still alive after ``timeout``."""
        if not signal_and_wait([self.daemon], signal.SIGTERM, timeout):
            self.kill()
        self.daemon.forget()

    def kill(self) -> None:
        """Kill the broker at once (SIGKILL), as a crash would; ``start()`` recovers its data."""
        if not signal_and_wait([self.daemon], signal.SIGKILL, 10):
            raise KafkaProvisioningError(f"the Kafka broker in {self.work_dir} survived SIGKILL")
        self.daemon.forget()

    def restart(self, timeout: float = 60) -> None:
        """Stop, then start again with the same data, cluster id and ports."""
        self.stop()
        self.start(timeout)

    def __enter__(self) -> LocalKafkaBroker:
        """Start the broker for a ``with`` block."""
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the broker when the ``with`` block ends."""
        self.stop()


def _running_in(state_dir: Path) -> LocalKafkaBroker | None:
    """The broker running in ``state_dir`` (whichever process started it), or None; creates nothing."""
    if not (Path(state_dir) / _STATE_FILE).is_file():
        return None
    broker = LocalKafkaBroker(state_dir)
    return broker if broker.is_running() else None


def up(state_dir: Path, port: int | None = None, timeout: float = 60) -> str:
    """Start a detached broker in ``state_dir`` that outlives this process, or find the running one; its bootstrap."""
    if (running := _running_in(state_dir)) is not None:
        return running.bootstrap
    broker = LocalKafkaBroker(state_dir, port=port)
    broker._start(timeout, detached=True)
    return broker.bootstrap


def down(state_dir: Path, timeout: float = 30) -> bool:
    """Stop the broker ``up`` started in ``state_dir`` (its data stays); False if none was running."""
    if (broker := _running_in(state_dir)) is None:
        return False
    broker.stop(timeout)
    return True


def status(state_dir: Path) -> str | None:
    """The bootstrap of the broker running in ``state_dir``, or None if none runs there."""
    return broker.bootstrap if (broker := _running_in(state_dir)) is not None else None
