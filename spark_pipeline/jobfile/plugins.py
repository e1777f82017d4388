"""Plugins named in a job file: the classes and functions its keys name by dotted path, imported and built.

Import errors become ValueErrors saying why the path cannot be used (validation turns them into problems naming the
key); `make_construct` checks that a configured class is of the construct kind its key takes.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from events.errors import ConfigError

if TYPE_CHECKING:
    from spark_pipeline.jobfile.config import JobConfig

T = TypeVar("T")


def import_function(path: str) -> Callable[..., Any]:
    """The function `module:function` or `module.function` names; a ValueError says why it cannot be used."""
    module_name, _, name = path.partition(":") if ":" in path else path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # importing user code: any error is a configuration problem naming it
        raise ValueError(f"cannot import module {module_name!r}: {type(e).__name__}: {e}") from e
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(f"module {module_name!r} has no function {name!r}")
    return cast(Callable[..., Any], function)


def import_class(path: str) -> type:
    """Import `package.module.Class` (or a nested class); a ValueError says why it cannot be used."""
    parts = path.split(".")
    first: str | None = None  # the error for the longest module path: the one worth reporting
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not (module_name == e.name or module_name.startswith(f"{e.name}.")):
                raise ValueError(f"importing module {module_name!r} failed: {e}") from e  # a dependency is missing
            first = first or f"cannot import module {module_name!r}: {e}{_java_hint(path)}"
            continue  # perhaps a nested class: try a shorter module path
        except Exception as e:  # any error raised by importing user code is a configuration problem naming it
            raise ValueError(f"importing module {module_name!r} failed: {type(e).__name__}: {e}") from e
        target: Any = module
        for attribute in parts[split:]:
            if not hasattr(target, attribute):
                raise ValueError(first or f"{module_name!r} has no attribute {'.'.join(parts[split:])!r}")
            target = getattr(target, attribute)
        if not isinstance(target, type):
            raise ValueError(f"{path!r} is a {type(target).__name__}, not a class")
        return target
    raise ValueError(first or f"{path!r} is not a dotted path to a class (module.Class)")


GOBBLIN_SOURCES = ((re.compile(r"Kafka\w*Source"), "spark_pipeline.sources.kafka_topic.KafkaTopicSource"),
                   (re.compile(r"\w*File(Based)?Source"), "spark_pipeline.sources.directory.DirectorySource"))
"""Gobblin's source classes by simple name (KafkaSimpleSource, TextFileBasedSource…) -> oncelog's source for them."""


def _java_hint(path: str) -> str:
    """A hint for Gobblin's Java class names, which cannot be imported: oncelog's own class for a Gobblin source."""
    if not path.startswith(("org.apache.gobblin.", "gobblin.", "com.linkedin.")):
        return ""
    name = path.rpartition(".")[2]
    ours = next((python for pattern, python in GOBBLIN_SOURCES if pattern.fullmatch(name)), None)
    if ours is not None:
        return f"; this is a Gobblin Java class: oncelog's source for it is {ours}"
    return "; this is a Gobblin Java class: name a Python class (module.Class) instead"


def make_construct(config: JobConfig, key: str, path: str, base: type[T], *args: object) -> T:
    """Build the construct a config key names; a class of the wrong kind is an error naming key and class."""
    cls = import_class(path)
    if not issubclass(cls, base):
        raise ConfigError(f"{key}={path!r} is not a {base.__name__} "
                          f"(subclass spark_pipeline.constructs.{base.__name__})")
    factory = cast(Callable[..., T], cls)
    return factory(config, *args)
