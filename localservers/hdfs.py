"""A real single-node HDFS (one NameNode, one DataNode) run from Hadoop's Maven Central jars, without Docker.

Why: oncelog publishes to ``hdfs://`` folders, whose atomic rename its commit protocol relies on, so tests,
benchmarks and development run Apache Hadoop itself, needing only Java 17+ and Maven, as for Kafka
(:mod:`localservers.kafka`). :func:`ensure_jars` resolves the jars once into a cache; :class:`LocalHdfs` formats a
work dir once, runs the NameNode and the DataNode as two JVMs on loopback and waits until a file can be written
(WebHDFS answers, the DataNode registered, safe mode is off), keeping data and ports across restarts and crashes;
:func:`up`, :func:`down` and :func:`status` manage detached daemons that outlive the command (``oncelog hdfs up``).
Hadoop 3.5.0 is the version of pyspark's own bundled Hadoop client.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from localservers.daemon import Daemon, runs_command
from localservers.errors import HdfsProvisioningError
from localservers.maven import resolve_jars
from localservers.server import LocalServer, stop_running
from localservers.tools import JAVA_HINT, default_cache_dir, find_tool, free_ports, tail

HADOOP_VERSION = "3.5.0"

# Package data (pyproject: localservers = ["hadoop/*.xml"]).
_POM = Path(__file__).with_name("hadoop") / "pom.xml"
_STATE_FILE = "hdfs.json"
_JVM_OPTS = ("-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
             "-Djava.net.preferIPv4Stack=true")
# WARN and above to stdout, which is the daemon's log, plus the NameNode's start-up lines.
_LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
"""
_WEBAPPS = ("hdfs", "datanode", "static")
_PROBE_BYTES = b"oncelog readiness probe\n"


class HdfsDaemon(Enum):
    """The two daemons of the local HDFS; the value is the Java class each runs."""

    NAMENODE = "org.apache.hadoop.hdfs.server.namenode.NameNode"
    DATANODE = "org.apache.hadoop.hdfs.server.datanode.DataNode"

    @property
    def file_stem(self) -> str:
        """``namenode`` / ``datanode``: the stem of the daemon's log and pid files."""
        return self.name.lower()

    @property
    def arguments(self) -> tuple[str, ...]:
        """Generic options for this daemon alone (``-D key=value``, after the class name)."""
        if self is HdfsDaemon.DATANODE:  # keeps retrying a NameNode still formatting or starting (clients: 10 s)
            return ("-D", "ipc.client.connect.max.retries=400")
        return ()


@dataclass(frozen=True)
class HdfsPorts:
    """The loopback ports of one local HDFS: NameNode RPC and HTTP, DataNode transfer, HTTP and IPC."""

    rpc: int
    http: int
    datanode: int
    datanode_http: int
    datanode_ipc: int

    @classmethod
    def choose(cls, rpc: int | None = None, http: int | None = None) -> HdfsPorts:
        """The given ports, the others free ones, all distinct."""
        given = [port for port in (rpc, http) if port]
        chosen = iter(free_ports(5 - len(given), "the local HDFS", HdfsProvisioningError, taken=given))
        return cls(rpc=rpc or next(chosen), http=http or next(chosen), datanode=next(chosen),
                   datanode_http=next(chosen), datanode_ipc=next(chosen))

    def of(self, daemon: HdfsDaemon) -> tuple[int, ...]:
        """The ports `daemon` listens on."""
        if daemon is HdfsDaemon.NAMENODE:
            return (self.rpc, self.http)
        return (self.datanode, self.datanode_http, self.datanode_ipc)


def ensure_jars(cache_dir: Path | None = None) -> Path:
    """Resolve Hadoop's HDFS jars with Maven into the cache once (atomically) and return their directory."""
    return resolve_jars(_POM, (cache_dir or default_cache_dir()) / f"hadoop-{HADOOP_VERSION}",
                        f"Apache Hadoop {HADOOP_VERSION} HDFS", HdfsProvisioningError)


def _site_xml(properties: dict[str, str]) -> str:
    """A Hadoop ``*-site.xml`` holding ``properties``."""
    body = "".join(f"  <property><name>{escape(key)}</name><value>{escape(value)}</value></property>\n"
                   for key, value in properties.items())
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def _remote_error(error: urllib.error.HTTPError) -> str:
    """The message of a WebHDFS error response (its JSON ``RemoteException``), else the HTTP status."""
    try:
        remote = json.loads(error.read() or b"{}").get("RemoteException", {})
    except (OSError, ValueError):
        remote = {}
    return f"HTTP {error.code}: {remote.get('exception', '')} {remote.get('message', error.reason)}".strip()


class LocalHdfs(LocalServer):
    """A single-node HDFS living in ``work_dir`` (name and data dirs, conf, logs); data and ports survive restarts.

    Settings are Hadoop's defaults plus what one node on loopback needs: replication 1, every address bound to
    and advertised as 127.0.0.1 (so WebHDFS redirects to the DataNode work from this host), permissions off (any
    user may write), no safe-mode extension and a 1 s heartbeat (a restart is ready within seconds), and the
    client never trying to replace the only DataNode of a write pipeline.
    """

    what = "HDFS"
    error = HdfsProvisioningError
    state_file = _STATE_FILE
    start_timeout, stop_timeout = 90.0, 30.0

    def __init__(self, work_dir: Path, port: int | None = None, http_port: int | None = None,
                 jars: Path | None = None) -> None:
        """Describe an HDFS in ``work_dir``; ports not given are those of a previous start, else free ones."""
        super().__init__(work_dir)
        recorded = self._recorded_state(lambda state: HdfsPorts(**{key: int(value) for key, value in state.items()}))
        if recorded is not None and port in (None, recorded.rpc) and http_port in (None, recorded.http):
            self.ports = recorded
        else:
            self.ports = HdfsPorts.choose(port or (recorded.rpc if recorded else None),
                                          http_port or (recorded.http if recorded else None))
        self._jars = jars
        self._daemons = {daemon: self._daemon(daemon) for daemon in HdfsDaemon}

    def _daemon(self, daemon: HdfsDaemon) -> Daemon:
        """`daemon`'s process, recognised by its class and our marker option on its command line."""
        return Daemon(daemon.file_stem, self.work_dir / f"{daemon.file_stem}.pid", self.log_path(daemon),
                      lambda pid: runs_command(pid, daemon.value.encode(), os.fsencode(self._marker)),
                      HdfsProvisioningError, self.ports.of(daemon))

    @property
    def daemons(self) -> list[Daemon]:
        return list(self._daemons.values())

    @property
    def url(self) -> str:
        """The file system URL for Hadoop clients: ``hdfs://127.0.0.1:<rpc port>``."""
        return f"hdfs://127.0.0.1:{self.ports.rpc}"

    @property
    def webhdfs_url(self) -> str:
        """The file system URL for WebHDFS clients: ``webhdfs://127.0.0.1:<http port>``."""
        return f"webhdfs://{self.http_address}"

    @property
    def http_address(self) -> str:
        """The NameNode's HTTP (WebHDFS) address: ``127.0.0.1:<http port>``."""
        return f"127.0.0.1:{self.ports.http}"

    @property
    def conf_dir(self) -> Path:
        """The folder of ``core-site.xml`` and ``hdfs-site.xml`` (rewritten at each start): HADOOP_CONF_DIR."""
        return self.work_dir / "conf"

    def log_path(self, daemon: HdfsDaemon) -> Path:
        """A daemon's console log (JVM output, log4j WARN and above): the place to diagnose failures."""
        return self.work_dir / f"{daemon.file_stem}.log"

    def _state(self) -> dict[str, Any]:
        return asdict(self.ports)

    def pid(self, daemon: HdfsDaemon) -> int | None:
        """The pid of this work dir's running ``daemon`` (whichever process started it), or None."""
        return self._daemons[daemon].pid()

    @property
    def _marker(self) -> str:
        """The JVM option naming this work dir, by which its daemons are recognised."""
        return f"-Doncelog.hdfs.dir={self.work_dir}"

    def _write_config(self) -> None:
        """Write core-site.xml, hdfs-site.xml, log4j.properties and the state file (ports)."""
        ports = self.ports
        core = {
            "fs.defaultFS": self.url,
            "hadoop.tmp.dir": str(self.work_dir / "tmp"),
            # Clients (the DataNode too) retry a refused connection every 250 ms instead of every second.
            "ipc.client.connect.retry.interval": "250",
            "ipc.client.connect.max.retries": "40",
        }
        hdfs = {
            "dfs.namenode.rpc-address": f"127.0.0.1:{ports.rpc}",
            "dfs.namenode.http-address": f"127.0.0.1:{ports.http}",
            "dfs.namenode.name.dir": (self.work_dir / "name").as_uri(),
            "dfs.datanode.data.dir": (self.work_dir / "data").as_uri(),
            "dfs.datanode.address": f"127.0.0.1:{ports.datanode}",
            "dfs.datanode.http.address": f"127.0.0.1:{ports.datanode_http}",
            "dfs.datanode.ipc.address": f"127.0.0.1:{ports.datanode_ipc}",
            "dfs.datanode.hostname": "127.0.0.1",
            "dfs.namenode.datanode.registration.ip-hostname-check": "false",
            "dfs.client.use.datanode.hostname": "true",
            "dfs.replication": "1",
            "dfs.permissions.enabled": "false",
            "dfs.webhdfs.enabled": "true",
            "dfs.namenode.safemode.extension": "0",
            "dfs.heartbeat.interval": "1",
            # One DataNode: a write pipeline has no other node to swap in after an error.
            "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
        }
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        (self.conf_dir / "core-site.xml").write_text(_site_xml(core))
        (self.conf_dir / "hdfs-site.xml").write_text(_site_xml(hdfs))
        (self.conf_dir / "log4j.properties").write_text(_LOG4J)
        for webapp in _WEBAPPS:  # Maven's jars lack the web UI folders the HTTP servers look up; WebHDFS needs none
            (self.work_dir / "web" / "webapps" / webapp).mkdir(parents=True, exist_ok=True)
        self._write_state()

    def _java_command(self, main: str, *args: str) -> list[str]:
        """``java`` with our JVM options, the conf dir and the cached jars on the class path, running ``main``."""
        java = find_tool("java", JAVA_HINT, HdfsProvisioningError)
        self._jars = self._jars or ensure_jars()
        logs = self.work_dir / "logs"
        return [java, *_JVM_OPTS, self._marker, f"-Dhadoop.log.dir={logs}", f"-Dhadoop.home.dir={self._jars}",
                f"-Dlog4j.configuration={(self.conf_dir / 'log4j.properties').as_uri()}",
                "-cp", os.pathsep.join([str(self.conf_dir), str(self.work_dir / "web"), str(self._jars / "*")]),
                main, *args]

    def _format(self) -> None:
        """Format the NameNode's name dir, on the first start only."""
        if (self.work_dir / "name" / "current" / "VERSION").is_file():
            return
        command = self._java_command(HdfsDaemon.NAMENODE.value, "-format", "-force", "-nonInteractive")
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            raise HdfsProvisioningError(f"could not run the NameNode's -format: {e}") from e
        log = self.log_path(HdfsDaemon.NAMENODE)
        with log.open("a") as out:
            out.write(done.stdout + done.stderr)
        if done.returncode != 0:
            raise HdfsProvisioningError(f"formatting the NameNode in {self.work_dir} failed (exit {done.returncode});"
                                        f" see {log}\n{tail(done.stdout + done.stderr)}")

    def _launch(self, missing: list[Daemon], detached: bool) -> None:
        """Write the config and launch the missing daemons; the DataNode boots while the NameNode formats and
        starts (it retries until the NameNode answers)."""
        self._write_config()
        if self._daemons[HdfsDaemon.DATANODE] in missing:
            self._launch_one(HdfsDaemon.DATANODE, detached)
        self._format()
        if self._daemons[HdfsDaemon.NAMENODE] in missing:
            self._launch_one(HdfsDaemon.NAMENODE, detached)

    def _launch_one(self, daemon: HdfsDaemon, detached: bool) -> None:
        """Run ``daemon`` with its output appended to its log and record its pid."""
        self._daemons[daemon].launch(self._java_command(daemon.value, *daemon.arguments), detached,
                                     f"starting the {daemon.file_stem} of Hadoop {HADOOP_VERSION}")

    def _health(self, timeout: float) -> str | None:
        """Ready once a probe file can be written through WebHDFS (NameNode up, DataNode registered, safe mode off)."""
        try:
            self._probe_write(timeout)
        except OSError as e:  # URLError and HTTPError are OSErrors
            reason = _remote_error(e) if isinstance(e, urllib.error.HTTPError) else str(e)
            return f"no write through WebHDFS on {self.http_address}: {reason}"
        return None

    def _probe_write(self, timeout: float) -> None:
        """Create, check and delete a small file through WebHDFS (both steps of CREATE); raises OSError if not ready."""
        path = f"/.oncelog-probe-{uuid.uuid4().hex}"
        base = f"http://{self.http_address}/webhdfs/v1{path}"
        create = urllib.request.Request(f"{base}?op=CREATE&overwrite=true&noredirect=true", method="PUT")
        with urllib.request.urlopen(create, timeout=timeout) as answer:
            location = json.load(answer)["Location"]
        if urllib.parse.urlsplit(location).hostname != "127.0.0.1":
            raise HdfsProvisioningError(f"WebHDFS redirects writes to {location}, not to 127.0.0.1")
        with urllib.request.urlopen(urllib.request.Request(location, data=_PROBE_BYTES, method="PUT"),
                                    timeout=timeout):
            pass
        try:
            with urllib.request.urlopen(f"{base}?op=GETFILESTATUS", timeout=timeout) as answer:
                if json.load(answer)["FileStatus"]["length"] != len(_PROBE_BYTES):
                    raise OSError("the probe file written through WebHDFS has the wrong length")
        finally:
            with urllib.request.urlopen(urllib.request.Request(f"{base}?op=DELETE", method="DELETE"),
                                        timeout=timeout):
                pass

    def kill(self, daemon: HdfsDaemon | None = None) -> None:
        """Kill ``daemon`` (default: both) at once with SIGKILL, as a crash would; ``start()`` recovers the data."""
        self._kill(self.daemons if daemon is None else [self._daemons[daemon]])


def up(state_dir: Path, port: int | None = None, http_port: int | None = None, timeout: float = 90) -> LocalHdfs:
    """Start a detached HDFS in ``state_dir`` that outlives this process, or find the running one."""
    if (running := LocalHdfs.running_in(state_dir)) is not None:
        return running
    return LocalHdfs(state_dir, port=port, http_port=http_port).start_detached(timeout)


def down(state_dir: Path, timeout: float = 30) -> bool:
    """Stop the HDFS ``up`` started in ``state_dir`` (its data stays); False if none was running."""
    return stop_running(LocalHdfs.found_in(state_dir), timeout)


def status(state_dir: Path) -> LocalHdfs | None:
    """The HDFS running in ``state_dir`` (both daemons alive), or None if none runs there."""
    return LocalHdfs.running_in(state_dir)
