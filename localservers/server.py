"""One base for every local server (Kafka, HDFS, S3, a standalone Spark cluster): its daemons in a work dir, the
record of its ports, start and wait for health, stop, kill and the log tail; and the `up`/`down`/`status` helpers.

A subclass names itself (``what``, its error, its state file, its timeouts), lists its daemons, launches the missing
ones (``_launch``) and says whether it serves yet (``_health``); the base does the rest the same way for all. A
failed start kills what it launched and raises naming the daemon and its log, with the log's last lines.
"""

from __future__ import annotations

import json
import os
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar

from events.errors import OncelogError
from localservers.daemon import Daemon, signal_and_wait
from localservers.tools import port_is_free

POLL_S = 0.1
KILL_TIMEOUT_S = 10.0
T = TypeVar("T")
Health = Callable[[float], str | None]
"""Given how long one probe may take: None once ready, else why not yet (raise when waiting cannot help)."""


class LocalServer(ABC):
    """A server on 127.0.0.1 made of daemons living in ``work_dir``; data and ports survive restarts."""

    what: ClassVar[str]  # "Kafka broker": error messages say "the Kafka broker in <work dir> ..."
    error: ClassVar[type[OncelogError]]
    state_file: ClassVar[str] = "server.json"  # the record of ports (and keys) that `up`/`status` find it by
    start_timeout: float = 60.0
    stop_timeout: float = 30.0

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = Path(work_dir).expanduser().resolve()

    @property
    @abstractmethod
    def daemons(self) -> list[Daemon]:
        """Every process of this server, in start-up order."""

    @abstractmethod
    def _launch(self, missing: list[Daemon], detached: bool) -> None:
        """Write what the daemons need and launch the `missing` ones (detached: outliving this process)."""

    @abstractmethod
    def _health(self, timeout: float) -> str | None:
        """None once the server serves; else why not yet."""

    def _state(self) -> dict[str, Any] | None:
        """What the state file records (ports, ids, keys); None: this server keeps no record."""
        return None

    @classmethod
    def found_in(cls, state_dir: Path) -> Self | None:
        """The server an earlier start recorded in ``state_dir`` (running or not), or None; starts nothing."""
        return cls(state_dir) if (Path(state_dir).expanduser() / cls.state_file).is_file() else None

    @classmethod
    def running_in(cls, state_dir: Path) -> Self | None:
        """The server running in ``state_dir`` (all its daemons, whichever process started them), or None."""
        return found if (found := cls.found_in(state_dir)) is not None and found.is_running() else None

    @property
    def state_path(self) -> Path:
        return self.work_dir / self.state_file

    def _recorded_state(self, parse: Callable[[dict[str, Any]], T]) -> T | None:
        """The state an earlier start recorded, parsed; None if there is none."""
        try:
            return parse(json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise self.error(f"unreadable {self.what} state {self.state_path}: {e}") from e

    def _write_state(self) -> None:
        """Record the state, readable by the owner only (it may hold a secret key)."""
        if (state := self._state()) is None:
            return
        fd = os.open(self.state_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(state) + "\n")

    def is_running(self) -> bool:
        """Whether every daemon of this work dir is alive (not necessarily ready yet)."""
        return all(daemon.is_running() for daemon in self.daemons)

    def any_running(self) -> bool:
        return any(daemon.is_running() for daemon in self.daemons)

    def start(self, timeout: float | None = None) -> Self:
        """Start the daemons not running as child processes (own sessions) and wait until the server serves."""
        return self._start(self.start_timeout if timeout is None else timeout, detached=False)

    def start_detached(self, timeout: float | None = None) -> Self:
        """Start the missing daemons in sessions of their own that outlive this process, and wait until it serves."""
        return self._start(self.start_timeout if timeout is None else timeout, detached=True)

    def _start(self, timeout: float, detached: bool) -> Self:
        """Launch what does not run and wait until healthy; a failure kills what was launched."""
        if missing := self._to_launch():
            self.work_dir.mkdir(parents=True, exist_ok=True)
            try:
                self._launch(missing, detached)
                self._await(timeout, self._health, self.daemons)
            except BaseException:  # an interrupt too: leave nothing half-started behind
                self._kill(missing)
                raise
        return self

    def _to_launch(self) -> list[Daemon]:
        """The daemons not running, once sure they can start: no other settings run here, their ports are free."""
        missing = [daemon for daemon in self.daemons if not daemon.is_running()]
        if len(missing) < len(self.daemons) and self._recorded_state(dict) not in (None, self._state()):
            raise self.error(f"the {self.what} in {self.work_dir} already runs on other ports than asked (see "
                             f"{self.state_path}); stop it first")
        for port in (port for daemon in missing for port in daemon.ports):
            if not port_is_free(port):
                raise self.error(f"port {port} on 127.0.0.1 is already in use; cannot start the {self.what} in "
                                 f"{self.work_dir} (another {self.what}? choose another port)")
        return missing

    def _await(self, timeout: float, health: Health, watched: list[Daemon]) -> None:
        """Poll `health` until ready; a watched daemon exiting, or the timeout, raises naming its log."""
        deadline, reason = time.monotonic() + timeout, "no answer yet"
        while True:
            for daemon in watched:
                if not daemon.is_running():
                    raise self.error(f"the {daemon.name} in {self.work_dir} exited during start-up; see "
                                     f"{daemon.log_path}\n{daemon.log_tail()}")
            if (remaining := deadline - time.monotonic()) <= 0:
                logs = " and ".join(str(daemon.log_path) for daemon in watched)
                raise self.error(f"the {self.what} in {self.work_dir} was not ready within {timeout:.0f}s "
                                 f"({reason}); see {logs}\n{watched[0].log_tail()}")
            if (not_ready := health(min(10.0, max(0.5, remaining)))) is None:
                return
            reason = not_ready
            time.sleep(POLL_S)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines each daemon logged since its latest launch (headed by its log's path when several)."""
        if len(daemons := self.daemons) == 1:
            return daemons[0].log_tail(lines)
        return "\n".join(f"== {daemon.log_path}\n{daemon.log_tail(lines)}" for daemon in daemons)

    def stop(self, timeout: float | None = None) -> None:
        """Shut every daemon down (SIGTERM together), killing those still alive after ``timeout``."""
        if not signal_and_wait(self.daemons, signal.SIGTERM, self.stop_timeout if timeout is None else timeout):
            self.kill()
        for daemon in self.daemons:
            daemon.forget()

    def kill(self) -> None:
        """Kill every daemon at once (SIGKILL), as a crash would; ``start()`` recovers the data."""
        self._kill(self.daemons)

    def _kill(self, daemons: list[Daemon]) -> None:
        """SIGKILL `daemons` and wait until they are gone."""
        if not signal_and_wait(daemons, signal.SIGKILL, KILL_TIMEOUT_S):
            survivors = ", ".join(daemon.name for daemon in daemons if daemon.members())
            raise self.error(f"the {survivors} in {self.work_dir} survived SIGKILL")
        for daemon in daemons:
            daemon.forget()

    def restart(self, timeout: float | None = None) -> None:
        """Stop, then start again with the same data and ports."""
        self.stop()
        self.start(timeout)

    def __enter__(self) -> Self:
        """Start the server for a ``with`` block."""
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the server when the ``with`` block ends."""
        self.stop()


def stop_running(server: LocalServer | None, timeout: float | None = None) -> bool:
    """Stop the server (its data stays) if any of its daemons runs; False if none does."""
    if server is None or not server.any_running():
        return False
    server.stop(timeout)
    return True
