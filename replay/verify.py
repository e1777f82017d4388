"""`oncelog verify`: the invariants of exactly-once publishing, checked over the whole history of a log.

- every planned sequence is completed, abandoned or pending — and only a completed one has all its steps applied;
- watermarks never go backwards per partition, and each advance starts where the last one ended (no range lost);
- no source range is published twice;
- every published file belongs to a completed sequence (and, given the publish directory, every file in it does);
- every record decodes, and every run or sequence event belongs to a run or sequence that exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepApplied,
    FsRenameStep,
)
from events.dataset import WatermarkAdvanced
from events.errors import EventDecodeError
from events.log import EventLog
from events.model import LoggedEvent, Position
from projections.state import State

Progress = Callable[[int], None]


@dataclass(frozen=True)
class Violation:
    """A broken invariant, and where in the log it shows."""

    kind: str
    message: str
    position: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" + (f" (at {self.position})" if self.position else "")


@dataclass
class _Sequence:
    planned: CommitSequencePlanned
    at: str
    applied: set[int] = field(default_factory=set)
    completed: bool = False
    abandoned: bool = False


@dataclass
class VerifyReport:
    """What verify found: violations (any makes it fail), pending sequences (not a violation), counts."""

    events: int = 0
    violations: list[Violation] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    sequences: int = 0
    published_files: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


class _Checker:
    """Folds the log once, keeping what the invariants need."""

    def __init__(self) -> None:
        self.state = State()
        self.sequences: dict[tuple[str, str, str], _Sequence] = {}
        self.chains: dict[tuple[str, str, str], list[tuple[int, int, str]]] = {}
        self.seen_advances: set[str] = set()
        self.report = VerifyReport()

    def on_error(self, error: EventDecodeError) -> None:
        self.state.report(Position(error.partition, error.offset), "undecodable", str(error))

    def fold(self, logged: LoggedEvent) -> None:
        self.report.events += 1
        self.state.apply(logged)
        event = logged.event
        where = f"{logged.topic}[{logged.partition}]@{logged.offset}"
        if isinstance(event, CommitSequencePlanned):
            key = (event.job, event.dataset_urn, event.sequence_id)
            known = self.sequences.get(key)
            if known is None:
                self.sequences[key] = _Sequence(event, where)
            elif not known.applied and len(event.steps) > len(known.planned.steps):
                known.planned = event  # CommitStepStore.put added a step
            return
        if not isinstance(event, (CommitStepApplied, CommitSequenceCompleted, CommitSequenceAbandoned,
                                  WatermarkAdvanced)):
            return
        sequence = self.sequences.get((event.job, event.dataset_urn, event.sequence_id))
        if sequence is None:
            return  # reported by the fold as an unknown sequence
        if isinstance(event, CommitStepApplied):
            if event.step_index >= len(sequence.planned.steps):
                self.violate("step-out-of-range", f"step {event.step_index} applied, but sequence "
                             f"{event.sequence_id!r} of {event.dataset_urn!r} has {len(sequence.planned.steps)}", where)
            sequence.applied.add(event.step_index)
        elif isinstance(event, CommitSequenceCompleted):
            sequence.completed = True
            missing = set(range(len(sequence.planned.steps))) - sequence.applied
            if missing:
                self.violate("completed-early", f"sequence {event.sequence_id!r} of {event.dataset_urn!r} completed "
                             f"with steps {sorted(missing)} never applied", where)
        elif isinstance(event, CommitSequenceAbandoned):
            sequence.abandoned = True
        elif event.key not in self.seen_advances:
            self.seen_advances.add(event.key)
            chain = self.chains.setdefault((event.job, event.dataset_urn, event.partition), [])
            chain.append((event.low_watermark, event.value, where))

    def violate(self, kind: str, message: str, position: str = "") -> None:
        self.report.violations.append(Violation(kind, message, position))

    def finish(self, publish_dir: Path | None) -> VerifyReport:
        for problem in self.state.problems:
            self.violate(problem.kind, problem.message, problem.where())
        if self.state.problem_count > len(self.state.problems):
            self.violate("more-problems", f"{self.state.problem_count - len(self.state.problems)} more not listed")
        self._check_sequences()
        self._check_watermarks()
        published = self._published_files()
        if publish_dir is not None:
            self._check_publish_dir(publish_dir, published)
        self.report.sequences = len(self.sequences)
        self.report.published_files = len(published)
        return self.report

    def _check_sequences(self) -> None:
        for (job, urn, sequence_id), s in self.sequences.items():
            if s.completed and s.abandoned:
                self.violate("completed-and-abandoned", f"sequence {sequence_id!r} of {urn!r} ({job}) is both", s.at)
            elif not s.completed and not s.abandoned:
                self.report.pending.append(f"{job} / {urn} / {sequence_id}")
            if s.abandoned and not s.completed:
                renamed = [i for i, step in enumerate(s.planned.steps)
                           if isinstance(step, FsRenameStep) and i in s.applied]
                if renamed:
                    self.violate("published-by-abandoned", f"sequence {sequence_id!r} of {urn!r} ({job}) was "
                                 f"abandoned after publishing the files of steps {renamed}", s.at)

    def _check_watermarks(self) -> None:
        for (job, urn, partition), chain in self.chains.items():
            for (low, high, _), (next_low, next_high, where) in zip(chain, chain[1:]):
                if next_high < high:
                    self.violate("watermark-backwards", f"{urn} {partition} ({job}) went from {high} back to "
                                 f"{next_high}", where)
                elif next_low < high:
                    self.violate("published-twice", f"{urn} {partition} ({job}): range [{next_low}, {next_high}) "
                                 f"overlaps the range [{low}, {high}) published before", where)
                elif next_low > high:
                    self.violate("range-skipped", f"{urn} {partition} ({job}): range [{high}, {next_low}) was "
                                 f"never published (watermark jumped from {high} to {next_low})", where)

    def _published_files(self) -> dict[str, str]:
        """Destination → the completed sequence that published it; a destination published twice is a violation."""
        published: dict[str, str] = {}
        for (job, urn, sequence_id), s in self.sequences.items():
            if not s.completed:
                continue
            for step in s.planned.steps:
                if isinstance(step, FsRenameStep):
                    owner = f"{job} / {urn} / {sequence_id}"
                    if step.dst in published:
                        self.violate("file-published-twice", f"{step.dst} by {published[step.dst]} and by {owner}")
                    published[step.dst] = owner
        return published

    def _check_publish_dir(self, publish_dir: Path, published: dict[str, str]) -> None:
        on_disk = {str(p.resolve()) for p in publish_dir.rglob("*") if p.is_file()}
        known = {str(Path(p).resolve()) for p in published}
        for orphan in sorted(on_disk - known):
            self.violate("orphaned-file", f"{orphan} is in the publish directory but no completed sequence "
                         f"published it")
        for missing in sorted(known - on_disk):
            if Path(missing).is_relative_to(publish_dir.resolve()):
                self.violate("missing-file", f"{missing} was published by a completed sequence but is gone")


def verify(log: EventLog, publish_dir: Path | None = None, progress: Progress | None = None) -> VerifyReport:
    """Check every invariant over the whole history of the log."""
    checker = _Checker()
    for count, logged in enumerate(log.read(on_error=checker.on_error), start=1):
        checker.fold(logged)
        if progress is not None and count % 10_000 == 0:
            progress(count)
    return checker.finish(publish_dir)
