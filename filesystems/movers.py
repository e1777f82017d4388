"""Folder moves made a batch at a time, possibly by another process while the caller goes on with other work.

A commit on local disk is one Python thread under one GIL: about a third of its time is the folder moves' system
calls and content checks. `ProcessMover` makes them in a child process (the second core) while the committer records
the sequences before; `InlineMover` makes them at once through any store without a mover of its own. Both make a move
only before its lease's deadline (`time.monotonic`, one clock for every process of a Linux machine): the committer's
fence check answered for that long, so a move made later is not tried (`UNKNOWN`).

The child `ProcessMover` starts is `filesystems.mover_child`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum, auto
from multiprocessing.connection import Connection
from pathlib import Path

from filesystems.base import FileSystem, FileSystemError, FolderMove

READY = "ready"
"""What the child sends first, once it has started."""


class Moved(StrEnum):
    """What became of one move of a batch."""

    YES = "moved"
    NO = "declined"
    """Nothing moved: the source does not hold exactly the move's files, or something is at the destination."""
    UNKNOWN = "unknown"
    """Not tried (the lease ran out first), or the mover was lost meanwhile: the caller makes it itself."""
    FAILED = "failed"
    """The move raised `error` (it may have taken effect, as when the caller's own call raises)."""


@dataclass(frozen=True)
class MoveOutcome:
    """What became of one move, and what it raised if it failed."""

    moved: Moved
    error: OSError | FileSystemError | None = None
    """What a FAILED move raised (None for any other)."""


NOT_TRIED = MoveOutcome(Moved.UNKNOWN)


class _LeaseSpent(Exception):
    """The lease's deadline passed before the move's rename: it must not be made."""


def move_within(fs: FileSystem, move: FolderMove, deadline: float) -> MoveOutcome:
    """Make one move through `fs` if its lease still holds when its checks have passed."""

    def before_move() -> None:
        if time.monotonic() > deadline:
            raise _LeaseSpent

    try:
        return MoveOutcome(Moved.YES if fs.move_folder(move, before_move) else Moved.NO)
    except _LeaseSpent:
        return NOT_TRIED
    except (OSError, FileSystemError) as e:
        return MoveOutcome(Moved.FAILED, e)


class MoveBatch(ABC):
    """A batch of moves under way."""

    @abstractmethod
    def outcomes(self) -> list[MoveOutcome]:
        """Each move's outcome, in the batch's order (waits for them)."""


class FolderMover(ABC):
    """Makes batches of folder moves (`FileSystem.move_folder`)."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether batches started now will be made (a child process runs). Never waits: a child still starting is
        not ready yet, and its caller makes those moves itself meanwhile."""

    @abstractmethod
    def start(self, moves: Sequence[FolderMove], deadline: float) -> MoveBatch:
        """Start making `moves`, in order, each only before `deadline` (`time.monotonic`)."""

    def close(self) -> None:
        """Stop once the batches under way are made."""


@dataclass
class MadeBatch(MoveBatch):
    """A batch made at once: its outcomes known."""

    made: list[MoveOutcome]

    def outcomes(self) -> list[MoveOutcome]:
        return self.made


class InlineMover(FolderMover):
    """Makes each batch at once, in the caller's thread, through the given file system."""

    def __init__(self, fs: FileSystem) -> None:
        self.fs = fs

    def ready(self) -> bool:
        return True

    def start(self, moves: Sequence[FolderMove], deadline: float) -> MoveBatch:
        return MadeBatch([move_within(self.fs, move, deadline) for move in moves])


class _ChildState(Enum):
    """Where a ProcessMover's child is: batches are sent to it only while it runs."""

    STARTING = auto()
    RUNNING = auto()
    LOST = auto()
    """Never started, died, or its pipe broke: its batches' outcomes are UNKNOWN."""


class ProcessMover(FolderMover):
    """Makes batches of moves on local disk in a child process, in the order started. A child that dies (or never
    starts) leaves its batches' outcomes UNKNOWN, and this mover not ready again; the child ends when this process
    closes it or dies (its requests pipe closes)."""

    def __init__(self) -> None:
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        source_root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source_root, os.environ.get("PYTHONPATH")]))}
        try:
            self._child: subprocess.Popen[bytes] | None = subprocess.Popen(
                [sys.executable, "-m", "filesystems.mover_child", str(requests_read), str(replies_write)],
                pass_fds=(requests_read, replies_write), stdin=subprocess.DEVNULL, env=env)
        except OSError:
            self._child = None
        finally:
            os.close(requests_read)
            os.close(replies_write)
        self._requests = Connection(requests_write, readable=False)
        self._replies = Connection(replies_read, writable=False)
        self._child_state = _ChildState.LOST if self._child is None else _ChildState.STARTING
        self._under_way: deque[_ChildBatch] = deque()

    def ready(self) -> bool:
        """Whether the child has said it started (100–150 ms after this mover was made, here) and has not been lost."""
        if self._child_state is _ChildState.STARTING:
            try:
                if self._replies.poll(0):
                    self._child_state = _ChildState.RUNNING if self._replies.recv() == READY else _ChildState.LOST
            except (EOFError, OSError):
                self._child_state = _ChildState.LOST
        return self._child_state is _ChildState.RUNNING

    def start(self, moves: Sequence[FolderMove], deadline: float) -> MoveBatch:
        batch = _ChildBatch(self, len(moves))
        if not self.ready():
            batch.made = [NOT_TRIED] * len(moves)
            return batch
        try:
            self._requests.send((deadline, list(moves)))
        except OSError:
            self._child_state = _ChildState.LOST
            batch.made = [NOT_TRIED] * len(moves)
            return batch
        self._under_way.append(batch)
        return batch

    def _receive_until(self, batch: _ChildBatch) -> None:
        """Take the child's replies, in order, until `batch` has its outcomes."""
        while batch.made is None:
            oldest = self._under_way.popleft()
            try:
                lost = self._child_state is _ChildState.LOST
                oldest.made = [NOT_TRIED] * oldest.size if lost else self._replies.recv()
            except (EOFError, OSError):
                self._child_state = _ChildState.LOST
                oldest.made = [NOT_TRIED] * oldest.size

    def close(self) -> None:
        if self._under_way:
            self._receive_until(self._under_way[-1])
        self._requests.close()
        self._replies.close()
        if self._child is not None:
            try:
                self._child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._child.kill()
                self._child.wait()


@dataclass
class _ChildBatch(MoveBatch):
    mover: ProcessMover
    size: int
    made: list[MoveOutcome] | None = None

    def outcomes(self) -> list[MoveOutcome]:
        if self.made is None:
            self.mover._receive_until(self)
        assert self.made is not None
        return self.made
