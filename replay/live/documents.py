"""What the live views answer, pure: the CLI's documents (replay/render.py's fields and formats) and pages of them.

Paging: `?limit=` (1..MAX_LIMIT) and `?after=` (the `next` token of the previous page: the last item's sort key).
A request that cannot be answered is a `ViewError` carrying its HTTP status.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar

from events.errors import OncelogError
from projections.completeness import Completeness
from projections.state import State
from projections.timefmt import when
from projections.views import DatasetView, RunView, SequenceView, TaskView

DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000

K = TypeVar("K", bound=tuple[str, ...])
V = TypeVar("V")


class ViewError(OncelogError):
    """A request the views cannot answer: its HTTP status and a message naming what is wrong."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        self.status = status
        super().__init__(message)


def dataset_doc(view: DatasetView) -> dict[str, Any]:
    """A dataset's committed state, as `oncelog state --json` prints it."""
    return {
        "job": view.job, "dataset_urn": view.dataset_urn, "watermarks": view.watermarks,
        "last_run_id": view.last_run_id, "last_sequence_id": view.last_sequence_id,
        "committed_at": when(view.committed_at), "records_published": view.records_published,
        "files_published": view.files_published, "blocked_by": view.blocked_by, "blocked_error": view.blocked_error,
        "completeness": completeness_doc(view.completeness),
    }


def completeness_doc(completeness: Completeness | None) -> dict[str, Any] | None:
    """A dataset's time partitions' completeness (None: not a time-partitioned dataset): its complete horizon, the
    partitions completed and open, the late records per partition."""
    if completeness is None:
        return None
    horizon = completeness.horizon_ms
    return {
        "horizon": None if horizon is None else when(datetime.fromtimestamp(horizon / 1000, UTC)),
        "horizon_ms": horizon, "frontiers": completeness.frontiers,
        "partitions_completed": len(completeness.completed),
        "open_partitions": sorted(completeness.open_partitions, key=lambda p: (completeness.open_partitions[p], p)),
        "late_records": completeness.late_records, "late_files": completeness.late_files,
    }


def sequence_doc(view: SequenceView) -> dict[str, Any]:
    """A commit sequence, as `oncelog state --json` prints it."""
    return {
        "job": view.job, "dataset_urn": view.dataset_urn, "sequence_id": view.sequence_id, "run_id": view.run_id,
        "status": view.status.name.lower(), "steps": len(view.steps), "applied": sorted(view.applied),
        "failed_attempts": view.attempts_failed, "last_error": view.last_error, "planned_at": when(view.planned_at),
    }


def task_counts(tasks: Mapping[str, TaskView] | None) -> dict[str, int]:
    """A run's tasks by the status of their last attempt (running, succeeded, failed)."""
    counts = {"running": 0, "succeeded": 0, "failed": 0}
    for task in (tasks or {}).values():
        if task.last is not None:
            counts[task.last.status.name.lower()] += 1
    return counts


def run_doc(state: State, view: RunView) -> dict[str, Any]:
    """A run, as `oncelog runs --json` prints it, with its task counts (null once its detail left the state)."""
    duration = None if view.started_at is None or view.ended_at is None else round(
        (view.ended_at - view.started_at).total_seconds(), 3)
    return {
        "job": view.job, "run_id": view.run_id, "status": view.status.name, "started_at": when(view.started_at),
        "ended_at": when(view.ended_at), "duration_s": duration, "work_units": view.work_units,
        "records_extracted": view.records_extracted, "records_written": view.records_written, "error": view.error,
        "datasets_committed": list(view.datasets_committed), "datasets_abandoned": list(view.datasets_abandoned),
        "datasets_skipped": list(view.datasets_skipped),
        "tasks": None if view.detail_dropped else task_counts(state.tasks.get((view.job, view.run_id))),
    }


def cursor(key: tuple[str, ...]) -> str:
    """The opaque `after` token of a sort key."""
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def parse_cursor(token: str) -> tuple[str, ...]:
    """The sort key of an `after` token; ViewError 400 naming the parameter if it is not one of ours."""
    try:
        key = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as e:
        raise ViewError(HTTPStatus.BAD_REQUEST, f"after={token!r} is not a `next` token of this view") from e
    if not isinstance(key, list) or not all(isinstance(k, str) for k in key):
        raise ViewError(HTTPStatus.BAD_REQUEST, f"after={token!r} is not a `next` token of this view")
    return tuple(key)


def parse_limit(query: Mapping[str, str]) -> int:
    """The page size asked for; ViewError 400 naming the parameter if it is no integer in 1..MAX_LIMIT."""
    raw = query.get("limit", str(DEFAULT_LIMIT))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise ViewError(HTTPStatus.BAD_REQUEST, f"limit={raw!r}: give an integer from 1 to {MAX_LIMIT}")
    return int(raw)


def page(items: Mapping[K, V], query: Mapping[str, str], name: str,
         render: Callable[[V], dict[str, Any]]) -> dict[str, Any]:
    """One page of items in the order of their keys, after `after`, and the token of the next page (or null)."""
    limit = parse_limit(query)
    after = parse_cursor(query["after"]) if "after" in query else None
    keys = sorted(k for k in items if after is None or k > after)
    shown = keys[:limit]
    return {name: [render(items[k]) for k in shown], "next": cursor(shown[-1]) if len(keys) > limit else None}

