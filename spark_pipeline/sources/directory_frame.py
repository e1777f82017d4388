"""The directory source's work units as one DataFrame (its DataFrameReader): Spark's readers on exactly the files
the run planned.

Each work unit is one file, read whole by one reader and tagged with its work unit index. `lines` and `json` read the
file's bytes (Spark's binaryFile reader) from the work unit's low watermark up to its size at planning and split
them into lines in Spark SQL, so the records, their line numbers and the blank-line rule are the records engine's.
`avro` is Spark's Avro reader with the run's Avro schema (the work unit's `source.filebased.avro.schema`);
`parquet`, `orc` and `csv` are Spark's readers with the work unit's `source.filebased.spark.schema` (the job's
`source.filebased.schema`, or the schema Spark inferred once when the run was planned). No record enters Python.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import reduce

from pyspark.errors import AnalysisException, ParseException, PySparkRuntimeError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from events.errors import ConfigError
from events.job import WorkUnitSpec
from filesystems import urls
from spark_pipeline.constructs import UNIT_COLUMN, SourceError
from spark_pipeline.sources.directory_settings import (
    FILE,
    FORMAT_KEY,
    SCALE,
    SCHEMA_PROPERTY,
    SPARK_SCHEMA_KEY,
    SPARK_SCHEMA_PROPERTY,
    DirectorySettings,
)

_GLOB = re.compile(r"([\\{}\[\]*?])")


def spark_path(location: str) -> str:
    """A planned file as Spark's readers take it: a Hadoop URI with glob characters escaped (one file, never more)."""
    return _GLOB.sub(r"\\\1", urls.hadoop_uri(location))


def checked_schema(ddl: str) -> str:
    """The job's Spark schema as DDL, parsed: a ConfigError naming source.filebased.schema if Spark rejects it."""
    try:
        parsed = DataType.fromDDL(ddl)
    except (ParseException, AnalysisException) as e:
        raise ConfigError(f"{SPARK_SCHEMA_KEY}={ddl!r} is not a Spark DDL schema: {str(e).splitlines()[0]}") from e
    if not isinstance(parsed, StructType):
        raise ConfigError(f"{SPARK_SCHEMA_KEY}={ddl!r} is not a list of columns")
    return parsed.toDDL()


def _active_spark(why: str) -> SparkSession:
    """The driver's Spark session, from any thread (the DataFrame engine started it before planning)."""
    try:
        return SparkSession.active()
    except PySparkRuntimeError as e:
        raise SourceError(f"{why}: no Spark session is running (formats only Spark reads run on the DataFrame "
                          f"engine)") from e


def infer_schema(file_format: str, paths: Sequence[str], header: bool) -> str:
    """Spark's schema (DDL) of a run's files, inferred once when the run is planned."""
    spark = _active_spark(f"{FORMAT_KEY}={file_format} without {SPARK_SCHEMA_KEY}")
    reader = spark.read.format(file_format)
    if file_format == "csv":
        reader = reader.option("header", header).option("inferSchema", True)
    try:
        return reader.load([spark_path(p) for p in paths]).schema.toDDL()
    except AnalysisException as e:
        raise SourceError(f"{FORMAT_KEY}={file_format}: Spark cannot infer the schema of the run's files "
                          f"(give {SPARK_SCHEMA_KEY}): {str(e).splitlines()[0]}") from e


def file_frame(spark: SparkSession, settings: DirectorySettings, unit: WorkUnitSpec) -> DataFrame:
    """One work unit's records, as the records engine's extractor for the format reads them."""
    if settings.format == "lines":
        return lines(spark, unit)
    if settings.format == "json":
        return json_records(spark, unit, settings.json_schema)
    path = unit.properties[FILE]
    if unit.low_watermark > 0:
        raise SourceError(f"{path} was partly read by the records engine (watermark {unit.low_watermark}): the "
                          f"DataFrame engine reads {settings.format} files whole (run it with task.engine=records)")
    if settings.format == "avro":
        reader = spark.read.format("avro").option("avroSchema", unit.properties[SCHEMA_PROPERTY])
    else:
        reader = spark.read.format(settings.format).schema(unit.properties[SPARK_SCHEMA_PROPERTY])
    if settings.format == "csv":
        reader = reader.option("header", settings.csv_header).option("mode", "FAILFAST")
    return unchanged(reader.load(spark_path(path)), unit)


def unchanged(frame: DataFrame, unit: WorkUnitSpec) -> DataFrame:
    """`frame`, failing at its first record if the file's size is not its size at planning (a file read whole must
    be the file planned: its watermark says it was read to that size)."""
    size = unit.expected_high_watermark // SCALE
    message = F.concat(F.lit(f"{unit.properties[FILE]} is "), F.col("_metadata.file_size").cast("string"),
                       F.lit(f" bytes, {size} when the run was planned: it changed since (files must be complete "
                             f"when they appear under a visible name)"))
    same = F.when(F.col("_metadata.file_size") == F.lit(size), F.lit(True)).otherwise(F.raise_error(message))
    return frame.where(same)


def lines(spark: SparkSession, unit: WorkUnitSpec) -> DataFrame:
    """The lines of a file from the low watermark's byte up to its size at planning: {file, line_number, text}."""
    path = unit.properties[FILE]
    low, size = unit.low_watermark // SCALE, unit.expected_high_watermark // SCALE
    content = F.col("content")
    body = F.substring(content, low + 1, size - low)
    short = F.concat(F.lit(f"{path} ended at byte "), F.length(content).cast("string"),
                     F.lit(f", before its size at planning ({size})"))
    not_utf8 = F.lit(f"{path} is not UTF-8 between bytes {low} and {size}")
    text = (F.when(F.length(content) < F.lit(size), F.raise_error(short))
            .when(~F.is_valid_utf8(body.cast("string")), F.raise_error(not_utf8))
            .otherwise(body.cast("string")))
    before = (F.size(F.split(F.substring(content, 1, low).cast("string"), "\n", -1)) - 1) if low else F.lit(0)
    split = (spark.read.format("binaryFile").load(spark_path(path))
             .select(F.split(text, "\n", -1).alias("lines"), before.alias("before"))
             .select(F.posexplode_outer("lines").alias("pos", "line"), "before", F.size("lines").alias("count")))
    # posexplode_outer: a split is never empty, and the plain form makes Spark add a filter that splits again.
    last_empty = (F.col("pos") == F.col("count") - 1) & (F.col("line") == F.lit(""))
    return split.where(~last_empty).select(
        F.lit(unit.partition).alias("file"), (F.col("before") + F.col("pos") + 1).cast("long").alias("line_number"),
        F.regexp_replace(F.col("line"), "\r\\z", "").alias("text"))


def json_records(spark: SparkSession, unit: WorkUnitSpec, schema_json: str | None) -> DataFrame:
    """`json`: every non-blank line a JSON value; as {file, line_number, json}, or parsed by the Avro schema."""
    path = unit.properties[FILE]
    values = lines(spark, unit).where(~F.col("text").rlike(r"(?U)^\s*\z"))
    number = F.col("line_number").cast("string")
    if schema_json is None:
        bad = F.concat(F.lit(f"{path} line "), number, F.lit(" is not JSON"))
        checked: Column = F.when(F.try_parse_json(F.col("text")).isNull(), F.raise_error(bad)).otherwise(F.col("text"))
        return values.select("file", "line_number", checked.alias("json"))
    struct = spark_type_of_avro(spark, schema_json)
    parsed = F.from_json(F.col("text"), struct, {"mode": "FAILFAST"})
    return values.select(parsed.alias("record")).select("record.*")


def spark_type_of_avro(spark: SparkSession, schema_json: str) -> StructType:
    """The Spark type of an Avro record schema (spark-avro's own conversion, in the JVM)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    avro = jvm.org.apache.avro.Schema.Parser().parse(schema_json)
    converted = jvm.org.apache.spark.sql.avro.SchemaConverters.toSqlType(avro).dataType().json()
    struct = StructType.fromJson(json.loads(converted))
    return struct


def union_all(frames: Sequence[DataFrame]) -> DataFrame:
    """The frames' union by column name, built as a balanced tree: a chain of N unions nests N deep and Spark
    analyses the growing plan at every step; a tree keeps the depth logarithmic."""
    while len(frames) > 1:
        frames = [reduce(DataFrame.unionByName, frames[i:i + 2]) for i in range(0, len(frames), 2)]
    return frames[0]


def directory_frame(spark: SparkSession, settings: DirectorySettings, units: Sequence[tuple[int, WorkUnitSpec]]
                    ) -> DataFrame:
    """Every unit's file, read whole by its reader and tagged with its index in the task, as one frame."""
    return union_all([file_frame(spark, settings, u).withColumn(UNIT_COLUMN, F.lit(i)) for i, u in units])
