"""Gobblin's CommitStepStore API over the log: `put`/`remove` append events, reads come from the projection.

A store is a job (store name = job name); a dataset URN in it holds at most one pending sequence at a time.
"""

from __future__ import annotations

from events.commit import (
    CommitSequenceAbandoned,
    CommitSequenceCompleted,
    CommitSequencePlanned,
    CommitStepSpec,
)
from events.model import Event, SequenceFields
from projections.views import SequenceView
from spark_pipeline.commit.sequence import CommitSequence, Committer


class CommitStepStore:
    """The write-ahead log of commit steps, per store (job) and dataset URN; new sequences are numbered by run."""

    def __init__(self, committer: Committer, run_id: str) -> None:
        self.committer = committer
        self.sink = committer.sink
        self.run_id = run_id

    def _pending(self, store_name: str, dataset_urn: str | None = None) -> list[SequenceView]:
        return [s for s in self.sink.state.pending_sequences(store_name)
                if dataset_urn is None or s.dataset_urn == dataset_urn]

    def create(self, store_name: str, dataset_urn: str | None = None) -> bool:
        """Open a dataset's (empty) sequence in a store; False if one is pending already. Stores need no creating."""
        if dataset_urn is None:
            return True
        if self._pending(store_name, dataset_urn):
            return False
        self.sink.emit([self._planned(store_name, dataset_urn, ())])
        return True

    def exists(self, store_name: str, dataset_urn: str) -> bool:
        """Whether the dataset has a pending sequence in the store."""
        return bool(self._pending(store_name, dataset_urn))

    def put(self, store_name: str, dataset_urn: str, step: CommitStepSpec) -> bool:
        """Add a step to the dataset's pending sequence (opening one if needed); False once steps have run."""
        pending = self._pending(store_name, dataset_urn)
        if pending and pending[0].applied:
            return False
        steps = (*pending[0].steps, step) if pending else (step,)
        sequence_id = pending[0].sequence_id if pending else self.run_id
        self.sink.emit([self._planned(store_name, dataset_urn, steps, sequence_id)])
        return True

    def remove(self, store_name: str, dataset_urn: str | None = None) -> bool:
        """End the pending sequence(s): completed when every step is applied, abandoned otherwise."""
        pending = self._pending(store_name, dataset_urn)
        events: list[Event] = []
        for view in pending:
            fields: SequenceFields = {"job": view.job, "run_id": view.run_id, "dataset_urn": view.dataset_urn,
                                      "sequence_id": view.sequence_id}
            if len(view.applied) == len(view.steps):
                events.append(CommitSequenceCompleted(**fields))
            else:
                events.append(CommitSequenceAbandoned(**fields, attempts=view.attempts_failed,
                                                      error="removed from the CommitStepStore before all steps ran"))
        self.sink.emit(events)
        return bool(pending)

    def get_commit_sequence(self, store_name: str, dataset_urn: str) -> CommitSequence | None:
        """The dataset's pending sequence, ready to commit, or None."""
        pending = self._pending(store_name, dataset_urn)
        return self.committer.sequence(pending[0]) if pending else None

    def _planned(self, store_name: str, dataset_urn: str, steps: tuple[CommitStepSpec, ...],
                 sequence_id: str | None = None) -> CommitSequencePlanned:
        return CommitSequencePlanned(job=store_name, run_id=self.run_id, dataset_urn=dataset_urn,
                                     sequence_id=sequence_id or self.run_id, steps=steps)
