"""Logs written by an earlier oncelog read unchanged: every event decodes to what it was, and the folds, verify and
the dataset states agree with what that version made of them.

The fixtures in tests/fixtures/logs/ were written by main at 99a2c0f (before the rooms were rebuilt): a seeded fault
simulation's log (seed 14: crashes, recoveries, releases, two jobs) and one event of every type. Beside each, a JSON
file holds what that version read from it: its events, datasets, runs and verify's report.
"""

from __future__ import annotations

import json
import shutil
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import oncelog
from events.log import open_log
from events.registry import EVENT_TYPES

EVENT_TYPES_BY_NAME = {t.__name__: t for t in EVENT_TYPES}

FIXTURES = Path(__file__).parents[2] / "fixtures" / "logs"
LOGS = ["simulated-main-99a2c0f", "every-type-main-99a2c0f"]


def summary(url: str) -> dict[str, Any]:
    """What a log holds and what the folds make of it, in the form the fixture's JSON was written in."""
    with open_log(url) as log:
        events = [{"partition": e.partition, "offset": e.offset, "type": type(e.event).__name__,
                   "key": e.event.key, "event": json.loads(e.event.model_dump_json())} for e in log.read()]
        state = oncelog.rebuild(log)
        report = oncelog.verify(log)
    jobs = sorted({e["event"]["job"] for e in events if e["event"].get("job")})
    datasets = {job: {urn: {"watermarks": dict(sorted(view.watermarks.items())),
                            "records_published": view.records_published}
                      for urn, view in sorted(state.dataset_states(job).items())} for job in jobs}
    runs = {job: [[r.run_id, r.status.name] for r in state.runs_of(job)] for job in jobs}
    return {"events": events, "datasets": datasets, "runs": runs,
            "verify": {"ok": report.ok, "events": report.events, "sequences": report.sequences,
                       "published_files": report.published_files, "pending": report.pending}}


@pytest.mark.parametrize("name", LOGS)
def test_a_log_written_by_an_earlier_version_reads_and_folds_as_it_did(name: str, tmp_path: Path) -> None:
    copy = tmp_path / f"{name}.db"
    shutil.copy(FIXTURES / f"{name}.db", copy)  # opening a log may write (its schema table): never the fixture
    expected = json.loads((FIXTURES / f"{name}.json").read_text())
    actual = json.loads(json.dumps(summary(f"sqlite:///{copy}"), default=str))
    assert len(actual["events"]) == len(expected["events"])
    for got, was in zip(actual["events"], expected["events"]):
        got["event"] = as_written(got["type"], got["event"], was["event"])
    assert actual == expected


def as_written(event_type: str, read: dict[str, Any], written: dict[str, Any]) -> dict[str, Any]:
    """An event as read, without the fields its type (or a model inside it) gained since the fixture was written:
    each must read as its declared default (a field added with a default leaves old events unchanged)."""
    return without_new_fields(EVENT_TYPES_BY_NAME[event_type], read, written)


def without_new_fields(model: type[BaseModel], read: dict[str, Any], written: dict[str, Any]) -> dict[str, Any]:
    """`read` without the fields `written` lacks, each checked to read as its default; nested models likewise."""
    for name in set(read) - set(written):
        default = model.model_fields[name].get_default(call_default_factory=True)
        assert read[name] == json.loads(json.dumps(default)), (model.__name__, name, read[name])
    kept = {}
    for key, value in read.items():
        if key not in written:
            continue
        models, was = nested_models(model.model_fields[key].annotation), written[key]
        if models and isinstance(value, dict) and isinstance(was, dict):
            value = without_new_fields(chosen(models, was), value, was)
        elif models and isinstance(value, list) and isinstance(was, list) and len(value) == len(was):
            value = [without_new_fields(chosen(models, w), v, w) if isinstance(v, dict) and isinstance(w, dict) else v
                     for v, w in zip(value, was)]
        kept[key] = value
    return kept


def nested_models(annotation: Any) -> list[type[BaseModel]]:
    """The models a field holds (itself, the items of a tuple, or the members of a union such as the commit steps)."""
    found: list[type[BaseModel]] = []
    pending = [annotation]
    while pending:
        current = pending.pop(0)
        if isinstance(current, type) and issubclass(current, BaseModel):
            found.append(current)
        else:
            pending += list(typing.get_args(current))
    return found


def chosen(models: list[type[BaseModel]], written: dict[str, Any]) -> type[BaseModel]:
    """The model a written value is: the only one, or the union member its `kind` names."""
    if len(models) == 1:
        return models[0]
    return next(m for m in models if m.model_fields["kind"].default == written.get("kind"))
