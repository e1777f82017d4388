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

import ipaddress
import os
import re
import secrets
import shutil
import string
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from localservers.daemon import Daemon, runs_command
from localservers.errors import S3ProvisioningError
from localservers.maven import build_once
from localservers.server import LocalServer, stop_running
from localservers.tools import default_cache_dir, free_port

VERSITYGW_VERSION = "v1.8.0"
VERSITYGW_MODULE = "github.com/versity/versitygw/cmd/versitygw"
DEFAULT_REGION = "us-east-1"

_STATE_FILE, _PID_FILE, _LOG_FILE = "server.json", "server.pid", "server.log"
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

    def prepare(staging: Path) -> tuple[list[str], dict[str, str]]:
        go = _go()
        ldflags = f"-s -w -X=main.Version={VERSITYGW_VERSION}"
        env = {**os.environ, "GOBIN": str(staging / "out"), "CGO_ENABLED": "0"}
        return [go, "install", "-trimpath", f"-ldflags={ldflags}", f"{VERSITYGW_MODULE}@{VERSITYGW_VERSION}"], env

    return build_once(version_dir / "bin", f"versitygw {VERSITYGW_VERSION} (`go install`, a few minutes)",
                      S3ProvisioningError, prepare, timeout_s=1200) / "versitygw"


def _new_state(port: int | None) -> S3State:
    """Fresh test credentials (an AWS-shaped access key id, a 40-character secret) and a port."""
    access_key = "OL" + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(18))
    return S3State(port or free_port("the S3 server", S3ProvisioningError), access_key, secrets.token_hex(20),
                   DEFAULT_REGION)


def _server_env(state: S3State) -> dict[str, str]:
    """Our environment without versitygw's own settings (which would change its behaviour), plus the root keys."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("VGW_", "ROOT_ACCESS_KEY", "ROOT_SECRET"))}
    # Through the environment, not argv, so that the secret does not show in `ps`.
    return {**env, "ROOT_ACCESS_KEY_ID": state.access_key, "ROOT_SECRET_ACCESS_KEY": state.secret_key}


class LocalS3(LocalServer):
    """A versitygw S3 server on 127.0.0.1 serving the buckets in ``work_dir/data``; data, port and keys persist.

    Buckets are directories and objects files under ``data`` (metadata and checksums in extended attributes), so
    everything a client was told is stored survives a crash of the server process (SIGKILL), not a power loss:
    versitygw does not fsync.
    """

    what = "S3 server"
    error = S3ProvisioningError
    state_file = _STATE_FILE
    start_timeout, stop_timeout = 30.0, 15.0

    def __init__(self, work_dir: Path, port: int | None = None, binary: Path | None = None) -> None:
        """Describe a server in ``work_dir``; port and credentials not given are those of a previous start, else new."""
        super().__init__(work_dir)
        state = self._recorded_state(_parse_state) or _new_state(port)
        self._settings = S3State(port or state.port, state.access_key, state.secret_key, state.region)
        self._binary = binary
        self.daemon = Daemon("S3 server", self.work_dir / _PID_FILE, self.log_path, self._runs_ours,
                             S3ProvisioningError, (self.port,))

    @property
    def daemons(self) -> list[Daemon]:
        return [self.daemon]

    def _runs_ours(self, pid: int) -> bool:
        """Whether pid is a live versitygw serving this work dir's data."""
        return runs_command(pid, b"versitygw", os.fsencode(self.data_dir))

    @property
    def port(self) -> int:
        """The loopback port the server listens on."""
        return self._settings.port

    @property
    def endpoint_url(self) -> str:
        """The endpoint for clients: ``http://127.0.0.1:<port>`` (path-style addressing)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def access_key(self) -> str:
        """The root access key id, generated at the first start and kept in the work dir."""
        return self._settings.access_key

    @property
    def secret_key(self) -> str:
        """The root secret access key, generated at the first start and kept in the work dir."""
        return self._settings.secret_key

    @property
    def region(self) -> str:
        """The region the server signs for."""
        return self._settings.region

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
        import boto3  # 0.1 s to import: every `oncelog` command loads this module, few make a client
        from botocore.config import Config

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

    def _state(self) -> dict[str, Any]:
        """Port and credentials (the state file is readable by the owner only: it holds the secret key)."""
        return asdict(self._settings)

    def pid(self) -> int | None:
        """The pid of this work dir's running server (whichever process started it), or None."""
        return self.daemon.pid()

    def _launch(self, missing: list[Daemon], detached: bool) -> None:
        """Build versitygw once, record port and keys, and launch it (the keys in its environment)."""
        self._binary = self._binary or ensure_server()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_state()
        command = [str(self._binary), "--port", f"127.0.0.1:{self.port}", "--region", self.region, "--quiet",
                   "posix", str(self.data_dir)]
        self.daemon.launch(command, detached, f"starting versitygw {VERSITYGW_VERSION}", _server_env(self._settings))

    @cached_property
    def _probe_client(self) -> Any:
        return self.client(timeout=1, attempts=1)

    def _health(self, timeout: float) -> str | None:
        """Ready once a signed ListBuckets succeeds: the port answers and our keys are accepted."""
        try:
            self._probe_client.list_buckets()
        except ClientError as e:  # the server answers but refuses: waiting will not help
            raise S3ProvisioningError(f"the S3 server on {self.endpoint_url} refused our keys: {e}; "
                                      f"see {self.log_path}") from e
        except BotoCoreError as e:
            return f"no answer on {self.endpoint_url}: {e}"
        return None


BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
BUCKET_RULE = ("3 to 63 characters: lowercase letters, digits, dots and hyphens, beginning and ending with a letter "
               "or digit, no two dots in a row, not an IP address")
"""S3's bucket naming rule (general purpose buckets), as checked and as told."""


def check_bucket_name(name: str) -> None:
    """S3ProvisioningError naming the rule when `name` is no valid bucket name (checked before any server starts)."""
    valid = bool(BUCKET_NAME.match(name)) and ".." not in name
    try:
        ipaddress.ip_address(name)
        valid = False
    except ValueError:
        pass
    if not valid:
        raise S3ProvisioningError(f"--bucket {name!r} is not a valid S3 bucket name: {BUCKET_RULE}")


def _parse_state(recorded: dict[str, Any]) -> S3State:
    return S3State(int(recorded["port"]), str(recorded["access_key"]), str(recorded["secret_key"]),
                   str(recorded["region"]))


def up(state_dir: Path, port: int | None = None, timeout: float = 30) -> LocalS3:
    """Start a detached server in ``state_dir`` that outlives this process, or find the running one."""
    return LocalS3.running_in(state_dir) or LocalS3(state_dir, port=port).start_detached(timeout)


def down(state_dir: Path, timeout: float = 15) -> bool:
    """Stop the server ``up`` started in ``state_dir`` (its data stays); False if none was running."""
    return stop_running(LocalS3.found_in(state_dir), timeout)


def status(state_dir: Path) -> LocalS3 | None:
    """The server running in ``state_dir``, or None if none runs there."""
    return LocalS3.running_in(state_dir)
