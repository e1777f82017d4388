"""What a run shows while it runs: its phase, tasks done / total with records so far, datasets committed / total.

The launcher reports to a `RunObserver` passed to it (default: `SILENT`); `oncelog run` passes a Rich display when
stderr is a terminal, one plain line per phase otherwise. `quiet_native_output` keeps the output of the JVM and of
native libraries (Spark's log4j, librdkafka) out of the user's terminal: it goes to a log file the summary names.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol, TextIO

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from projections.views import Phase

LOGS_DIR = Path(".oncelog/logs")
"""Where `oncelog run` keeps each run's Spark / librdkafka output (relative to where it is started)."""



PHASE_TEXT = {Phase.START: "starting Spark", Phase.LOCK: "taking the job lock",
              Phase.RECOVER: "finishing earlier runs' unfinished commits", Phase.PLAN: "planning work units",
              Phase.TASKS: "running {total} task(s)", Phase.COMMIT: "publishing {total} dataset(s)",
              Phase.CLEANUP: "cleaning up"}
"""What each phase does, as shown (`{total}`: its tasks or datasets)."""


class RunObserver(Protocol):
    """Told what a run is doing; called from the launcher's thread, and from a Spark polling thread for tasks."""

    def phase(self, phase: Phase, total: int | None = None) -> None:
        """A phase begins; `total` counts its tasks or datasets where it has some."""

    def tasks_done(self, done: int, records: int) -> None:
        """Tasks finished so far (succeeded or failed for good), and the records they wrote."""

    def datasets_done(self, done: int) -> None:
        """Datasets whose commit sequence has ended so far."""


@dataclass(frozen=True)
class Silent:
    """The observer that shows nothing (library use, tests, the scheduler)."""

    def phase(self, phase: Phase, total: int | None = None) -> None:
        """Nothing to show."""

    def tasks_done(self, done: int, records: int) -> None:
        """Nothing to show."""

    def datasets_done(self, done: int) -> None:
        """Nothing to show."""


SILENT = Silent()


@dataclass
class _Counts:
    """Where the run stands: the current phase and its counters."""

    phase: Phase | None = None
    total: int | None = None
    done: int = 0
    records: int = 0


@dataclass
class PlainProgress:
    """One line per phase on `stream` (never wrapped): its elapsed time, name and size, and how the previous counted
    phase (tasks, commit) ended — what a log collector or `grep` reads well."""

    stream: IO[str]
    label: str
    started: float = field(default_factory=time.monotonic)
    _now: _Counts = field(default_factory=_Counts)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def phase(self, phase: Phase, total: int | None = None) -> None:
        with self._lock:
            ended = self._ended()
            self._now = _Counts(phase, total)
            self._line(f"{phase.value} — {_text(phase, total)}" + (f" ({ended})" if ended else ""))

    def tasks_done(self, done: int, records: int) -> None:
        with self._lock:
            if self._now.phase is Phase.TASKS:
                self._now.done, self._now.records = done, records

    def datasets_done(self, done: int) -> None:
        with self._lock:
            if self._now.phase is Phase.COMMIT:
                self._now.done = done

    def finish(self) -> None:
        """The run is over: say how its last counted phase ended, if it has not been said."""
        with self._lock:
            ended = self._ended()
            if ended:
                self._line(f"ended ({ended})")
            self._now = _Counts()

    def _ended(self) -> str:
        """How the current phase ended, when it counts something."""
        now = self._now
        if now.phase is Phase.TASKS and now.total is not None:
            return f"tasks {now.done}/{now.total} done, {now.records:,} records written"
        if now.phase is Phase.COMMIT and now.total is not None:
            return f"datasets {now.done}/{now.total} committed"
        return ""

    def _line(self, text: str) -> None:
        self.stream.write(f"oncelog: {self.label} {time.monotonic() - self.started:6.1f}s {text}\n")
        self.stream.flush()


class RichProgress:
    """A live Rich display on a terminal: one row per phase, with a bar for tasks and for datasets."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(_Mark(), TextColumn("{task.description}"), _CountedBar(), _Count(),
                                 TextColumn("{task.fields[detail]}"), TimeElapsedColumn(), console=console)
        self._row: TaskID | None = None
        self._phase: Phase | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
        self.progress.stop()

    def phase(self, phase: Phase, total: int | None = None) -> None:
        with self._lock:
            self._close_row()
            self._phase = phase
            self._row = self.progress.add_task(f"{phase.value:<8} {_text(phase, total)}", total=total, detail="",
                                               done=False)

    def tasks_done(self, done: int, records: int) -> None:
        with self._lock:
            if self._phase is Phase.TASKS and self._row is not None:
                self.progress.update(self._row, completed=done, detail=f"{records:,} records written")

    def datasets_done(self, done: int) -> None:
        with self._lock:
            if self._phase is Phase.COMMIT and self._row is not None:
                self.progress.update(self._row, completed=done)

    def finish(self) -> None:
        """Stop the spinner of the last phase."""
        with self._lock:
            self._close_row()
            self._phase = None

    def _close_row(self) -> None:
        """Mark the current row over, keeping its count (a failed run's tasks may stay short of the total)."""
        if self._row is not None:
            self.progress.update(self._row, done=True)
            self.progress.stop_task(self._row)  # its elapsed time stops here
            self._row = None


class _Mark(SpinnerColumn):
    """A spinner while the phase lasts, a tick once it is over."""

    def render(self, task: Task) -> RenderableType:
        return Text("✓", style="green") if task.fields.get("done") else super().render(task)


class _CountedBar(ProgressColumn):
    """A bar for a phase that counts tasks or datasets; nothing for the others."""

    def __init__(self) -> None:
        super().__init__()
        self.bar = BarColumn()

    def render(self, task: Task) -> RenderableType:
        return Text("") if task.total is None else self.bar.render(task)


class _Count(ProgressColumn):
    """done/total for a phase that counts; nothing for the others."""

    def render(self, task: Task) -> RenderableType:
        return Text("" if task.total is None else f"{int(task.completed):,}/{int(task.total):,}")


def _text(phase: Phase, total: int | None) -> str:
    """What a phase does, with its size."""
    return PHASE_TEXT[phase].format(total="" if total is None else f"{total:,}")


@dataclass(frozen=True)
class NativeOutput:
    """Where a run's JVM and native-library output went: `file`, or the terminal (`file` None)."""

    file: Path | None
    user_stderr: TextIO
    """The stream the user sees (stderr as it was): progress and messages go there."""


@contextmanager
def quiet_native_output(log_file: Path | None) -> Iterator[NativeOutput]:
    """Send file descriptors 1 and 2 to `log_file` while the run lasts, so that Spark's JVM (started inside: it
    inherits them, and its Python workers after it), log4j and librdkafka write there, not on the terminal. Python's
    own sys.stdout / sys.stderr keep writing where they did (to duplicates of the original descriptors).

    With `log_file` None, or when the file cannot be created, nothing is redirected."""
    target = None if log_file is None else _open_log(log_file)
    if log_file is None or target is None:
        yield NativeOutput(None, sys.stderr)
        return
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    streams = {fd: _own_stream(stream, saved[fd]) for fd, stream in ((1, sys.stdout), (2, sys.stderr))}
    old = sys.stdout, sys.stderr
    try:
        for fd in (1, 2):
            old[fd - 1].flush()
            os.dup2(target, fd)
        sys.stdout, sys.stderr = streams[1], streams[2]
        yield NativeOutput(log_file, sys.stderr)
    finally:
        for fd, stream in streams.items():
            stream.flush()
            if stream is not old[fd - 1]:
                stream.close()
        sys.stdout, sys.stderr = old
        for fd in (1, 2):
            os.dup2(saved[fd], fd)
        for fd in (*saved.values(), target):
            os.close(fd)


def _open_log(path: Path) -> int | None:
    """A descriptor appending to `path` (its folder made); None, with a warning, when it cannot be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError as e:
        sys.stderr.write(f"warning: cannot write {path} ({e.strerror or e}): Spark's output stays on the terminal\n")
        return None


def _own_stream(stream: TextIO, saved: int) -> TextIO:
    """A stream writing to `saved` (a duplicate of the terminal's descriptor) when `stream` wrote to the
    descriptor being redirected; otherwise `stream` itself (e.g. a test runner's in-memory stream)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError, AttributeError):
        return stream
    if fd not in (1, 2):
        return stream
    return open(os.dup(saved), "w", encoding=getattr(stream, "encoding", None) or "utf-8",  # noqa: SIM115
                errors="backslashreplace", buffering=1, closefd=True)
