"""Real Apache Kafka (KRaft) run from its Maven Central jars, without Docker: one node, a cluster, secured listeners.

Why: oncelog's Kafka store relies on transactions, ``read_committed`` and compaction, which only the real broker
implements faithfully (a Kafka-compatible broker from PyPI leaked aborted records), so development, tests and
benchmarks run Apache Kafka itself, needing only Java 17+ and Maven. :func:`ensure_jars` resolves one version's jars
once into a cache (``kafka-<version>``); :class:`LocalKafkaBroker` formats a work dir, runs ``java kafka.Kafka`` and
waits until it answers, keeping data, cluster id and ports across restarts and crashes, optionally with SASL_SSL and
SASL_PLAINTEXT listeners (SCRAM-SHA-512 and PLAIN, a CA made on the spot); :class:`LocalKafkaCluster` runs several
such nodes as one replicated cluster; :func:`up`, :func:`down` and :func:`status` manage a detached broker or cluster
that outlives the command (``oncelog kafka up [--nodes 3]``). Kafka 3.9.1 is the default and the 4.x line runs with
``version=``: both are supported, and the log-store contract suite runs on each.
"""

from __future__ import annotations

import base64
import os
import re
import socket
import subprocess
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from localservers.daemon import Daemon, runs_command
from localservers.errors import KafkaProvisioningError
from localservers.maven import resolve_jars
from localservers.server import LocalServer, stop_running
from localservers.tools import JAVA_HINT, default_cache_dir, find_tool, free_ports, tail

KAFKA_VERSION = "3.9.1"
KAFKA4_VERSION = "4.4.0"
SUPPORTED_KAFKA_VERSIONS = (KAFKA_VERSION, KAFKA4_VERSION)

_POMS = {3: "pom.xml", 4: "pom-4.xml"}  # package data (pyproject: events = ["kafka/*.xml"]), one per major line
_STATE_FILE, _PID_FILE, _LOG_FILE, _CLUSTER_FILE = "broker.json", "broker.pid", "broker.log", "cluster.json"
_JVM_OPTS = ("-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true")
# WARN and above to stdout, which is broker.log, plus the one INFO line saying the server started.
_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.logger.org.apache.kafka.clients.NetworkClient=ERROR
"""
# The same for Kafka 4, which logs through log4j2 (its properties format needs no extra jar).
_LOG4J2 = """\
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.raft.name = kafka.server.KafkaRaftServer
logger.raft.level = INFO
logger.network.name = org.apache.kafka.clients.NetworkClient
logger.network.level = ERROR
"""
_SAFE_CREDENTIAL = re.compile(r"[A-Za-z0-9._-]+")  # nothing JAAS or the --add-scram syntax would need quoted


class SaslMechanism(StrEnum):
    """The SASL mechanisms a secured local broker accepts on its SASL listeners."""

    SCRAM_SHA_512 = "SCRAM-SHA-512"
    PLAIN = "PLAIN"


class Listener(StrEnum):
    """A local node's listener names (each also its security protocol, except the controller's)."""

    PLAINTEXT = "PLAINTEXT"
    SASL_SSL = "SASL_SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    CONTROLLER = "CONTROLLER"


@dataclass(frozen=True)
class SaslUser:
    """One user the secured broker knows, under both mechanisms (a SCRAM credential and a PLAIN JAAS entry)."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        """Refuse characters that would need quoting in JAAS or in StorageTool's ``--add-scram`` syntax."""
        for what, value in (("username", self.username), ("password", self.password)):
            if not _SAFE_CREDENTIAL.fullmatch(value):
                raise KafkaProvisioningError(f"the local broker's SASL {what} may hold only letters, digits, "
                                             f"'.', '_' and '-' (and not be empty)")


@dataclass(frozen=True)
class TlsFiles:
    """A CA and the server certificate it signed (for 127.0.0.1 and localhost), as PEM files."""

    ca_pem: Path
    server_keystore_pem: Path  # the server's private key (PKCS#8) followed by its certificate


@dataclass(frozen=True)
class SecureEndpoints:
    """Where a secured local broker listens and how to log in: what a client needs to test security settings."""

    plaintext_bootstrap: str
    sasl_ssl_bootstrap: str
    sasl_plaintext_bootstrap: str
    ca_pem_path: Path
    username: str
    password: str = field(repr=False)
    mechanisms: tuple[SaslMechanism, ...] = (SaslMechanism.SCRAM_SHA_512, SaslMechanism.PLAIN)


@dataclass(frozen=True)
class NodeMembership:
    """One node's place in a cluster: its id, the cluster id, the controller quorum and how many nodes there are."""

    node_id: int
    cluster_id: str
    voters: str  # controller.quorum.voters: "1@127.0.0.1:port,2@..."
    size: int


def _major(version: str) -> int:
    """The major line of a Kafka version ("3.9.1" -> 3), refusing lines we have no pom for."""
    try:
        major = int(version.split(".", 1)[0])
    except ValueError as e:
        raise KafkaProvisioningError(f"unreadable Kafka version {version!r} (expected e.g. {KAFKA_VERSION})") from e
    if major not in _POMS:
        raise KafkaProvisioningError(f"Kafka {version} is not supported locally; supported lines: "
                                     f"{', '.join(f'{line}.x' for line in sorted(_POMS))}")
    return major


def _pom_for(version: str, version_dir: Path) -> Path:
    """The pom resolving ``version``: its line's pom, or a copy of it with the version substituted."""
    pom = Path(__file__).with_name("kafka") / _POMS[_major(version)]
    text = pom.read_text()
    if f"<kafka.version>{version}</kafka.version>" in text:
        return pom
    version_dir.mkdir(parents=True, exist_ok=True)
    (copy := version_dir / "pom.xml").write_text(
        re.sub(r"<kafka\.version>[^<]*</kafka\.version>", f"<kafka.version>{version}</kafka.version>", text))
    return copy


def ensure_jars(cache_dir: Path | None = None, version: str = KAFKA_VERSION) -> Path:
    """Resolve one Kafka version's jars with Maven into the cache once (atomically) and return their directory."""
    version_dir = (cache_dir or default_cache_dir()) / f"kafka-{version}"
    return resolve_jars(_pom_for(version, version_dir), version_dir, f"Apache Kafka {version}",
                        KafkaProvisioningError)


def _new_cluster_id() -> str:
    """A cluster id in Kafka's format: URL-safe base64 of a random UUID, never starting with '-'."""
    while (cluster_id := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        pass
    return cluster_id


def _run_tool(command: list[str], what: str, cwd: Path) -> None:
    """Run a provisioning tool (openssl) in ``cwd``, raising with its output when it fails."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise KafkaProvisioningError(f"could not run {Path(command[0]).name} to {what}: {e}") from e
    if done.returncode != 0:
        raise KafkaProvisioningError(f"{Path(command[0]).name} failed to {what} in {cwd} (exit {done.returncode})\n"
                                     f"{tail(done.stdout + done.stderr)}")


def make_tls_files(tls_dir: Path) -> TlsFiles:
    """A fresh CA and a server certificate for 127.0.0.1/localhost signed by it, made with ``openssl`` (once)."""
    files = TlsFiles(tls_dir / "ca.pem", tls_dir / "server-keystore.pem")
    if files.ca_pem.is_file() and files.server_keystore_pem.is_file():
        return files
    openssl = find_tool("openssl", "install OpenSSL (e.g. `apt install openssl`)", KafkaProvisioningError)
    tls_dir.mkdir(parents=True, exist_ok=True)
    (tls_dir / "server.ext").write_text("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n"
                                        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _run_tool([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
               "-days", "30", "-subj", "/CN=oncelog local test CA",
               "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
              "make a CA", tls_dir)
    _run_tool([openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
               "-subj", "/CN=127.0.0.1"], "make the server key", tls_dir)
    _run_tool([openssl, "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
               "-CAcreateserial", "-out", "server.crt", "-days", "30", "-extfile", "server.ext"],
              "sign the server certificate", tls_dir)
    files.server_keystore_pem.write_text((tls_dir / "server.key").read_text() + (tls_dir / "server.crt").read_text())
    return files


def _sasl_settings(user: SaslUser, tls: TlsFiles) -> dict[str, str]:
    """The broker settings of the SASL listeners: JAAS per listener and mechanism, and the PEM keystore."""
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    plain = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{user.username}="{user.password}";'
    settings = {"sasl.enabled.mechanisms": ",".join(SaslMechanism)}
    for listener in (Listener.SASL_SSL, Listener.SASL_PLAINTEXT):
        prefix = f"listener.name.{listener.lower()}"
        settings[f"{prefix}.{SaslMechanism.SCRAM_SHA_512.lower()}.sasl.jaas.config"] = scram
        settings[f"{prefix}.{SaslMechanism.PLAIN.lower()}.sasl.jaas.config"] = plain
    settings.update({"listener.name.sasl_ssl.ssl.keystore.type": "PEM",
                     "listener.name.sasl_ssl.ssl.keystore.location": str(tls.server_keystore_pem),
                     "ssl.client.auth": "none"})
    return settings


class LocalKafkaBroker(LocalServer):
    """A Kafka node (KRaft, broker+controller) living in ``work_dir``; data and ports survive restarts.

    Settings are Kafka's defaults plus what the node's cluster needs (internal topics replicated to as many nodes as
    there are, up to 3, with min.insync 2 on 3 nodes; no initial rebalance delay; a short broker session so a crashed
    broker re-registers within seconds) and ``auto.create.topics.enable=false``: oncelog creates its topic with
    explicit configs (``cleanup.policy=compact``), so a forgotten creation must fail loudly, as on a production
    cluster, instead of silently yielding a non-compacted auto-created topic. With ``sasl_user`` the node also
    listens with SASL_SSL and SASL_PLAINTEXT (SCRAM-SHA-512 and PLAIN for that user; TLS from a CA made in
    ``work_dir/tls``); brokers talk to each other on PLAINTEXT.
    """

    what = "Kafka broker"
    error = KafkaProvisioningError
    state_file = _STATE_FILE
    start_timeout, stop_timeout = 60.0, 30.0

    def __init__(self, work_dir: Path, port: int | None = None, controller_port: int | None = None,
                 jars: Path | None = None, *, version: str = KAFKA_VERSION,
                 membership: NodeMembership | None = None, sasl_user: SaslUser | None = None,
                 taken: Iterable[int] = ()) -> None:
        """Describe a node in ``work_dir``; ports not given are those of a previous start, else free ones (none of
        `taken`: the ports its cluster's other nodes drew)."""
        super().__init__(work_dir)
        self.version = version
        _major(version)
        recorded = self._recorded_state(_parse_broker_state) or {}
        known = [port, controller_port, *(int(v) for k, v in recorded.items() if k.endswith("port"))]
        spare = iter(free_ports(4, "the Kafka broker", KafkaProvisioningError,
                                taken=[*(p for p in known if p), *taken]))
        self.port = port or int(recorded.get("port", 0)) or next(spare)
        self.controller_port = controller_port or int(recorded.get("controller_port", 0)) or next(spare)
        self.sasl_user = sasl_user
        self.sasl_ssl_port = self.sasl_plaintext_port = 0
        if sasl_user is not None:
            self.sasl_ssl_port = int(recorded.get("sasl_ssl_port", 0)) or next(spare)
            self.sasl_plaintext_port = int(recorded.get("sasl_plaintext_port", 0)) or next(spare)
        cluster_id = str(recorded.get("cluster_id") or _new_cluster_id())
        self.membership = membership or NodeMembership(1, cluster_id, f"1@127.0.0.1:{self.controller_port}", 1)
        self.cluster_id = self.membership.cluster_id
        self._jars = jars
        self.daemon = Daemon(f"Kafka broker (node {self.membership.node_id})", self.work_dir / _PID_FILE,
                             self.log_path,
                             lambda pid: runs_command(pid, b"kafka.Kafka", os.fsencode(self.config_path)),
                             KafkaProvisioningError, tuple(self._ports().values()))

    @property
    def daemons(self) -> list[Daemon]:
        return [self.daemon]

    @property
    def node_id(self) -> int:
        """This node's id in its cluster (1 for a single node)."""
        return self.membership.node_id

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value for clients: ``127.0.0.1:<port>`` (the PLAINTEXT listener)."""
        return f"127.0.0.1:{self.port}"

    def secure_endpoints(self) -> SecureEndpoints:
        """The SASL listeners' addresses, the CA and the user; only for a node started with ``sasl_user``."""
        if self.sasl_user is None:
            raise KafkaProvisioningError(f"the Kafka broker in {self.work_dir} has no SASL listeners "
                                         f"(start it with sasl_user=)")
        return SecureEndpoints(self.bootstrap, f"127.0.0.1:{self.sasl_ssl_port}",
                               f"127.0.0.1:{self.sasl_plaintext_port}", self._tls_files().ca_pem,
                               self.sasl_user.username, self.sasl_user.password)

    @property
    def log_path(self) -> Path:
        """The broker's console log (JVM output, log4j WARN and above): the place to diagnose failures."""
        return self.work_dir / _LOG_FILE

    @property
    def config_path(self) -> Path:
        """The generated ``server.properties`` (rewritten at every start)."""
        return self.work_dir / "server.properties"

    def _tls_files(self) -> TlsFiles:
        """Where this node's CA and server keystore live."""
        return TlsFiles(self.work_dir / "tls" / "ca.pem", self.work_dir / "tls" / "server-keystore.pem")

    def _state(self) -> dict[str, Any]:
        """The ports and cluster id, recorded at every start."""
        return {"port": self.port, "controller_port": self.controller_port, "cluster_id": self.cluster_id,
                "sasl_ssl_port": self.sasl_ssl_port, "sasl_plaintext_port": self.sasl_plaintext_port}

    def pid(self) -> int | None:
        """The pid of this work dir's running broker (whichever process started it), or None."""
        return self.daemon.pid()

    def _ports(self) -> dict[Listener, int]:
        """This node's listeners and their ports (the SASL ones only when it has a SASL user)."""
        ports = {Listener.PLAINTEXT: self.port, Listener.CONTROLLER: self.controller_port}
        if self.sasl_user is not None:
            ports |= {Listener.SASL_SSL: self.sasl_ssl_port, Listener.SASL_PLAINTEXT: self.sasl_plaintext_port}
        return ports
    def _settings(self) -> dict[str, str]:
        """server.properties for this node: its listeners, its quorum, replication fitting the cluster size."""
        ports = self._ports()
        clients = [listener for listener in ports if listener is not Listener.CONTROLLER]
        replication = min(3, self.membership.size)
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.membership.voters,
            "listeners": ",".join(f"{listener}://127.0.0.1:{port}" for listener, port in ports.items()),
            "advertised.listeners": ",".join(f"{listener}://127.0.0.1:{ports[listener]}" for listener in clients),
            "controller.listener.names": Listener.CONTROLLER,
            "inter.broker.listener.name": Listener.PLAINTEXT,
            "listener.security.protocol.map": ",".join(
                f"{listener}:{Listener.PLAINTEXT if listener is Listener.CONTROLLER else listener}"
                for listener in ports),
            "log.dirs": str(self.work_dir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": str(replication),
            "transaction.state.log.replication.factor": str(replication),
            "transaction.state.log.min.isr": str(min(2, replication)),
            "min.insync.replicas": str(min(2, replication)),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "log.cleaner.enable": "true",
            # A restarted broker re-registers only once its crashed predecessor's session expired (default 9 s).
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "1000",
            # A killed writer's open transaction is aborted within a second of its transaction.timeout.ms (the log's
            # write_timeout_s), not up to 10 s later (the default check interval): its log is readable again sooner.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        }
        if self.membership.size > 1:  # 50 partitions x 3 replicas each would make a loaded laptop's start crawl
            settings |= {"offsets.topic.num.partitions": "6", "transaction.state.log.num.partitions": "6"}
        if self.sasl_user is not None:
            settings |= _sasl_settings(self.sasl_user, make_tls_files(self.work_dir / "tls"))
        return settings

    def _write_config(self) -> None:
        """Write server.properties, the logging config and the state file (ports, cluster id)."""
        self.config_path.write_text("".join(f"{key}={value}\n" for key, value in self._settings().items()))
        (self.work_dir / "log4j.properties").write_text(_LOG4J)
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2)
        self._write_state()

    def _java_command(self, main: str, *args: str) -> list[str]:
        """``java`` with our JVM options, logging config and the cached jars, running class ``main``."""
        java = find_tool("java", JAVA_HINT, KafkaProvisioningError)
        self._jars = self._jars or ensure_jars(version=self.version)
        logging = (f"-Dlog4j.configuration={(self.work_dir / 'log4j.properties').as_uri()}" if _major(self.version) < 4
                   else f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}")
        # A cluster's JVMs start together on what may be a 2-core laptop: the quick C1 compiler only starts faster.
        quick_start = ("-XX:TieredStopAtLevel=1",) if self.membership.size > 1 else ()
        return [java, *_JVM_OPTS, *quick_start, logging, "-cp", str(self._jars / "*"), main, *args]

    def _format(self) -> None:
        """Format the log dir with the cluster id (and the SCRAM user), on the first start only."""
        if (self.work_dir / "data" / "meta.properties").is_file():
            return
        scram: list[str] = []
        if (user := self.sasl_user) is not None:
            scram = ["--add-scram", f"{SaslMechanism.SCRAM_SHA_512}=[name={user.username},password={user.password}]"]
        command = self._java_command("kafka.tools.StorageTool", "format", "-t", self.cluster_id,
                                     "-c", str(self.config_path), "--ignore-formatted", *scram)
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise KafkaProvisioningError(f"could not run Kafka's StorageTool: {e}") from e
        with self.log_path.open("a") as log:
            log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise KafkaProvisioningError(f"formatting the Kafka log dir in {self.work_dir} failed "
                                         f"(exit {done.returncode})\n{tail(done.stdout + done.stderr)}")

    def _launch(self, missing: list[Daemon], detached: bool) -> None:
        """Write the config, format on first use and launch ``kafka.Kafka``."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._format()
        self.daemon.launch(self._java_command("kafka.Kafka", str(self.config_path)), detached,
                           f"starting kafka.Kafka {self.version} (node {self.node_id})")

    def _health(self, timeout: float) -> str | None:
        """Ready once the port accepts connections and a metadata request lists every broker of the cluster."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                pass
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
            listed = len(admin.list_topics(timeout=min(5.0, timeout)).brokers)
        except (OSError, KafkaException) as e:
            return f"no answer on {self.bootstrap}: {e}"
        return None if listed >= self.membership.size else f"{listed} of {self.membership.size} brokers registered"


class LocalKafkaCluster(LocalServer):
    """``nodes`` KRaft nodes (each broker+controller, the quorum on all of them) in ``work_dir/node-<id>``.

    Internal topics are replicated to min(3, nodes) brokers with min.insync 2, as the events topic should be on a
    production cluster; each node keeps its ports and data across restarts, so one node can be killed and started
    again while the others serve. Nodes and version not given are those of a previous start, else 3 and 3.9.1.
    """

    what = "Kafka cluster"
    error = KafkaProvisioningError
    state_file = _CLUSTER_FILE
    start_timeout, stop_timeout = 90.0, 15.0

    def __init__(self, work_dir: Path, nodes: int | None = None, version: str | None = None) -> None:
        """Describe the cluster; ports and the cluster id are those of a previous start, else fresh ones."""
        super().__init__(work_dir)
        recorded = self._recorded_state(dict) or {}
        nodes = int(recorded.get("nodes", 3)) if nodes is None else nodes
        if nodes < 1:
            raise KafkaProvisioningError(f"a Kafka cluster needs at least one node, not {nodes}")
        self.version = version or str(recorded.get("version", KAFKA_VERSION))
        singles: list[LocalKafkaBroker] = []
        for i in range(1, nodes + 1):  # each node's free ports drawn around those of the nodes before it
            drawn = [port for single in singles for port in (single.port, single.controller_port)]
            singles.append(LocalKafkaBroker(self._node_dir(i), version=self.version, taken=drawn))
        voters = ",".join(f"{i}@127.0.0.1:{single.controller_port}" for i, single in enumerate(singles, 1))
        self.cluster_id = str(recorded.get("cluster_id") or _new_cluster_id())
        self.nodes = [LocalKafkaBroker(self._node_dir(i), single.port, single.controller_port, version=self.version,
                                       membership=NodeMembership(i, self.cluster_id, voters, nodes))
                      for i, single in enumerate(singles, 1)]
        ports = [port for node in self.nodes for port in (node.port, node.controller_port)]
        if len(set(ports)) != len(ports):  # ports an older start recorded, drawn node by node
            raise KafkaProvisioningError(f"the nodes of the Kafka cluster in {self.work_dir} drew clashing ports "
                                         f"{ports}; remove {self.work_dir} and start again")

    @property
    def daemons(self) -> list[Daemon]:
        return [node.daemon for node in self.nodes]

    def _node_dir(self, node_id: int) -> Path:
        """The work dir of node ``node_id``."""
        return self.work_dir / f"node-{node_id}"

    def _state(self) -> dict[str, Any]:
        return {"cluster_id": self.cluster_id, "nodes": len(self.nodes), "version": self.version}

    @property
    def bootstrap(self) -> str:
        """The ``bootstrap.servers`` value naming every node."""
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> LocalKafkaBroker:
        """The node with id ``node_id`` (as partition metadata names leaders)."""
        for candidate in self.nodes:
            if candidate.node_id == node_id:
                return candidate
        raise KafkaProvisioningError(f"the Kafka cluster in {self.work_dir} has no node {node_id}")

    def _launch(self, missing: list[Daemon], detached: bool) -> None:
        """Launch the missing nodes together (the quorum needs a majority to elect; formatting runs a JVM each)."""
        self._write_state()
        nodes = [node for node in self.nodes if node.daemon in missing]
        with ThreadPoolExecutor(len(nodes)) as pool:
            list(pool.map(lambda node: node._launch([node.daemon], detached), nodes))

    def _health(self, timeout: float) -> str | None:
        """Ready once every node lists every broker."""
        return next((reason for node in self.nodes if (reason := node._health(timeout)) is not None), None)

    def start_node(self, node_id: int, timeout: float = 60) -> None:
        """Start one node again (after kill or stop) and wait until every node lists every broker: the node's own
        answer is not enough, as another node may still hold it fenced and create topics on the others only."""
        self.node(node_id).start(timeout)
        self._await(timeout, self._health, self.daemons)

    def partition_leaders(self, topic: str, timeout: float = 10) -> dict[int, int]:
        """Each partition of ``topic`` and the node id leading it now (-1 while it has none)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        try:
            metadata = admin.list_topics(topic, timeout=timeout).topics[topic]
        except KafkaException as e:
            raise KafkaProvisioningError(f"no metadata for topic {topic!r} from the cluster {self.bootstrap}: "
                                         f"{e}") from e
        if metadata.error is not None:
            raise KafkaProvisioningError(f"no metadata for topic {topic!r} from the cluster {self.bootstrap}: "
                                         f"{metadata.error}")
        return {partition: meta.leader for partition, meta in sorted(metadata.partitions.items())}


def _parse_broker_state(recorded: dict[str, Any]) -> dict[str, int | str]:
    """A broker's recorded ports and cluster id (SASL ports 0 when it had none)."""
    return {"port": int(recorded["port"]), "controller_port": int(recorded["controller_port"]),
            "cluster_id": str(recorded["cluster_id"]), "sasl_ssl_port": int(recorded.get("sasl_ssl_port", 0)),
            "sasl_plaintext_port": int(recorded.get("sasl_plaintext_port", 0))}


def _found_in(state_dir: Path) -> LocalKafkaBroker | LocalKafkaCluster | None:
    """The broker or cluster recorded in ``state_dir`` (running or not), or None; starts nothing."""
    return LocalKafkaCluster.found_in(state_dir) or LocalKafkaBroker.found_in(state_dir)


def _running_in(state_dir: Path) -> LocalKafkaBroker | LocalKafkaCluster | None:
    """The broker or cluster running in ``state_dir`` (whichever process started it), or None; starts nothing."""
    return LocalKafkaCluster.running_in(state_dir) or LocalKafkaBroker.running_in(state_dir)


def up(state_dir: Path, port: int | None = None, timeout: float = 60, nodes: int = 1,
       version: str = KAFKA_VERSION) -> str:
    """Start a detached broker (or ``nodes``-node cluster) in ``state_dir`` that outlives this process, or find the
    running one; its bootstrap."""
    if (found := _running_in(state_dir)) is not None:
        return found.bootstrap
    single_there = LocalKafkaBroker.found_in(state_dir) is not None
    if (nodes > 1 and single_there) or (nodes == 1 and LocalKafkaCluster.found_in(state_dir) is not None):
        raise KafkaProvisioningError(f"{state_dir} holds a {'single broker' if single_there else 'cluster'}; "
                                     f"choose another --state-dir for {nodes} node(s)")
    if nodes > 1:
        if port is not None:
            raise KafkaProvisioningError("--port applies to a single broker; a cluster picks its nodes' ports")
        return LocalKafkaCluster(state_dir, nodes, version).start_detached(max(timeout, 90)).bootstrap
    return LocalKafkaBroker(state_dir, port=port, version=version).start_detached(timeout).bootstrap


def down(state_dir: Path, timeout: float = 30) -> bool:
    """Stop the broker or cluster ``up`` started in ``state_dir`` (its data stays); False if none was running."""
    return stop_running(_found_in(state_dir), timeout)


def status(state_dir: Path) -> str | None:
    """The bootstrap of the broker or cluster running in ``state_dir``, or None if none runs there."""
    return found.bootstrap if (found := _running_in(state_dir)) is not None else None
