"""Avro's binary encoding of our own event models, generated as Python source once per event type.

The codec's general path turns an event into dicts (`codec.datum_builder`), then writes those (`avro_encoder`): two
walks, and a dict built for every nested record. A commit batch holds thousands of nested entries, so the event
types get a writer generated from their schema and model together: one flat function per record type, reading each
model's fields where they are. It writes the same bytes (a property test compares the two on every event type). It
handles only values it was generated for: anything else (a value that does not fit, a subclass in a union) makes it
raise, and the caller writes the event through the general path, which writes it or names what does not fit.
"""

from __future__ import annotations

import struct
import types
import typing
from collections.abc import Callable
from typing import Any, Union

from pydantic import BaseModel

from events.avro_encoder import PRIMITIVES, write_long

EventWrite = Callable[..., None]
"""`write(out, model, *extras)`: appends the encoding of the model, the fields named as extras taken from the extras."""


class UnhandledValue(Exception):  # noqa: N818 - a signal to the caller, never shown
    """A value the generated writer was not made for: the caller writes it through the general path."""


class UnsupportedSchema(Exception):  # noqa: N818 - caught by the codec, which then uses the general path only
    """A schema and model this generator does not pair (the general path writes such an event type)."""


def compile_event_writer(schema: Any, model: type[BaseModel], extras: tuple[str, ...]) -> EventWrite:
    """The generated writer of a parsed Avro record schema whose fields are `model`'s and `extras`.

    Raises UnsupportedSchema when the schema and model do not pair as the schema builder pairs them.
    """
    generator = _Generator()
    top = generator.record_function(schema, model, extras)
    return typing.cast(EventWrite, generator.build()[top])


class _Generator:
    """Writes the source of one function per record type, then compiles them together in one namespace."""

    def __init__(self) -> None:
        self.sources: list[str] = []
        self.namespace: dict[str, Any] = {
            "write_long": write_long, "_unhandled": UnhandledValue, "_double": struct.Struct("<d").pack,
            "_float": struct.Struct("<f").pack}
        self.named: dict[str, Any] = {}
        self.functions: dict[tuple[str, type[BaseModel]], str] = {}
        self.counter = 0

    def build(self) -> dict[str, Any]:
        exec(compile("\n\n".join(self.sources), "<avro_model_writer>", "exec"), self.namespace)  # noqa: S102
        return self.namespace

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def constant(self, value: Any, prefix: str) -> str:
        name = self.fresh(prefix)
        self.namespace[name] = value
        return name

    def resolve(self, schema: Any) -> Any:
        """The schema itself where it is a reference to a named type defined before; named types remembered."""
        if isinstance(schema, str) and schema not in PRIMITIVES:
            if schema not in self.named:
                raise UnsupportedSchema(f"type {schema!r} used before it is defined")
            return self.named[schema]
        if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
            self.named[schema["name"]] = schema
        if isinstance(schema, dict) and not isinstance(schema["type"], str):
            return self.resolve(schema["type"])
        if isinstance(schema, dict) and schema["type"] in PRIMITIVES:
            return schema["type"]
        return schema

    def record_function(self, schema: Any, model: type[BaseModel], extras: tuple[str, ...] = ()) -> str:
        """The name of the function writing `model` as the record `schema` (generated on first use)."""
        schema = self.resolve(schema)
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise UnsupportedSchema(f"{model.__name__} is written as {schema!r}, not as a record")
        if schema["name"].rpartition(".")[2] not in (model.__name__, model.__name__.removesuffix("Payload")):
            raise UnsupportedSchema(f"record {schema['name']} is not the model {model.__name__}")
        if (schema["name"], model) in self.functions:
            return self.functions[schema["name"], model]
        name = self.fresh(f"write_{model.__name__}_")
        self.functions[schema["name"], model] = name
        lines = [f"def {name}(out, value, {', '.join(extras)}):" if extras else f"def {name}(out, value):",
                 "    fields = value.__dict__"]
        for field in schema["fields"]:
            field_name = field["name"]
            if field_name in extras:
                expression, annotation = field_name, None
            elif field_name in model.model_fields:
                expression, annotation = f"fields[{field_name!r}]", model.model_fields[field_name].annotation
            elif "default" in field:
                expression, annotation = self.constant(field["default"], "default"), None
            else:
                raise UnsupportedSchema(f"{schema['name']}.{field_name} is neither a field of {model.__name__} "
                                        "nor given, and has no default")
            lines += self.write(field["type"], annotation, expression, "    ")
        self.sources.append("\n".join(lines))
        return name

    def write(self, schema: Any, annotation: Any, expression: str, indent: str) -> list[str]:
        """The lines writing the value of `expression` as `schema` (its Python type `annotation`, None if unknown)."""
        schema, annotation = self.resolve(schema), _bare(annotation)
        if isinstance(schema, list):
            return self.union(schema, annotation, expression, indent)
        if isinstance(schema, str):
            return _primitive(schema, expression, indent, self.fresh("v"))
        kind = schema["type"]
        if kind == "record":
            if not _is_model(annotation):
                raise UnsupportedSchema(f"record {schema['name']} held by {annotation!r}, not a model")
            return [f"{indent}{self.record_function(schema, annotation)}(out, {expression})"]
        if kind == "enum":
            encoded = {symbol: _long_bytes(index) for index, symbol in enumerate(schema["symbols"])}
            return [f"{indent}out += {self.constant(encoded, 'symbols')}[{expression}]"]
        if kind == "fixed":
            value = self.fresh("v")
            return [f"{indent}{value} = {expression}", f"{indent}if len({value}) != {schema['size']}: raise _unhandled",
                    f"{indent}out += {value}"]
        if kind == "array":
            return self.sequence(schema["items"], _item_annotation(annotation, tuple), expression, indent, False)
        if kind == "map":
            return self.sequence(schema["values"], _item_annotation(annotation, dict), expression, indent, True)
        raise UnsupportedSchema(f"Avro type {kind!r}")

    def sequence(self, items: Any, annotation: Any, expression: str, indent: str, keyed: bool) -> list[str]:
        """An array's or a map's blocks: its count, then each item (a map's key first), then the end of blocks."""
        value, item, key = self.fresh("v"), self.fresh("item"), self.fresh("key")
        loop = f"for {key}, {item} in {value}.items():" if keyed else f"for {item} in {value}:"
        body = indent + "        "
        return [f"{indent}{value} = {expression}", f"{indent}if {value}:",
                f"{indent}    write_long(out, len({value}))", f"{indent}    {loop}",
                *(_primitive("string", key, body, self.fresh("v")) if keyed else []),
                *self.write(items, annotation, item, body), f"{indent}out.append(0)"]

    def union(self, branches: list[Any], annotation: Any, expression: str, indent: str) -> list[str]:
        """A union: the value's branch found by the value itself (None, or a model's exact type), else the one
        branch left; its index, then its encoding."""
        value, resolved = self.fresh("v"), [self.resolve(branch) for branch in branches]
        models = {model.__name__: model for model in _branches(annotation) if _is_model(model)}
        lines, keyword, others = [f"{indent}{value} = {expression}"], "if", []
        for index, branch in enumerate(resolved):
            if index >= 64:
                raise UnsupportedSchema("a union of more than 64 branches")
            if branch == "null":
                lines += [f"{indent}{keyword} {value} is None:", f"{indent}    out.append({index << 1})"]
            elif isinstance(branch, dict) and branch["type"] == "record":
                model = models.get(branch["name"].rpartition(".")[2])
                if model is None:
                    raise UnsupportedSchema(f"union branch {branch['name']} is no model of {annotation!r}")
                lines += [f"{indent}{keyword} type({value}) is {self.constant(model, 'model')}:",
                          f"{indent}    out.append({index << 1})",
                          *self.write(branch, model, value, indent + "    ")]
            else:
                others.append((index, branch))
                continue
            keyword = "elif"
        # the value is none of the branches above: the one branch left, if there is one
        if keyword == "elif":
            lines.append(f"{indent}else:")
            indent += "    "
        if len(others) != 1:
            return [*lines, f"{indent}raise _unhandled"]
        index, branch = others[0]
        rest = [a for a in _branches(annotation) if a is not type(None) and not _is_model(a)]
        return [*lines, f"{indent}out.append({index << 1})",
                *self.write(branch, rest[0] if len(rest) == 1 else None, value, indent)]


def _primitive(kind: str, expression: str, indent: str, local: str) -> list[str]:
    """The lines writing a primitive value (`local`: a name free for a temporary)."""
    if kind == "string":
        return [f"{indent}{local} = {expression}.encode()", f"{indent}if len({local}) < 64:",
                f"{indent}    out.append(len({local}) << 1)", f"{indent}else:",
                f"{indent}    write_long(out, len({local}))", f"{indent}out += {local}"]
    if kind in ("long", "int"):
        lines = [f"{indent}{local} = {expression}", f"{indent}if 0 <= {local} < 64:",
                 f"{indent}    out.append({local} << 1)", f"{indent}else:"]
        if kind == "int":
            lines.append(f"{indent}    if not -2147483648 <= {local} <= 2147483647: raise _unhandled")
        return [*lines, f"{indent}    write_long(out, {local})"]
    if kind == "bytes":
        return [f"{indent}{local} = {expression}", f"{indent}write_long(out, len({local}))", f"{indent}out += {local}"]
    return [{
        "null": f"{indent}if {expression} is not None: raise _unhandled",
        "boolean": f"{indent}out.append(1 if {expression} else 0)",
        "double": f"{indent}out += _double({expression})",
        "float": f"{indent}out += _float({expression})",
    }[kind]]


def _long_bytes(value: int) -> bytes:
    out = bytearray()
    write_long(out, value)
    return bytes(out)


def _bare(annotation: Any) -> Any:
    """The annotation without `Annotated`'s metadata."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _branches(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [_bare(branch) for branch in typing.get_args(annotation)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _item_annotation(annotation: Any, container: type) -> Any:
    """What a `tuple[X, ...]` or a `dict[str, X]` holds (None if the annotation says otherwise)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is container and args:
        return _bare(args[0] if container is tuple else args[-1])
    return None
