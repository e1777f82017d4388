"""The snapshot codec: a `State` to bytes and back (zlib-compressed JSON), driven by the views' type hints.

Each view is stored as a JSON array of its fields in declaration order; converters are built once per type.
A snapshot carries its format version: one this code does not know is refused, and the projector then
replays from the start instead.
"""

from __future__ import annotations

import gc
import json
import types
import typing
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime
from enum import IntEnum
from functools import cache
from operator import attrgetter
from typing import Any, TypeVar, Union, cast

from pydantic import BaseModel, TypeAdapter

from events.errors import OncelogError
from projections.state import Problem, State
from projections.views import (
    DatasetView,
    JobView,
    RunView,
    SequenceView,
    TaskView,
    WorkUnitView,
)

FORMAT_VERSION = 2

Convert = Callable[[Any], Any]
V = TypeVar("V")


class SnapshotFormatError(OncelogError):
    """The bytes are not a snapshot this version of oncelog can read."""


def _identity(value: Any) -> Any:
    return value


def _datetime_out(value: datetime) -> int:
    return int(value.timestamp() * 1_000_000)


def _datetime_in(value: int) -> datetime:
    return datetime.fromtimestamp(value / 1e6, UTC)


@cache
def _converters(annotation: Any) -> tuple[Convert, Convert]:
    """(to JSON, from JSON) for one annotated type."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _converters(args[0])
    if annotation in (str, int, float, bool, type(None)):
        return _identity, _identity
    if annotation is datetime:
        return _datetime_out, _datetime_in
    if isinstance(annotation, type) and issubclass(annotation, IntEnum):
        return int, annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return (lambda m: m.model_dump(mode="json")), annotation.__pydantic_validator__.validate_python
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if len(non_null) == 1:
            out, back = _converters(non_null[0])
            return (lambda v: None if v is None else out(v)), (lambda v: None if v is None else back(v))
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)
        return (lambda v: adapter.dump_python(v, mode="json")), adapter.validate_python
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        out, back = _converters(args[0])
        if out is _identity and back is _identity:
            return list, tuple
        return (lambda v: [out(x) for x in v]), (lambda v: tuple(back(x) for x in v))
    if origin is tuple:
        parts = [_converters(a) for a in args]
        return (lambda v: [p[0](x) for p, x in zip(parts, v)]), (lambda v: tuple(p[1](x) for p, x in zip(parts, v)))
    if origin is frozenset:
        out, back = _converters(args[0])
        return (lambda v: [out(x) for x in sorted(v)]), (lambda v: frozenset(back(x) for x in v))
    if origin is dict:
        return dict, dict
    if isinstance(annotation, type) and is_dataclass(annotation):
        return _dataclass_converters(annotation)
    raise TypeError(f"the snapshot codec has no converter for {annotation!r}")


def _dataclass_converters(cls: type) -> tuple[Convert, Convert]:
    """A dataclass as the array of its fields and back; fields stored as they are skip the converter call."""
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    outs = [_converters(hints[n])[0] for n in names]
    backs = [_converters(hints[n])[1] for n in names]
    values_of = attrgetter(*names) if len(names) > 1 else (lambda value: (getattr(value, names[0]),))

    def out(value: Any) -> list[Any]:
        return [v if convert is _identity else convert(v) for convert, v in zip(outs, values_of(value))]

    def back(value: list[Any]) -> Any:
        return cls(*[v if convert is _identity else convert(v) for convert, v in zip(backs, value)])

    return out, back


def view_to_json(view: Any) -> list[Any]:
    """A view as a JSON-able array of its fields (what snapshots and the live projector's tables hold)."""
    cls: Any = type(view)
    return cast(list[Any], _converters(cls)[0](view))


def view_from_json(cls: type[V], data: list[Any]) -> V:
    """The view of type cls that view_to_json made `data` from."""
    annotation: Any = cls
    return cast(V, _converters(annotation)[1](data))


@contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off while the block runs (then as it was before).

    For building or dumping a whole state: every object made survives, so each collection would only walk them all
    again (measured: it more than doubled the time of decode_state). Nothing made here forms a reference cycle.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def encode_state(state: State) -> bytes:
    """The snapshot bytes of a state."""
    with collector_paused():
        return _encode(state)


def _encode(state: State) -> bytes:
    """The snapshot document of a state, as compressed JSON."""
    job_out = _converters(JobView)[0]
    run_out = _converters(RunView)[0]
    task_out = _converters(TaskView)[0]
    unit_out = _converters(WorkUnitView)[0]
    dataset_out = _converters(DatasetView)[0]
    sequence_out = _converters(SequenceView)[0]
    document = {
        "format": FORMAT_VERSION,
        "detail_runs": state.detail_runs,
        "offsets": {str(p): o for p, o in state.offsets.items()},
        "jobs": [job_out(v) for v in state.jobs.values()],
        "runs": [run_out(v) for v in state.runs.values()],
        "tasks": [task_out(v) for per_run in state.tasks.values() for v in per_run.values()],
        "work_units": [unit_out(v) for per_run in state.work_units.values() for v in per_run.values()],
        "datasets": [dataset_out(v) for v in state.datasets.values()],
        "sequences": [sequence_out(v) for v in state.sequences.values()],
        "completed": [[job, urn, sorted(ids)] for (job, urn), ids in state.completed.items()],
        "problems": [[p.partition, p.offset, p.kind, p.message] for p in state.problems],
        "problem_count": state.problem_count,
    }
    return zlib.compress(json.dumps(document, separators=(",", ":")).encode(), 1)


def decode_state(data: bytes) -> State:
    """The state a snapshot holds; SnapshotFormatError if it is not one this code reads."""
    with collector_paused():
        try:
            document = json.loads(zlib.decompress(data))
        except (zlib.error, ValueError) as e:
            raise SnapshotFormatError(f"the snapshot is not readable: {e}") from e
        return _state_of(document)


def _state_of(document: Any) -> State:
    """The state of a decoded snapshot document, once its format is checked."""
    if not isinstance(document, dict) or document.get("format") != FORMAT_VERSION:
        found = document.get("format") if isinstance(document, dict) else None
        raise SnapshotFormatError(f"snapshot format {found!r} is not {FORMAT_VERSION}, the one this oncelog reads")
    state = State(detail_runs=int(document["detail_runs"]))
    state.offsets = {int(p): int(o) for p, o in document["offsets"].items()}
    for job in map(_converters(JobView)[1], document["jobs"]):
        state.jobs[job.job] = job
    for run in map(_converters(RunView)[1], document["runs"]):
        state.runs[(run.job, run.run_id)] = run
    for task in map(_converters(TaskView)[1], document["tasks"]):
        state.tasks.setdefault((task.job, task.run_id), {})[task.task_id] = task
    for unit in map(_converters(WorkUnitView)[1], document["work_units"]):
        state.work_units.setdefault((unit.job, unit.run_id), {})[unit.spec.work_unit_id] = unit
    for dataset in map(_converters(DatasetView)[1], document["datasets"]):
        state.datasets[(dataset.job, dataset.dataset_urn)] = dataset
    for sequence in map(_converters(SequenceView)[1], document["sequences"]):
        state.sequences[(sequence.job, sequence.dataset_urn, sequence.sequence_id)] = sequence
    state.completed = {(job, urn): set(ids) for job, urn, ids in document["completed"]}
    state.problems = [Problem(*p) for p in document["problems"]]
    state.problem_count = int(document["problem_count"])
    return state
