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
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
import weakref
from pathlib import Path
from types import TracebackType

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console

from events.errors import KafkaProvisioningError

KAFKA_VERSION = "3.9.1"

_POM = Path(__file__).with_name("kafka") / "pom.xml"  # package data (pyproject: events = ["kafka/*.xml"])
_MARKER, _STATE_FILE, _PID_FILE, _LOG_FILE = ".complete", "broker.json", "broker.pid", "broker.log"
_JAVA_HINT = "install a Java 17+ JDK (e.g. `apt install openjdk-17-jdk-headless`, `brew install openjdk@17`)"
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


def default_cache_dir() -> Path:
    """Where jars are cached: ``$ONCELOG_CACHE``, else ``$XDG_CACHE_HOME/oncelog``, else ``~/.cache/oncelog``."""
    if explicit := os.environ.get("ONCELOG_CACHE"):
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "oncelog"


def _tool(name: str, hint: str) -> str:
    """The path of an executable (``java`` honours ``$JAVA_HOME``), or an error saying what to install."""
    java_home = Path(os.environ.get("JAVA_HOME") or "/nonexistent")
    if name == "java" and (java_home / "bin" / "java").is_file():
        return str(java_home / "bin" / "java")
    if (found := shutil.which(name)) is None:
        raise KafkaProvisioningError(f"`{name}` was not found on PATH: {hint}")
    return found


def _tail(text: str, lines: int = 40) -> str:
    """The last lines of a tool's output, for error messages."""
    return "\n".join(text.strip().splitlines()[-lines:])


def ensure_jars(cache_dir: Path | None = None) -> Path:
    """Resolve Kafka's jars with Maven into the cache once (atomically) and return their directory."""
    version_dir = (cache_dir or default_cache_dir()) / f"kafka-{KAFKA_VERSION}"
    libs = version_dir / "libs"
    if (libs / _MARKER).is_file():
        return libs
    _tool("java", _JAVA_HINT)
    mvn = _tool("mvn", "install Apache Maven (e.g. `apt install maven`, `brew install maven`)")
    version_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=version_dir))
    try:
        shutil.copyfile(_POM, staging / "pom.xml")
        command = [mvn, "-B", "-ntp", "-f", str(staging / "pom.xml"), "dependency:copy-dependencies",
                   f"-DoutputDirectory={staging / 'libs'}", "-DincludeScope=runtime"]
        started, console = time.monotonic(), Console(stderr=True)
        with console.status(f"Resolving Apache Kafka {KAFKA_VERSION} jars with Maven into {libs} (first run only)"):
            try:
                done = subprocess.run(command, cwd=staging, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.SubprocessError) as e:  # includes the 15-minute timeout
                raise KafkaProvisioningError(f"running Maven to resolve the Kafka jars failed: {e}") from e
        if done.returncode != 0:
            (log := version_dir / "maven.log").write_text(done.stdout + done.stderr)
            raise KafkaProvisioningError(
                f"Maven failed (exit {done.returncode}) to resolve org.apache.kafka:kafka_2.13:{KAFKA_VERSION}; "
                f"full output in {log}\n{_tail(done.stdout + done.stderr)}")
        (staging / "libs" / _MARKER).write_text(f"{KAFKA_VERSION}\n")  # written last: the copy is complete
        if libs.exists() and not (libs / _MARKER).is_file():
            shutil.rmtree(libs)  # an incomplete copy from an interrupted run
        try:
            (staging / "libs").rename(libs)
        except OSError as e:
            if not (libs / _MARKER).is_file():  # else a concurrent process finished first: use its copy
                raise KafkaProvisioningError(f"cannot move the Kafka jars into {libs}: {e}") from e
        console.print(f"Kafka {KAFKA_VERSION} jars ready in {libs} ({time.monotonic() - started:.1f}s)")
        return libs
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _port_is_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:port now (with SO_REUSEADDR, as the JVM does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _free_port(avoid: int | None = None) -> int:
    """A free loopback port below the ephemeral range, so that no outgoing connection takes it between restarts."""
    try:  # Linux; other systems hand out 49152+ (or 32768+)
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    rng = random.SystemRandom()
    for _ in range(100):
        port = rng.randint(20000, max(20001, ephemeral_low - 1))
        if port != avoid and _port_is_free(port):
            return port
    raise KafkaProvisioningError("found no free port on 127.0.0.1 for the Kafka broker; pass one explicitly")


def _new_cluster_id() -> str:
    """A cluster id in Kafka's format: URL-safe base64 of a random UUID, never starting with '-'."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


def _is_broker_process(pid: int, config: Path) -> bool:
    """Whether pid is a live ``kafka.Kafka`` running this config (guards against stale pid files and zombies)."""
    if not Path("/proc/self").is_dir():  # macOS / BSD: no /proc, ask ps for the command line
        command = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True).stdout
        return b" kafka.Kafka " in command and os.fsencode(config) in command
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")  # empty for a zombie
    except OSError:
        return False
    return b"kafka.Kafka" in args and os.fsencode(config) in args


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
        self.port = port or int(recorded.get("port", 0)) or _free_port()
        self.controller_port = controller_port or int(recorded.get("controller_port", 0)) or _free_port(self.port)
        self.cluster_id = str(recorded.get("cluster_id") or _new_cluster_id())
        self._jars = jars
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes]], LocalKafkaBroker] | None = None
        self._log_offset = 0

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
        if self._proc is not None:
            return self._proc.pid if self._proc.poll() is None else None
        try:
            pid = int((self.work_dir / _PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _is_broker_process(pid, self.config_path) else None

    def is_running(self) -> bool:
        """Whether this work dir's broker process is alive (not necessarily ready yet)."""
        return self.pid() is not None

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
        java = _tool("java", _JAVA_HINT)
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
                                         f"(exit {done.returncode})\n{_tail(done.stdout + done.stderr)}")

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
            if not _port_is_free(port):
                raise KafkaProvisioningError(f"port {port} on 127.0.0.1 is already in use; cannot start the Kafka "
                                             f"broker in {self.work_dir} (another broker? choose another port)")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._format()
        command = self._java_command("kafka.Kafka", str(self.config_path))
        with self.log_path.open("a") as log:
            self._log_offset = log.tell()
            log.write(f"---- oncelog: starting kafka.Kafka {KAFKA_VERSION} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        try:
            pid = self._launch(command, detached)
            (self.work_dir / _PID_FILE).write_text(f"{pid}\n")
            self._wait_ready(timeout)
        except KafkaProvisioningError:
            self.kill()
            raise

    def _launch(self, command: list[str], detached: bool) -> int:
        """Run the broker with its output appended to the log; its pid."""
        if detached:  # through sh, so the broker is reparented to init and never becomes our zombie
            script = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
            try:
                done = subprocess.run(["/bin/sh", "-c", script, "sh", str(self.log_path), *command],
                                      capture_output=True, text=True, start_new_session=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as e:
                raise KafkaProvisioningError(f"could not launch the Kafka broker: {e}") from e
            if not done.stdout.strip().isdigit():
                raise KafkaProvisioningError(f"could not launch the Kafka broker: {done.stderr.strip()}")
            return int(done.stdout)
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, process_group=0)
            except OSError as e:
                raise KafkaProvisioningError(f"could not launch the Kafka broker: {e}") from e
        # Never leak a JVM when the owner forgets to stop it (garbage collection or interpreter exit).
        self._finalizer = weakref.finalize(self, _reap, self._proc)
        return self._proc.pid

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
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return _tail(log.read().decode(errors="replace"), lines)
        except OSError as e:
            return f"(no broker log: {e})"

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> bool:
        """Send ``sig`` to the broker and wait until it is gone; False if it still runs after ``timeout``."""
        if (pid := self.pid()) is None:
            return True
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError as e:
            raise KafkaProvisioningError(f"not allowed to signal the Kafka broker (pid {pid}): {e}") from e
        deadline = time.monotonic() + timeout
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
        while self.is_running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    def _forget(self) -> None:
        """Drop the process handle, its finalizer and the pid file once the broker is gone."""
        if self._finalizer is not None:
            self._finalizer.detach()
        self._proc, self._finalizer = None, None
        (self.work_dir / _PID_FILE).unlink(missing_ok=True)

    def stop(self, timeout: float = 30) -> None:
        """Shut the broker down cleanly (SIGTERM), killing it if it is still alive after ``timeout``."""
        if not self._signal_and_wait(signal.SIGTERM, timeout):
            self.kill()
        self._forget()

    def kill(self) -> None:
        """Kill the broker at once (SIGKILL), as a crash would; ``start()`` recovers its data."""
        if not self._signal_and_wait(signal.SIGKILL, 10):
            raise KafkaProvisioningError(f"the Kafka broker in {self.work_dir} survived SIGKILL")
        self._forget()

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


def _reap(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a broker child still running when its owner goes away (SIGKILL after 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
