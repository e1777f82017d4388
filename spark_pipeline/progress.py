"""What a run shows while it runs: its phase, tasks done / total with records so far, datasets committed / total,
and each failed attempt the moment it is recorded.

The launcher reports to a `RunObserver` passed to it (default: `SILENT`); `oncelog run` passes a Rich display when
stderr is a terminal, one plain line per phase otherwise. Failed attempts are recorded where the tasks run (on Spark's
executors for the records engine): `RunWatch` follows the run's events in the log while it runs and tells the display
of each (`FailedAttempt`), and keeps the run's start and end as the log records them, so that the summary's duration
is the one `oncelog runs` shows. `quiet_native_output` keeps the output of the JVM and of native libraries (Spark's
log4j, librdkafka) out of the user's terminal: it goes to a log file the summary names.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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

from events.errors import OncelogError
from events.job import JobRunCancelled, JobRunCommitted, JobRunFailed, JobRunStarted
from events.keys import partition_for
from events.log import EventLog
from events.task import TaskFailed
from projections.views import Phase

LOGS_DIR = Path(".oncelog/logs")
"""Where `oncelog run` keeps each run's Spark / librdkafka output (relative to where it is started)."""
WATCH_POLL_S = 0.5
"""How often a run's watch reads the log for the run's new events."""

log = logging.getLogger(__name__)

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

    def attempt_failed(self, failed: FailedAttempt) -> None:
        """A failed attempt, on a line of its own at once."""
        with self._lock:
            self._line(failed.text())

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
            return f"tasks {now.done:,}/{now.total:,} done, {now.records:,} records written"
        if now.phase is Phase.COMMIT and now.total is not None:
            return f"datasets {now.done:,}/{now.total:,} committed"
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

    def attempt_failed(self, failed: FailedAttempt) -> None:
        """A failed attempt, printed above the live rows at once."""
        self.progress.console.print(Text.assemble(("✗ ", "red"), failed.text()), highlight=False)

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


@dataclass(frozen=True)
class FailedAttempt:
    """A failed attempt, as shown while the run runs: where, its root cause's first line, and what follows."""

    task_id: str
    attempt: int
    cause: str
    work_unit: str = ""
    dataset: str = ""
    retriable: bool = True
    next_attempt: int = 0
    next_at: datetime | None = None

    @classmethod
    def of(cls, event: TaskFailed) -> FailedAttempt:
        """What a TaskFailed says (its next attempt starts its pause after it was recorded)."""
        next_at = event.emitted_at + timedelta(seconds=event.retry_delay_s) if event.next_attempt else None
        return cls(event.task_id, event.attempt, event.cause_line, event.failed_work_unit, event.failed_dataset,
                   event.retriable, event.next_attempt, next_at)

    def text(self) -> str:
        """One line: `task … attempt N failed on <dataset> (work unit …): <cause>; <what follows>`."""
        where = f" on {self.dataset} (work unit {self.work_unit})" if self.work_unit else ""
        if self.next_attempt and self.next_at is not None:
            pause = (self.next_at - datetime.now(self.next_at.tzinfo)).total_seconds()
            after = (f"attempt {self.next_attempt} at {self.next_at:%H:%M:%S} UTC"
                     + (f" (in {pause:.0f}s)" if pause >= 1 else ""))
        elif not self.retriable:
            after = "not retried: no retry can fix this"
        else:
            after = "no attempts left"
        return f"task {self.task_id} attempt {self.attempt} failed{where}: {self.cause}; {after}"


class RunWatch:
    """Follows one run's events in its log while it runs (a thread and a log connection of its own): tells
    `failed` of each failed attempt as it is recorded, and keeps the run's start and end as the log records them.

    Reading trouble never fails the run: the watch tries again at its next poll (the run's own reads and appends
    say what is wrong with the log)."""

    def __init__(self, open_log: Callable[[], EventLog], job: str, run_id: str,
                 failed: Callable[[FailedAttempt], None], poll_s: float = WATCH_POLL_S) -> None:
        self.open_log = open_log
        self.job = job
        self.run_id = run_id
        self.failed = failed
        self.poll_s = poll_s
        self.started_at: datetime | None = None
        self.ended_at: datetime | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log: EventLog | None = None
        self._from: dict[int, int] = {}
        self._reading = threading.Lock()

    def start(self) -> None:
        """Begin following from where the log ends now (call before the run records its start)."""
        if self._thread is not None:
            return
        try:
            self._log = self.open_log()
            partition = partition_for(self.job, self._log.partitions)
            self._from = {partition: self._log.end_offsets().get(partition, 0)}
        except OncelogError as e:
            log.warning("cannot follow run %s in its log: %s", self.run_id, e)
            self._close()
            return
        self._thread = threading.Thread(target=self._follow, daemon=True, name="oncelog-run-watch")
        self._thread.start()

    def stop(self) -> None:
        """Read what the run recorded up to now (its end), then stop following."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._read()
        self._close()

    @property
    def seconds(self) -> float | None:
        """How long the run took as the log records it (JobRunStarted to its end), as `oncelog runs` shows it."""
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()

    def catch_up(self) -> None:
        """Tell what the run recorded up to now (before the display moves to its next phase)."""
        if self._thread is not None:
            self._read()

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._read()

    def _read(self) -> None:
        """The run's events appended since the last read (one reader at a time: the thread, or a catch-up)."""
        with self._reading:
            self._read_new()

    def _read_new(self) -> None:
        if self._log is None:
            return
        try:
            (partition, position), = self._from.items()
            end = self._log.end_offsets().get(partition, 0)
            if end <= position:
                return
            for logged in self._log.read({partition: position}, {partition: end}, on_error=_skip):
                self._seen(logged.event)
            self._from = {partition: end}
        except OncelogError as e:
            log.warning("reading run %s in its log: %s (tried again)", self.run_id, e)

    def _seen(self, event: object) -> None:
        if getattr(event, "run_id", None) != self.run_id or getattr(event, "job", None) != self.job:
            return
        if isinstance(event, JobRunStarted) and self.started_at is None:
            self.started_at = event.emitted_at
        elif isinstance(event, (JobRunCommitted, JobRunFailed, JobRunCancelled)) and self.ended_at is None:
            self.ended_at = event.emitted_at
        elif isinstance(event, TaskFailed) and event.part == 0:
            self.failed(FailedAttempt.of(event))

    def _close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _skip(error: OncelogError) -> None:
    """Records of other runs that cannot be read are not the watch's concern (the run's own fold is strict)."""


@dataclass
class Watched:
    """An observer passing everything to `inner`, starting `watch` when the run takes its lock (its log exists)."""

    inner: RunObserver
    watch: RunWatch

    def phase(self, phase: Phase, total: int | None = None) -> None:
        if phase is Phase.LOCK:
            self.watch.start()
        elif phase in (Phase.COMMIT, Phase.CLEANUP):
            self.watch.catch_up()  # the tasks' last failed attempts shown before the phase that follows them
        self.inner.phase(phase, total)

    def tasks_done(self, done: int, records: int) -> None:
        self.inner.tasks_done(done, records)

    def datasets_done(self, done: int) -> None:
        self.inner.datasets_done(done)


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
        with _pyspark_loggers_to(target):
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


PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""PySpark's Python loggers that write a JSON line for each SQL or DataFrame analysis error to the stderr they find
when first used: inside quiet_native_output that is the user's terminal (sys.stderr), not the log file."""


@contextmanager
def _pyspark_loggers_to(target: int) -> Iterator[None]:
    """PySpark's query-context loggers (PYSPARK_LOGGERS) write to the descriptor `target` (the log file) while the
    block lasts; their own handlers are restored after."""
    from pyspark.logger import PySparkLogger  # PySpark's loggers: only where a run may import PySpark anyway

    stream = os.fdopen(os.dup(target), "w", buffering=1, encoding="utf-8", errors="replace")
    kept: list[tuple[logging.Logger, list[logging.Handler]]] = []
    try:
        for name in PYSPARK_LOGGERS:
            pyspark_logger: logging.Logger = PySparkLogger.getLogger(name)
            kept.append((pyspark_logger, list(pyspark_logger.handlers)))
            for handler in list(pyspark_logger.handlers):
                pyspark_logger.removeHandler(handler)
            pyspark_logger.addHandler(logging.StreamHandler(stream))
        yield
    finally:
        for logger, handlers in kept:
            for handler in list(logger.handlers):
                logger.removeHandler(handler)
            for handler in handlers:
                logging.Logger.addHandler(logger, handler)  # as it was (PySparkLogger's own sets a JSON format)
        stream.close()


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
