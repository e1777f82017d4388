"""Folder moves made ahead: while the committer's thread records sequence after sequence, the folder moves of the
next ones are made by another process (local disk: the second core), in batches.

A batch's moves are those of sequences whose plan is durable (it is recorded before any sequence commits), so making
them before the sequences ahead of them are recorded is what committing them in parallel would do: each move is
still made only if its source holds exactly its recorded files and its destination is free, and a move not yet
recorded when the process dies is found done by content on recovery. A batch shares one fence check (the sink's
`lease`): a move is made only within the time that check answers for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from events.errors import OncelogError
from filesystems.base import FileSystem, FolderMove
from filesystems.movers import FolderMover, InlineMover, MoveBatch, MoveOutcome
from spark_pipeline.commit.sink import EventSink

BATCH = 64
"""Sequences whose moves are made in one batch (one fence lease)."""


@dataclass(frozen=True)
class FolderGroup:
    """The renames of a sequence between two folders (from step `index` on), made as one move of the source folder."""

    index: int
    move: FolderMove
    indices: frozenset[int]


class MovesFirst(Protocol):
    """A sequence whose first step may be a folder move (`CommitSequence`)."""

    def first_move(self) -> FolderGroup | None: ...

    def moved_ahead(self, group: FolderGroup, outcome: MoveOutcome) -> None: ...


class MovesAhead:
    """Makes the folder moves of the batch after the one committing, and gives each sequence its move's outcome
    before it commits (`before`)."""

    def __init__(self, fs: FileSystem, sink: EventSink, sequence_at: Callable[[int], MovesFirst], count: int
                 ) -> None:
        self.fs = fs
        self.sink = sink
        self.sequence_at = sequence_at
        self.count = count
        self._mover: FolderMover | None = None
        self._batches: dict[int, tuple[list[tuple[int, FolderGroup]], MoveBatch] | None] = {}

    def before(self, index: int) -> None:
        """Sequence `index` is about to commit (called for each, in order): its batch's moves are made (waits for
        them), the next batch's begun."""
        batch = index // BATCH
        if index % BATCH == 0:
            for ahead in (batch, batch + 1):
                if ahead not in self._batches and ahead * BATCH < self.count:
                    self._batches[ahead] = self._start(ahead)
            self._finish(batch)

    def _start(self, batch: int) -> tuple[list[tuple[int, FolderGroup]], MoveBatch] | None:
        groups = [(index, group) for index in range(batch * BATCH, min((batch + 1) * BATCH, self.count))
                  if (group := self.sequence_at(index).first_move()) is not None]
        if not groups:
            return None
        mover = self._mover_for(groups[0][1].move.dst)
        if not mover.ready():  # before the lease: a child's start must not spend it
            return None
        try:
            deadline = self.sink.lease(len(groups))
        except (OncelogError, OSError):
            return None  # each sequence's own check before its move meets what this one met, in its place
        return groups, mover.start([group.move for _, group in groups], deadline)

    def _finish(self, batch: int) -> None:
        started = self._batches.pop(batch, None)
        if started is None:
            return
        groups, under_way = started
        for (index, group), outcome in zip(groups, under_way.outcomes(), strict=True):
            self.sequence_at(index).moved_ahead(group, outcome)

    def _mover_for(self, path: str) -> FolderMover:
        if self._mover is None:
            self._mover = self.fs.folder_mover(path) or InlineMover(self.fs)
        return self._mover

    def __enter__(self) -> MovesAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Wait for the moves under way (their outcomes are dropped: their sequences make them themselves)."""
        for started in self._batches.values():
            if started is not None:
                started[1].outcomes()
        self._batches.clear()
        if self._mover is not None:
            self._mover.close()
