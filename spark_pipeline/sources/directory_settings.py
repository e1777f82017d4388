"""The directory source's keys (Gobblin's `source.filebased.*`) and the watermarks of places in a file, shared by its
record extractors (directory.py) and its Spark readers (directory_frame.py).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

import fastavro
from fastavro.schema import SchemaParseException
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
)

SCALE = 1_000_000
COMPLETE = SCALE - 1
DIRECTORY = "source.filebased.data.directory"
FILE, SCHEMA_PROPERTY = "source.filebased.file", "source.filebased.avro.schema"
FORMAT_KEY, SPARK_SCHEMA_KEY = "source.filebased.format", "source.filebased.schema"
SPARK_SCHEMA_PROPERTY = "source.filebased.spark.schema"
"""A work unit's Spark schema (DDL) for the formats only Spark reads: the job's, or inferred once per run."""
SPARK_ONLY_FORMATS = ("parquet", "orc", "csv")
"""Input formats the DataFrame engine reads (Spark's readers) and the records engine does not."""
LINES_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "TextLine", "namespace": "oncelog.files",
    "fields": [{"name": "file", "type": "string"}, {"name": "line_number", "type": "long"},
               {"name": "text", "type": "string"}],
}
JSON_SCHEMA: dict[str, Any] = {
    "type": "record", "name": "JsonLine", "namespace": "oncelog.files",
    "fields": [{"name": "file", "type": "string"}, {"name": "line_number", "type": "long"},
               {"name": "json", "type": "string"}],
}


def position(offset: int, records: int = 0) -> int:
    """The watermark of a place in a file: a byte offset, plus records read from the Avro block there."""
    return offset * SCALE + records


def complete(size: int) -> int:
    """The watermark of a file read to its end (`size` bytes)."""
    return size * SCALE + COMPLETE


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


class DirectorySettings(BaseModel):
    """The keys of the directory source (Gobblin's `source.filebased.*` names)."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)
    directory: str = Field(alias="source.filebased.data.directory", min_length=1)
    pattern: str = Field(default="*", alias="source.filebased.files.pattern", min_length=1)
    """A glob matched against file names (against the relative path when it holds a '/')."""
    recursive: bool = Field(default=False, alias="source.filebased.recursive")
    format: Annotated[Literal["lines", "avro", "json", "parquet", "orc", "csv"], BeforeValidator(_lower)] = Field(
        default="lines", alias="source.filebased.format")
    max_files: int | None = Field(default=None, ge=1, alias="source.filebased.max.files.per.run")
    json_schema: str | None = Field(default=None, alias="source.filebased.json.schema")
    """For `json`: an Avro record schema the objects are records of; without it, records carry the JSON text."""
    spark_schema: str | None = Field(default=None, alias="source.filebased.schema", min_length=1)
    """For `parquet`, `orc`, `csv` (DataFrame engine): the records' schema as a Spark DDL string; without it,
    Spark infers it once per run from the run's files."""
    csv_header: bool = Field(default=True, alias="source.filebased.csv.header")
    """For `csv`: whether each file's first line names the columns (it is then not a record)."""

    @field_validator("spark_schema")
    @classmethod
    def _spark_schema_format(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("format") not in SPARK_ONLY_FORMATS:
            raise ValueError(f"a Spark schema is for the formats Spark reads ({', '.join(SPARK_ONLY_FORMATS)}), not "
                             f"{info.data.get('format')!r}")
        return value

    @field_validator("json_schema")
    @classmethod
    def _schema(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                fastavro.parse_schema(json.loads(value))
            except (ValueError, TypeError, KeyError, SchemaParseException) as e:
                raise ValueError(f"not an Avro schema in JSON: {e}") from e
        return value
