"""The run's table commits: the table steps of many sequences that reach them together, made as one commit per table.

An Iceberg TableCommit of a run's group becomes one snapshot listing its sequences (`oncelog.members`); the DeltaCommits
into one Delta table become one write transaction carrying each dataset's app transaction. Each sequence is then told
its step's outcome (`TableOutcome`): executed now, found done (an earlier attempt's commit), or failed. A commit the
table refuses for the data itself is split in halves until the sequences whose files it refuses fail alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

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
    icebergs: dict[tuple[str, str], list[tuple[int, _Iceberg]]] = defaultdict(list)
    deltas: dict[str, list[tuple[int, _Delta]]] = defaultdict(list)
    for index, member in enumerate(members):
        spec = member.spec
        if isinstance(spec, TableCommitStep):
            iceberg = _Iceberg.of(spec, member.files)
            icebergs[(spec.location, iceberg.group)].append((index, iceberg))
        else:
            deltas[spec.location].append((index, _Delta(spec, member.files)))
    outcomes: list[TableOutcome] = [TableOutcome() for _ in members]
    for iceberg_table in icebergs.values():
        _commit_into(outcomes, iceberg_table, fs)
    for delta_table in deltas.values():
        _commit_into(outcomes, delta_table, fs)
    return outcomes


@dataclass(frozen=True)
class _Iceberg:
    """A grouped TableCommit: its step, its files, and its group and number in it."""

    spec: TableCommitStep
    files: tuple[str, ...]
    group: str
    number: int

    @classmethod
    def of(cls, spec: TableCommitStep, files: tuple[str, ...]) -> _Iceberg:
        if spec.group is None or spec.member is None:
            raise TypeError(f"the TableCommit {spec.commit_id} is no group's member (group {spec.group}, "
                            f"number {spec.member})")
        return cls(spec, files, spec.group, spec.member)

    @staticmethod
    def commit(members: Sequence[_Iceberg], fs: FileSystem) -> list[TableOutcome]:
        """One snapshot of the members (those an earlier attempt committed found, not committed again)."""
        from spark_pipeline.tables import iceberg

        first = members[0]
        found = iceberg.append_group(iceberg.TableRef.of(first.spec, iceberg.TableStorage.of(fs)), first.group,
                                     [iceberg.GroupMember(m.number, m.files, m.spec.summary) for m in members])
        return [TableOutcome("verified" if m.number in found else "executed") for m in members]

    @staticmethod
    def held(members: Sequence[_Iceberg], fs: FileSystem) -> list[bool]:
        from spark_pipeline.tables import iceberg

        first = members[0]
        committed = iceberg.committed_members(iceberg.TableRef.of(first.spec, iceberg.TableStorage.of(fs)),
                                              first.group)
        return [m.number in committed for m in members]


@dataclass(frozen=True)
class _Delta:
    """A DeltaCommit: its step and its files."""

    spec: DeltaCommitStep
    files: tuple[str, ...]

    @staticmethod
    def commit(members: Sequence[_Delta], fs: FileSystem) -> list[TableOutcome]:
        """One write transaction of the members (those found done or refused left out)."""
        from spark_pipeline.tables import delta

        outcome = delta.commit_group(delta.DeltaRef.of(members[0].spec, delta.TableStorage.of(fs)),
                                     [delta.DeltaMember(m.spec.app_id, m.spec.version, m.spec.commit_id, m.files,
                                                        m.spec.metadata) for m in members])
        return [TableOutcome(error=CommitStepError(outcome.refused[m.spec.app_id])) if m.spec.app_id in outcome.refused
                else TableOutcome("verified" if m.spec.app_id in outcome.found else "executed") for m in members]

    @staticmethod
    def held(members: Sequence[_Delta], fs: FileSystem) -> list[bool]:
        from spark_pipeline.tables import delta

        versions = delta.versions_of(delta.DeltaRef.of(members[0].spec, delta.TableStorage.of(fs)),
                                     [m.spec.app_id for m in members])
        return [versions.get(m.spec.app_id) == m.spec.version for m in members]


Member = TypeVar("Member", _Iceberg, _Delta)


def _commit_into(outcomes: list[TableOutcome], table: Sequence[tuple[int, Member]], fs: FileSystem) -> None:
    """One table's commit, each member's outcome put at its index in `outcomes`."""
    for (index, _), outcome in zip(table, _commit_one_table([member for _, member in table], fs), strict=True):
        outcomes[index] = outcome


def _commit_one_table(members: Sequence[Member], fs: FileSystem) -> list[TableOutcome]:
    """One commit of the members into their table; on a refusal of the data, each half committed on its own."""
    from spark_pipeline.tables.errors import TableDataError, TableError

    try:
        return type(members[0]).commit(members, fs)
    except TableDataError as e:
        if len(members) == 1:
            return _after_failure(members, fs, e)
        half: int = len(members) // 2
        return [*_commit_one_table(members[:half], fs), *_commit_one_table(members[half:], fs)]
    except TableError as e:
        return _after_failure(members, fs, e)


def _after_failure(members: Sequence[Member], fs: FileSystem, error: Exception) -> list[TableOutcome]:
    """After a failed commit, the table asked again (one read): a member it holds is done (the commit was made, its
    answer lost), the others failed; when the table cannot be read, nothing tells whether it took effect (unsettled)."""
    from spark_pipeline.tables.errors import TableError

    try:
        held = type(members[0]).held(members, fs)
    except TableError as e:
        unsettled = UnsettledCommitStepError(f"{error}; then the table could not be read: {e}")
        return [TableOutcome(error=unsettled) for _ in members]
    failed = CommitStepError(str(error))
    return [TableOutcome("executed") if h else TableOutcome(error=failed) for h in held]
