"""One server process on this machine: launched as our child or detached, known by its pid file, logging to a file.

A child lives in a session of its own and is reaped if its owner forgets it; a detached one is started through
`sh` in a session of its own, so that it is reparented to init and outlives the command (`oncelog kafka up`). Either
way its pid is written to a file, and a pid read back counts only if that process still runs this server (`owns`
checks its command line): a stale pid file never makes us signal a stranger. A daemon made with ``session=True`` (a
Spark worker) is signalled with every process of its session: its executors and their Python workers too (Linux).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path

from localservers.tools import tail

DETACH = 'log="$1"; shift; "$@" </dev/null >>"$log" 2>&1 & echo $!'


class Daemon:
    """A named server process with its pid file, its log and the loopback ports it listens on."""

    def __init__(self, name: str, pid_file: Path, log_path: Path, owns: Callable[[int], bool],
                 error: type[Exception], ports: tuple[int, ...] = (), session: bool = False) -> None:
        self.name = name
        self.pid_file = pid_file
        self.log_path = log_path
        self.ports = ports
        self.session = session
        self._owns = owns
        self._error = error
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes]], Daemon] | None = None
        self._log_offset = 0

    def pid(self) -> int | None:
        """The pid of the running server (whichever process started it), or None."""
        if self._proc is not None:
            return self._proc.pid if self._proc.poll() is None else None
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if self._owns(pid) else None

    def is_running(self) -> bool:
        return self.pid() is not None

    def members(self) -> set[int]:
        """The live processes that make this server: its own, and for a session daemon its session's others."""
        own = {pid} if (pid := self.pid()) is not None else set()
        if self.session and self._proc is not None:
            return own | session_pids(self._proc.pid)  # a child's session id is its pid (start_new_session)
        return own

    def launch(self, command: list[str], detached: bool, banner: str, env: Mapping[str, str] | None = None,
               cwd: Path | None = None) -> int:
        """Run the server with its output appended to the log after a `banner` line, record and return its pid."""
        self._begin_log(banner)
        environment = dict(env) if env is not None else None
        if detached:
            try:
                done = subprocess.run(["/bin/sh", "-c", DETACH, "sh", str(self.log_path), *command], env=environment,
                                      cwd=cwd, capture_output=True, text=True, start_new_session=True, timeout=30)
            except (OSError, subprocess.SubprocessError) as e:
                raise self._error(f"could not launch the {self.name}: {e}") from e
            if not done.stdout.strip().isdigit():
                raise self._error(f"could not launch the {self.name}: {done.stderr.strip()}")
            pid = int(done.stdout)
        else:
            with self.log_path.open("ab") as log:
                try:
                    self._proc = subprocess.Popen(command, env=environment, cwd=cwd, stdin=subprocess.DEVNULL,
                                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                except OSError as e:
                    raise self._error(f"could not launch the {self.name}: {e}") from e
            # Never leak a server when the owner forgets to stop it (garbage collection or interpreter exit).
            self._finalizer = weakref.finalize(self, reap, self._proc)
            pid = self._proc.pid
        self.pid_file.write_text(f"{pid}\n")
        return pid

    def _begin_log(self, banner: str) -> None:
        """Mark where this launch's lines start in the log (log_tail shows only those)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as log:
            self._log_offset = log.tell()
            log.write(f"---- oncelog: {banner} at {time.strftime('%Y-%m-%d %H:%M:%S')}\n")

    def log_tail(self, lines: int = 40) -> str:
        """The last lines the server logged since its latest launch."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_offset)
                return tail(log.read().decode(errors="replace"), lines)
        except OSError as e:
            return f"(no {self.name} log: {e})"

    def send(self, sig: signal.Signals) -> None:
        """Send a signal to the server (a session daemon: to every process of its session), if it runs."""
        for pid in self.members():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
            except PermissionError as e:
                raise self._error(f"not allowed to signal the {self.name} (pid {pid}): {e}") from e

    def wait_gone(self, deadline: float, resend: signal.Signals | None = None) -> bool:
        """Wait until the server is gone, sending `resend` to what is left on each look; False if it still runs at
        `deadline` (time.monotonic())."""
        if self._proc is not None:
            try:
                self._proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                return False
        while self.members():
            if time.monotonic() > deadline:
                return False
            if resend is not None:
                self.send(resend)  # a process forked just before the last signal went out
            time.sleep(0.05)
        return True

    def forget(self) -> None:
        """Drop the process handle, its finalizer and the pid file once the server is gone."""
        if self._finalizer is not None:
            self._finalizer.detach()
        self._proc, self._finalizer = None, None
        self.pid_file.unlink(missing_ok=True)


def signal_and_wait(daemons: list[Daemon], sig: signal.Signals, timeout: float) -> bool:
    """Send `sig` to every daemon and wait until all are gone; False if one still runs after `timeout`."""
    for daemon in daemons:
        daemon.send(sig)
    deadline = time.monotonic() + timeout
    resend = sig if sig is signal.SIGKILL else None
    return all(daemon.wait_gone(deadline, resend) for daemon in daemons)


def runs_command(pid: int, *needles: bytes) -> bool:
    """Whether pid is a live process whose command line holds every needle (not a zombie, not a stranger)."""
    if not Path("/proc/self").is_dir():  # macOS / BSD: no /proc, ask ps for the command line
        command = subprocess.run(["ps", "-o", "command=", "-p", str(pid)], capture_output=True).stdout
        return all(needle in command for needle in needles)
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")  # empty for a zombie
    except OSError:
        return False
    return all(any(needle in arg for arg in args) for needle in needles)


def session_pids(session: int) -> set[int]:
    """The live (not zombie) processes of a session, from /proc (Linux; elsewhere none)."""
    pids: set[int] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[3]) == session and fields[0] not in {"Z", "X"}:
            pids.add(int(stat.parent.name))
    return pids


def reap(proc: subprocess.Popen[bytes]) -> None:
    """Terminate a server child still running when its owner goes away (SIGKILL after 10 s)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
