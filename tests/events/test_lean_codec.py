"""The lean path: events oncelog builds unvalidated (`Frozen.trusted`) equal and encode byte for byte as validated
ones, and a record's view (its fields, no event built) holds what its decoding holds, for every event type."""

from __future__ import annotations

import shutil
import types
import typing
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Union

import annotated_types
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from events.avro_schema import envelope_schema
from events.codec import CHECKSUM_SIZE, ENVELOPE_PREFIX, UNCHECKED_FRAME_MAGIC, EventCodec
from events.commit import (
    CommitSequencePlanned,
    CommitStepApplied,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
    quick_size,
)
from events.errors import EventDecodeError
from events.keys import key_of, segment
from events.log import open_log
from events.model import Event, SequenceFields, approx_size, fits_one_slice, split_fields
from events.published import DatasetPublished, PublishedFile, WatermarkRange, published_events
from events.registry import EVENT_TYPES
from tests.factories import one_of_each

CODEC = EventCodec()
FIXTURES = Path(__file__).parents[1] / "fixtures" / "logs"
SEQUENCE: SequenceFields = {"job": "j", "run_id": "r-1", "dataset_urn": "urn", "sequence_id": "r-1"}

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
longs = st.integers(-(2**62), 2**62)


def value_of(annotation: Any, constraints: tuple[Any, ...] = ()) -> st.SearchStrategy[Any]:
    """Valid values of a field's annotation (its constraints kept), in the shape validation leaves them."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:  # Field(ge=0) inside an annotation holds its constraints in .metadata
        return value_of(args[0], (*constraints, *args[1:], *(m for a in args[1:] for m in getattr(a, "metadata", ()))))
    low = next((c.ge for c in constraints if isinstance(c, annotated_types.Ge) and isinstance(c.ge, int)), None)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(low, 2**62) if low is not None else longs
    if annotation is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if annotation is str:
        min_len = 1 if any(getattr(c, "min_length", None) for c in constraints) else 0
        return names if min_len else names | st.just("")
    if annotation is datetime:
        return st.datetimes(datetime(1970, 1, 1), datetime(2200, 1, 1), timezones=st.just(UTC))
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, types.UnionType):
        return st.one_of(*(st.none() if a is type(None) else value_of(a) for a in args))
    if origin is tuple:
        return st.lists(value_of(args[0]), max_size=3).map(tuple)
    if origin is dict:
        return st.dictionaries(names, value_of(args[1]), max_size=3)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return fields_of(annotation).map(lambda fields: annotation(**fields))
    raise TypeError(f"no strategy for {annotation!r}")


def fields_of(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """Valid constructor arguments of a model: every required field, each optional one given or left out."""
    required = {name: value_of(info.annotation, tuple(info.metadata))
                for name, info in model.model_fields.items() if info.is_required()}
    optional = {name: value_of(info.annotation, tuple(info.metadata))
                for name, info in model.model_fields.items() if not info.is_required()}
    return st.fixed_dictionaries(required, optional=optional)


event_fields = st.sampled_from(EVENT_TYPES).flatmap(lambda cls: st.tuples(st.just(cls), fields_of(cls)))


@settings(max_examples=600, deadline=None)
@given(event_fields)
def test_an_event_built_unvalidated_equals_and_encodes_as_the_validated_one(drawn: tuple[type[Event], dict[str, Any]]
                                                                            ) -> None:
    cls, fields = drawn
    fields.setdefault("emitted_at", datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC))
    validated, lean = cls(**fields), cls.trusted(**fields)
    assert lean == validated
    assert list(vars(lean)) == list(vars(validated))  # declaration order: repr and model_dump alike
    assert lean.model_dump_json() == validated.model_dump_json()
    assert CODEC.to_record(lean, 4) == CODEC.to_record(validated, 4)


@settings(max_examples=600, deadline=None)
@given(event_fields)
def test_a_records_view_holds_its_envelope_and_decodes_the_rest_when_asked(drawn: tuple[type[Event], dict[str, Any]]
                                                                           ) -> None:
    cls, fields = drawn
    event = cls(**fields)
    record = CODEC.to_record(event, 4)
    view = CODEC.view(record.value or b"", "t", 0, 7, record.key)
    assert (view.event_type, view.job, view.run_id, view.dataset_urn, view.emitted_at) == (
        cls.__name__, event.job, event.run_id, event.urn, event.emitted_at)
    assert view.event() == event == CODEC.decode(record.value or b"", "t", 0, 7, record.key)
    assert cls(**view.fields()) == event


def test_the_envelope_read_by_hand_is_the_one_every_schema_starts_with() -> None:
    avro_types = {"string": "string", "long": "long", ("null", "string"): "null|string"}
    prefix = envelope_schema({"name": "AnyPayload", "fields": []})["fields"]
    read = [(f["name"], "fixed16" if isinstance(f["type"], dict) and f["type"].get("size") == 16
             else avro_types[tuple(f["type"]) if isinstance(f["type"], list) else f["type"]]) for f in prefix]
    assert read == list(ENVELOPE_PREFIX)


def test_a_plans_steps_come_back_as_their_own_kinds_from_a_view() -> None:
    steps = (FsRenameStep(src="/a", dst="/b", size=3, checksum="c", records=2),
             HighWatermarkStep(partition="p", low_watermark=1, value=5),
             DatasetStateStep(watermarks={"p": 5}, properties={"k": "v"}))
    record = CODEC.to_record(CommitSequencePlanned(**SEQUENCE, steps=steps), 4)
    view = CODEC.view(record.value or b"", "t", 0, 0, record.key)
    assert [s["kind"] for s in view.fields()["steps"]] == ["FsRename", "HighWatermark", "DatasetState"]
    decoded = view.event()
    assert isinstance(decoded, CommitSequencePlanned) and decoded.steps == steps
    assert [type(s) for s in decoded.steps] == [FsRenameStep, HighWatermarkStep, DatasetStateStep]


def test_published_events_built_unvalidated_equal_the_validated_ones() -> None:
    steps = (FsRenameStep(src="/a", dst="/b", size=3, checksum="c", records=2),
             HighWatermarkStep(partition="p", low_watermark=1, value=5), DatasetStateStep(watermarks={"p": 5}))
    (published,) = published_events(SEQUENCE, steps)
    validated = type(published)(**{**dict(published), "files": tuple(type(f)(**dict(f)) for f in published.files),
                                   "watermarks": tuple(type(w)(**dict(w)) for w in published.watermarks)})
    assert published == validated
    assert CODEC.to_record(published, 4) == CODEC.to_record(validated, 4)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=6), st.sampled_from(["a/b", "%2F", "x%", "/"]), st.integers(-5, 99)),
                min_size=1, max_size=7))
def test_a_key_is_what_escaping_each_segment_makes_of_it(segments: list[str | int]) -> None:
    assert key_of(*segments) == "/".join(segment(s) if isinstance(s, str) else str(s) for s in segments)


def test_trusted_names_an_unknown_or_missing_field() -> None:
    with pytest.raises(TypeError, match=r"CommitStepApplied.trusted: unknown field\(s\) \['colour'\], missing "
                                        r"field\(s\) \['outcome'\]"):
        CommitStepApplied.trusted(**SEQUENCE, step_index=0, colour="red")


def rechecked(body: bytes, key: bytes) -> bytes:
    """A value's body with a fresh checksum: bytes that pass the checksum whatever they hold."""
    return body + zlib.crc32(body, zlib.crc32(key)).to_bytes(CHECKSUM_SIZE, "little")


def test_a_checksummed_record_that_fails_its_schema_is_the_same_named_error_from_a_view() -> None:
    """Cut in its payload, the view reads (its envelope is whole) and its fields and event are decode's error; cut
    in its envelope, the view itself is."""
    record = CODEC.to_record(CommitStepApplied(**SEQUENCE, step_index=2, outcome="executed", duration_ms=1.5), 4)
    value = record.value or b""
    corrupt = r"cannot decode the record at events\[3\]@41: Avro body of CommitStepApplied v1 is corrupt"
    in_payload = rechecked(value[: -CHECKSUM_SIZE - 9], record.key)
    view = CODEC.view(in_payload, "events", 3, 41, record.key)
    assert view.run_id == "r-1"
    for read in (lambda: CODEC.decode(in_payload, "events", 3, 41, record.key), view.fields, view.event):
        with pytest.raises(EventDecodeError, match=corrupt):
            read()
    frame_end = 4 + value[1]
    in_envelope = rechecked(value[: frame_end + 20], record.key)
    with pytest.raises(EventDecodeError, match=corrupt):
        CODEC.view(in_envelope, "events", 3, 41, record.key)


def test_a_views_invalid_field_is_the_named_error_when_its_event_is_asked_for() -> None:
    """A record well-formed by its schema but invalid for its model (a negative step index) reads as a view; its
    event is an EventDecodeError naming the record, as `decode` raises it."""
    record = CODEC.to_record(CommitStepApplied.trusted(**SEQUENCE, step_index=-1, outcome="executed"), 4)
    view = CODEC.view(record.value or b"", "events", 2, 9, record.key)
    assert view.fields()["step_index"] == -1
    for build in (view.event, lambda: CODEC.decode(record.value or b"", "events", 2, 9, record.key)):
        with pytest.raises(EventDecodeError, match=r"events\[2\]@9: CommitStepApplied v1 is invalid"):
            build()


def test_an_unchecked_record_read_as_a_view_has_its_event_id_checked() -> None:
    event = CommitStepApplied(**SEQUENCE, step_index=2, outcome="executed")
    record = CODEC.to_record(event, 4)
    unchecked = bytes([UNCHECKED_FRAME_MAGIC]) + (record.value or b"")[1:-CHECKSUM_SIZE]
    assert CODEC.view(unchecked, "events", 0, 3, record.key).event() == event
    with pytest.raises(EventDecodeError, match=r"events\[0\]@3: the event id of this CommitStepApplied v1 record"):
        CODEC.view(unchecked, "events", 0, 3, record.key.replace(b"step/2", b"step/3"))


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.db")), ids=lambda p: p.stem)
def test_every_record_of_an_old_log_reads_alike_as_a_view(fixture: Path, tmp_path: Path) -> None:
    shutil.copy(fixture, tmp_path / fixture.name)
    with open_log(f"sqlite:///{tmp_path / fixture.name}") as log:
        records = [r for r in log.read_records() if r.value is not None]
    assert records
    for r in records:
        assert r.value is not None
        view, event = CODEC.view(r.value, r.topic, r.partition, r.offset, r.key), CODEC.decode(
            r.value, r.topic, r.partition, r.offset, r.key)
        assert (view.job, view.run_id, view.dataset_urn, view.emitted_at) == (
            event.job, event.run_id, event.urn, event.emitted_at)
        assert view.event() == event


def test_the_fixed_events_of_every_type_built_unvalidated_encode_alike() -> None:
    for event in one_of_each():
        lean = type(event).trusted(**dict(event))
        assert lean == event and CODEC.to_record(lean, 4) == CODEC.to_record(event, 4)


def test_a_view_reads_long_names_and_an_unset_dataset() -> None:
    """Lengths of 64 bytes and more take several bytes in Avro; a run's event has no dataset."""
    long_job, long_urn = "j" * 300, "ü" * 70
    applied = CommitStepApplied(job=long_job, run_id="r" * 64, dataset_urn=long_urn, sequence_id="s", step_index=0,
                                outcome="verified")
    started = one_of_each(job=long_job)[0]
    for event in (applied, started):
        record = CODEC.to_record(event, 4)
        view = CODEC.view(record.value or b"", "t", 0, 0, record.key)
        assert (view.job, view.run_id, view.dataset_urn, view.emitted_at) == (
            event.job, event.run_id, event.urn, event.emitted_at)
    assert started.urn is None


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["files", "steps", "ids"]),
                       st.lists(st.one_of(names, st.integers(), st.none(), value_of(FsRenameStep)), max_size=6).map(
                           tuple), max_size=3),
       st.integers(1, 400))
def test_an_event_goes_in_one_part_exactly_when_its_lists_make_one_slice(lists: dict[str, tuple[Any, ...]],
                                                                         budget: int) -> None:
    assert fits_one_slice(lists, budget) == (len(split_fields(lists, budget)) == 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(value_of(PublishedFile), min_size=2, max_size=8).map(tuple),
       st.lists(value_of(WatermarkRange), max_size=4).map(tuple))
def test_a_published_event_said_to_fit_at_a_glance_makes_one_slice(files: tuple[PublishedFile, ...],
                                                                   ranges: tuple[WatermarkRange, ...]) -> None:
    """At the least budget the glance takes, item by item adds up to no more (the bound is one from above)."""
    event = DatasetPublished(**SEQUENCE, files=files, watermarks=ranges)
    low, high = 0, 10**7
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if event.fits_at_a_glance(middle) else (middle + 1, high)
    assert fits_one_slice({"files": files, "watermarks": ranges}, low)
    assert event.in_parts(low) == (event,)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(value_of(FsRenameStep), value_of(HighWatermarkStep), value_of(DatasetStateStep)),
                min_size=2, max_size=8).map(tuple))
def test_a_plan_said_to_fit_at_a_glance_makes_one_slice(steps: tuple[Any, ...]) -> None:
    """As for DatasetPublished: each step's quick size bounds its estimate from above, so the glance never says a
    plan fits that item by item would split."""
    assert all(quick_size(step) >= approx_size(step) for step in steps)
    event = CommitSequencePlanned(**SEQUENCE, steps=steps)
    low, high = 0, 10**7
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if event.fits_at_a_glance(middle) else (middle + 1, high)
    assert fits_one_slice({"steps": steps}, low)
    assert event.in_parts(low) == (event,)


def test_a_key_segment_of_a_str_subclass_is_its_characters() -> None:
    """join takes a str subclass as its characters, as the escaping path always did, whatever its __str__ says."""

    class Shouted(str):
        def __str__(self) -> str:
            return self.upper()

    assert key_of("commit", Shouted("planned"), 3) == "commit/planned/3"


def test_trusted_values_share_one_fields_set_that_a_copy_with_changes_leaves_alone() -> None:
    first = CommitStepApplied.trusted(**SEQUENCE, step_index=0, outcome="executed")
    second = CommitStepApplied.trusted(**SEQUENCE, step_index=1, outcome="verified")
    assert first.model_fields_set is second.model_fields_set
    assert first.model_fields_set == set(CommitStepApplied.model_fields)
    changed = first.model_copy(update={"step_index": 5})
    assert changed.step_index == 5 and changed.model_fields_set is not first.model_fields_set
    assert second.model_fields_set == set(CommitStepApplied.model_fields)
