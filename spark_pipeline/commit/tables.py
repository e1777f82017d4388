"""The run's table commits: the table steps of many sequences that reach them together, made as one commit per table.

An Iceberg TableCommit of a run's group becomes one snapshot listing its sequences (`oncelog.members`); the DeltaCommits
into one Delta table become one write transaction carrying each dataset's app transaction. Each sequence is then told
its step's outcome (`TableOutcome`): executed now, found done (an earlier attempt's commit), or failed. A commit the
table refuses for the data itself is split in halves until the sequences whose files it refuses fail alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

from events.commit import DeltaCommitStep, FsRenameStep, TableCommitStep
from filesystems.base import FileSystem
from projections.views import SequenceView
from spark_pipeline.commit.steps import CommitStepError, UnsettledCommitStepError

Done = Literal["executed", "verified"]


@dataclass(frozen=True)
class TableOutcome:
    """How a sequence's table step ended in a commit made for many: `done`, or `error` (then nothing of it is in)."""

    done: Done | None = None
    error: CommitStepError | None = None
    ms: float = 0.0
    """How long the commit made for them all took (each sequence's step timing)."""

    def result(self) -> bool:
        """Whether the step was found done (verified); its error if it failed."""
        if self.error is not None:
            raise self.error
        return self.done == "verified"


@dataclass(frozen=True)
class TableMember:
    """A sequence waiting at its table step: the step, and the files its renames published."""

    spec: TableCommitStep | DeltaCommitStep
    files: tuple[str, ...]

    @classmethod
    def of(cls, view: SequenceView, index: int) -> TableMember:
        spec = view.steps[index]
        if not isinstance(spec, (TableCommitStep, DeltaCommitStep)):
            raise TypeError(f"step {index} of {view.sequence_id} is no table step: {spec.kind}")
        return cls(spec, tuple(s.dst for s in view.steps if isinstance(s, FsRenameStep)))


def grouped(spec: object) -> bool:
    """Whether a step is made together with other sequences' (a TableCommit of a group, any DeltaCommit)."""
    return isinstance(spec, DeltaCommitStep) or (isinstance(spec, TableCommitStep) and spec.group is not None)


def commit_together(members: Sequence[TableMember], fs: FileSystem) -> list[TableOutcome]:
    """Commit the members' table steps, one commit per table (and Iceberg group); their outcomes in order."""
    by_table: dict[Hashable, list[int]] = defaultdict(list)
    for index, member in enumerate(members):
        spec = member.spec
        by_table[(spec.location, spec.group) if isinstance(spec, TableCommitStep) else spec.location].append(index)
    outcomes: list[TableOutcome] = [TableOutcome() for _ in members]
    for indices in by_table.values():
        table = [members[i] for i in indices]
        for index, outcome in zip(indices, _commit_one_table(table, fs), strict=True):
            outcomes[index] = outcome
    return outcomes


def _commit_one_table(members: Sequence[TableMember], fs: FileSystem) -> list[TableOutcome]:
    """One commit of the members into their table; on a refusal of the data, each half committed on its own."""
    from spark_pipeline.tables.errors import TableDataError, TableError

    try:
        return _commit(members, fs)
    except TableDataError as e:
        if len(members) == 1:
            return _after_failure(members, fs, e)
        half = len(members) // 2
        return [*_commit_one_table(members[:half], fs), *_commit_one_table(members[half:], fs)]
    except TableError as e:
        return _after_failure(members, fs, e)


def _commit(members: Sequence[TableMember], fs: FileSystem) -> list[TableOutcome]:
    """The commit itself (a TableError if it failed): each member executed now, or found committed before."""
    first = members[0].spec
    if isinstance(first, TableCommitStep):
        from spark_pipeline.tables import iceberg

        specs = [_iceberg(m.spec) for m in members]
        found = iceberg.append_group(iceberg.TableRef.of(first, iceberg.TableStorage.of(fs)), _group(first),
                                     [iceberg.GroupMember(_number(s), m.files, s.summary)
                                      for s, m in zip(specs, members, strict=True)])
        return [TableOutcome("verified" if _number(s) in found else "executed") for s in specs]
    from spark_pipeline.tables import delta

    deltas = [_delta(m.spec) for m in members]
    outcome = delta.commit_group(delta.DeltaRef.of(first, delta.TableStorage.of(fs)),
                                 [delta.DeltaMember(s.app_id, s.version, s.commit_id, m.files, s.metadata)
                                  for s, m in zip(deltas, members, strict=True)])
    return [TableOutcome(error=CommitStepError(outcome.refused[s.app_id])) if s.app_id in outcome.refused
            else TableOutcome("verified" if s.app_id in outcome.found else "executed") for s in deltas]


def _after_failure(members: Sequence[TableMember], fs: FileSystem, error: Exception) -> list[TableOutcome]:
    """After a failed commit, the table asked again: a member it holds is done (the commit was made, its answer lost),
    the others failed; when the table cannot be read, nothing tells whether it took effect (unsettled)."""
    from spark_pipeline.tables.errors import TableError

    try:
        held = _held(members, fs)
    except TableError as e:
        unsettled = UnsettledCommitStepError(f"{error}; then the table could not be read: {e}")
        return [TableOutcome(error=unsettled) for _ in members]
    failed = CommitStepError(str(error))
    return [TableOutcome("executed") if h else TableOutcome(error=failed) for h in held]


def _held(members: Sequence[TableMember], fs: FileSystem) -> list[bool]:
    """Whether the table holds each member's commit (one read of the table)."""
    first = members[0].spec
    if isinstance(first, TableCommitStep):
        from spark_pipeline.tables import iceberg

        committed = iceberg.committed_members(iceberg.TableRef.of(first, iceberg.TableStorage.of(fs)), _group(first))
        return [_number(_iceberg(m.spec)) in committed for m in members]
    from spark_pipeline.tables import delta

    deltas = [_delta(m.spec) for m in members]
    versions = delta.versions_of(delta.DeltaRef.of(first, delta.TableStorage.of(fs)), [s.app_id for s in deltas])
    return [versions.get(s.app_id) == s.version for s in deltas]


def _iceberg(spec: TableCommitStep | DeltaCommitStep) -> TableCommitStep:
    if not isinstance(spec, TableCommitStep):
        raise TypeError(f"a {spec.kind} step among an Iceberg table's")
    return spec


def _delta(spec: TableCommitStep | DeltaCommitStep) -> DeltaCommitStep:
    if not isinstance(spec, DeltaCommitStep):
        raise TypeError(f"a {spec.kind} step among a Delta table's")
    return spec


def _group(spec: TableCommitStep) -> str:
    if spec.group is None:
        raise TypeError(f"the TableCommit {spec.commit_id} belongs to no group")
    return spec.group


def _number(spec: TableCommitStep) -> int:
    if spec.member is None:
        raise TypeError(f"the TableCommit {spec.commit_id} has no member number")
    return spec.member
