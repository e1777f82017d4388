"""A real S3-compatible object store (Versity S3 Gateway, posix backend) on loopback, built from the Go module proxy.

Why: publishing to S3 has no rename (a copy, a check, a delete), and only a real server shows what a copy keeps
(metadata, ETag, checksums) and that data is on disk after a crash; an in-memory imitation of AWS shows neither.
versitygw stores each bucket as a directory and each object as a file (metadata in extended attributes), and
implements multipart uploads, server-side copy and the SHA-256 additional checksums. :func:`ensure_server` builds
the pinned version once into a cache (``go install``, Go 1.25+); :class:`LocalS3` runs it in a work dir with test
credentials generated at its first start and kept there; :func:`up`, :func:`down` and :func:`status` manage a
detached server that outlives the command (``oncelog s3 up``).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import string
import subprocess
import tempfile
import time
import weakref
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from rich.console import Console

from events.errors import KafkaProvisioningError, S3ProvisioningError
from events.kafka_local import _free_port, _port_is_free, _reap, _tail, default_cache_dir

VERSITYGW_VERSION = "v1.8.0"
VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"
DEFAULT_REGION = "us-east-1"

_MARKER, _STATE_FILE, _PID_FILE, _LOG_FILE = ".complete", "server.json", "server.pid", "server.log"
_GO_HINT = "install Go 1.25 or newer (e.g. `brew install go`, or Go's official release archive on Linux)"
_ALPHANUMERIC = string.ascii_uppercase + string.digits


@dataclass(frozen=True)
class S3State:
    """What a work dir's server keeps across restarts: its port and its credentials."""

    port: int
    access_key: str
    secret_key: str
    region: str


def _go() -> str:
    """The path of the ``go`` command, or an error saying what to install."""
    if (found := shutil.which("go")) is None:
        raise S3ProvisioningError(f"`go` was not found on PATH, needed once to build versitygw: {_GO_HINT}")
    return found


def ensure_server(cache_dir: Path | None = None) -> Path:
    """Build the pinned versitygw into the cache once (atomically) and return the binary's path."""
    version_dir = (cache_dir or default_cache_dir()) / f"versitygw-{VERSITYGW_VERSION}"
    binary = version_dir / "bin" / "versitygw"
    if (version_dir / "bin" / _MARKER).is_file():
        return binary
    go = _go()
    version_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=version_dir))
    try:
        ldflags = f"-s -w -X=main.Version={VERSITYGW_VERSION}"
        command = [go, "install", "-trimpath", f"-ldflags={ldflags}", f"{VERSITYGW_MODULE}@{VERSITYGW_VERSION}"]
        env = {**os.environ, "GOBIN": str(staging / "bin"), "CGO_ENABLED": "0"}
        started, console = time.monotonic(), Console(stderr=True)
        with console.status(f"Building versitygw {VERSITYGW_VERSION} with `go install` into {binary} "
                            "(first run only, a few minutes)"):
            try:
                done = subprocess.run(command, cwd=staging, env=env, capture_output=True, text=True, timeout=1200)
            except (OSError, subprocess.SubprocessError) as e:  # includes the 20-minute timeout
                raise S3ProvisioningError(f"running `go install` to build versitygw failed: {e}") from e
        if done.returncode != 0 or not (staging / "bin" / "versitygw").is_file():
            (log := version_dir / "build.log").write_text(done.stdout + done.stderr)
            raise S3ProvisioningError(
                f"`go install {VERSITYGW_MODULE}@{VERSITYGW_VERSION}` failed (exit {done.returncode}); "
                f"full output in {log}\n{_tail(done.stdout + done.stderr)}")
        (staging / "bin" / _MARKER).write_text(f"{VERSITYGW_VERSION}\n")  # written last: the build is complete
        if (version_dir / "bin").exists() and not (version_dir / "bin" / _MARKER).is_file():
            shutil.rmtree(version_dir / "bin")  # an incomplete copy from an interrupted run
        try:
            (staging / "bin").rename(version_dir / "bin")
        except OSError as e:
            if not (version_dir / "bin" / _MARKER).is_file():  # else a concurrent process finished first
                raise S3ProvisioningError(f"cannot move the versitygw binary into {version_dir / 'bin'}: {e}") from e
        console.print(f"versitygw {VERSITYGW_VERSION} ready in {binary} ({time.monotonic() - started:.1f}s)")
        return binary
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _new_port(avoid: int | None = None) -> int:
    """A free loopback port (kafka_local's choice of range), as an S3 error when there is none."""
    try:
        return _free_port(avoid)
    except KafkaProvisioningError as e:
        raise S3ProvisioningError("found no free port on 127.0.0.1 for the S3 server") from e


def _new_state(port: int | None) -> S3State:
    """Fresh test credentials (an AWS-shaped access key id, a 40-character secret) and a port."""
    access_key = "OL" + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(18))
    return S3State(port or _new_port(), access_key, secrets.token_hex(20), DEFAULT_REGION)


def _is_server_process(pid: int, data_dir: Path) -> bool:
    """Whether pid is a live versitygw serving ``data_dir`` (guards against stale pid files and zombies)."""
    if not Path("/proc/self").is_dir():  # macOS / BSD: no /proc, ask ps for the command line
        command = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True).stdout
        return b"versitygw" in command and os.fsencode(data_dir) in command
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")  # empty for a zombie
    except OSError:
        return False
    return bool(args) and args[0].endswith(b"versitygw") and os.fsencode(data_dir) in args


def _server_env(state: S3State) -> dict[str, str]:
    """Our environment without versitygw's own settings (which would change its behaviour), plus the root keys."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VGW_", "ROOT_ACCESS_KEY", "ROOT_SECRET"))}
    # Through the environment, not argv, so that the secret does not show in `ps`.
    return {**env, "ROOT_ACCESS_KEY_ID": state.access_key, "ROOT_SECRET_ACCESS_KEY": state.secret_key}


class LocalS3:
    """A versitygw S3 server on 127.0.0.1 serving the buckets in ``work_dir/data``; data, port and keys persist.

    Buckets are directories and objects files under ``data`` (metadata and checksums in extended attributes), so
    everything a client was told is stored survives a crash of the server process (SIGKILL), not a power loss:
    versitygw does not fsync.
    """

    def __init__(self, work_dir: Path, port: int | None = None, binary: Path | None = None) -> None:
        """Describe a server in ``work_dir``; port and credentials not given are those of a previous start, else new."""
        self.work_dir = Path(work_dir).expanduser().resolve()
        recorded = self._recorded()
        state = recorded or _new_state(port)
        self._state = S3State(port or state.port, state.access_key, state.secret_key, state.region)
        self._binary = binary
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes]], LocalS3] | None = None
        self._log_offset = 0

    @property
    def port(self) -> int:
        """The loopback port the server listens on."""
        return self._state.port

    @property
    def endpoint_url(self) -> str:
        """The endpoint for clients: ``http://127.0.0.1:<port>`` (path-style addressing)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_key(self) -> str:
        """The root access key id, generated at the first start and kept in the work dir."""
        return self._state.access_key

    @property
    def secret_key(self) -> str:
        """The root secret access key, generated at the first start and kept in the work dir."""
        return self._state.secret_key

    @property
    def region(self) -> str:
        """The region the server signs for."""
        return self._state.region

    @property
    def data_dir(self) -> Path:
        """The gateway's root: one directory per bucket, one file per object."""
        return self.work_dir / "data"

    @property
    def log_path(self) -> Path:
        """The server's console log: the place to diagnose failures."""
        return self.work_dir / _LOG_FILE

    def env(self) -> dict[str, str]:
        """The AWS environment variables that point a boto3 (or AWS SDK) client at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region}  # botocore reads the region from AWS_DEFAULT_REGION only

    def client(self, timeout: float = 10, attempts: int = 3) -> Any:
        """A boto3 S3 client for this server (path-style, this server's keys)."""
        config = Config(s3={"addressing_style": "path"}, connect_timeout=timeout, read_timeout=timeout,
                        retries={"max_attempts": attempts, "mode": "standard"})
        return boto3.session.Session().client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name=self.region, config=config)

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name``; one that this server already has is fine."""
        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in {"BucketAlreadyOwnedByYou", "BucketAlreadyExists"}:
                return
            raise S3ProvisioningError(f"creating bucket {name!r} on {self.endpoint_url} failed: {e}") from e
        except BotoCoreError as e:
            raise S3ProvisioningError(f"creating bucket {name!r} on {self.endpoint_url} failed: {e}") from e

    def _recorded(self) -> S3State | None:
        """The port and credentials recorded by an earlier start in this work dir, if any."""
        try:
            recorded = json.loads((self.work_dir / _STATE_FILE).read_text())
            return S3State(int(recorded["port"]), str(recorded["access_key"]), str(recorded["secret_key"]),
                           str(recorded["region"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise S3ProvisioningError(f"unreadable S3 server state {self.work_dir / _STATE_FILE}: {e}") from e

    def _write_state(self) -> None:
        """Record port and credentials (readable by the owner only: it holds the secret key)."""
        path = self.work_dir / _STATE_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as state:
            state.write(json.dumps(asdict(self._state)) + "\n")

    def pid(self) -> int | None:
        """The pid of this work dir's running server (whichever process started it), or None."""
        if self._proc is not None:
            return self._proc.pid if self._proc.poll() is None else None
        try:
            pid = int((self.work_dir / _PID_FILE).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _is_server_process(pid, self.data_dir) else None

    def is_running(self) -> bool:
        """Whether this work dir's server process is alive (not necessarily ready yet)."""
        return self.pid() is not None

    def start(self, timeout: float = 30) -> None:
        """Start the server as a child process (own process group) and wait until it answers signed requests."""
        self._start(timeout, detached=False)

    def _start(self, timeout: float, detached: bool) -> None:
        """Launch versitygw (detached: in its own session, not our child) and wait until it is ready."""
        if self.is_running():
            recorded = self._recorded()
            if recorded is None or recorded.port != self.port:
                raise S3ProvisioningError(f"an S3 server already runs in {self.work_dir} on port "
                                          f"{recorded.port if recorded else '?'}")
            return
        if not _port_is_free(self.port):
            raise S3ProvisioningError(f"port {self.port} on 127.0.0.1 is already in use; cannot start the S3 server "
                                      f"in {self.work_dir} (another server? choose another port)")
        self._binary = self._binary or ensure_server()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_state()
        command = [str(self._binary), "--port", f"127.0.0.1:{self.port}", "--region", self.region, "--quiet",
                   "posix", str(self.data_dir)]
        with self.log_path.open("a") as log:
            self._log_offset = log.tell()
            log.write(f"---- oncelog: starting versitygw {VERSITYGW_VERSION} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        try:
            pid = self._launch(command, detached)
            (self.work_dir / _PID_FILE).write_text(f"{pid}\n")
            self._wait_ready(timeout)
        except S3ProvisioningError:
            self.kill()
            raise

    def _launch(self, command: list[str], detached: bool) -> int:
        """Run the server with its output appended to the log; its pid."""
        env = _server_env(self._state)
        if detached:  # through sh, so the server is reparented to init and never becomes our zombie
            script = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'
            try:
                done = subprocess.run(["/bin/sh", "-c", script, "sh", str(self.log_path), *command], env=env,
                                      capture_output=True, text=True, start_new_session=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as e:
                raise S3ProvisioningError(f"could not launch the S3 server: {e}") from e
            if not done.stdout.strip().isdigit():
                raise S3ProvisioningError(f"could not launch the S3 server: {done.stderr.strip()}")
            return int(done.stdout)
        with self.log_path.open("ab") as log:
            try:
                self._proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, process_group=0)
            except OSError as e:
                raise S3ProvisioningError(f"could not launch the S3 server: {e}") from e
        # Never leak a server when the owner forgets to stop it (garbage collection or interpreter exit).
        self._finalizer = weakref.finalize(self, _reap, self._proc)
        return self._proc.pid

    def _wait_ready(self, timeout: float) -> None:
        """Poll until a signed ListBuckets succeeds: the port answers and our keys are accepted."""
        deadline = time.monotonic() + timeout
        client = self.client(timeout=1, attempts=1)
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            if not self.is_running():
                raise S3ProvisioningError(f"the S3 server in {self.work_dir} exited during start-up; "
                                          f"see {self.log_path}\n{self.log_tail()}")
            try:
                client.list_buckets()
                return
            except ClientError as e:  # the server answers but refuses: waiting will not help
                raise S3ProvisioningError(f"the S3 server on {self.endpoint_url} refused our keys: {e}; "
                                          f"see {self.log_path}") from e
            except BotoCoreError as e:
                last_error = str(e)
                time.sleep(0.05)
        raise S3ProvisioningError(f"the S3 server in {self.work_dir} did not answer on {self.endpoint_url} within "
                                  f"{timeout:.0f}s ({last_error}); see {self.log_path}\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the server logged since its latest launch."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return _tail(log.read().decode(errors="replace"), lines)
        except OSError as e:
            return f"(no server log: {e})"

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> bool:
        """Send ``sig`` to the server and wait until it is gone; False if it still runs after ``timeout``."""
        if (pid := self.pid()) is None:
            return True
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        except PermissionError as e:
            raise S3ProvisioningError(f"not allowed to signal the S3 server (pid {pid}): {e}") from e
        deadline = time.monotonic() + timeout
        if self._proc is not None:
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                return False
        while self.is_running():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _forget(self) -> None:
        """Drop the process handle, its finalizer and the pid file once the server is gone."""
        if self._finalizer is not None:
            self._finalizer.detach()
        self._proc, self._finalizer = None, None
        (self.work_dir / _PID_FILE).unlink(missing_ok=True)

    def stop(self, timeout: float = 15) -> None:
        """Shut the server down (SIGTERM), killing it if it is still alive after ``timeout``."""
        if not self._signal_and_wait(signal.SIGTERM, timeout):
            self.kill()
        self._forget()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would; ``start()`` serves the same data again."""
        if not self._signal_and_wait(signal.SIGKILL, 10):
            raise S3ProvisioningError(f"the S3 server in {self.work_dir} survived SIGKILL")
        self._forget()

    def restart(self, timeout: float = 30) -> None:
        """Stop, then start again with the same data, port and keys."""
        self.stop()
        self.start(timeout)

    def __enter__(self) -> LocalS3:
        """Start the server for a ``with`` block."""
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the server when the ``with`` block ends."""
        self.stop()


def _running_in(state_dir: Path) -> LocalS3 | None:
    """The server running in ``state_dir`` (whichever process started it), or None; creates nothing."""
    if not (Path(state_dir) / _STATE_FILE).is_file():
        return None
    server = LocalS3(state_dir)
    return server if server.is_running() else None


def up(state_dir: Path, port: int | None = None, timeout: float = 30) -> LocalS3:
    """Start a detached server in ``state_dir`` that outlives this process, or find the running one."""
    if (running := _running_in(state_dir)) is not None:
        return running
    server = LocalS3(state_dir, port=port)
    server._start(timeout, detached=True)
    return server


def down(state_dir: Path, timeout: float = 15) -> bool:
    """Stop the server ``up`` started in ``state_dir`` (its data stays); False if none was running."""
    if (server := _running_in(state_dir)) is None:
        return False
    server.stop(timeout)
    return True


def status(state_dir: Path) -> LocalS3 | None:
    """The server running in ``state_dir``, or None if none runs there."""
    return _running_in(state_dir)
