"""Spark's file writers for a task attempt: one write of the task's DataFrame, through Spark's commit protocol.

The attempt's folder gets one `_wu=<index>` folder per work unit (Spark's `partitionBy`), whose files appear only
when Spark commits the job: a failed attempt leaves nothing there (with a time partitioner, one `_tp=<partition>`
folder per time partition inside it). When the records name their work unit themselves (a reader's UnitKey, written
unconverted), the files land in the attempt's folder, one per Spark partition, without the sort `partitionBy`
costs. results.py then moves each file to the attempt's own task-output folder as
`<dataset>/<partition>_<low>-<high>.<ext>`, the record engine's name for a watermark range.

The attempt folder may be local, on HDFS (`hdfs://`: the Hadoop client pyspark bundles; not `webhdfs://`:
engines/choice.py) or in a bucket
(`s3a://`, `s3://`: hadoop-aws, from the connector cache, spark_pipeline/connectors.py). Spark's client there gets the
job's own Hadoop keys (those oncelog's file systems take: filesystems/settings.py) as options of the write, so the
files it writes are the ones oncelog's file systems then list and move.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import DataFrame

from events.errors import ConfigError
from filesystems import urls
from filesystems.settings import FileSystemSettings
from spark_pipeline.constructs import UNIT_COLUMN
from spark_pipeline.engines.dataframe.partitions import PARTITION_COLUMN
from spark_pipeline.jobfile.config import JobConfig, WriterOutputFormat
from spark_pipeline.jobfile.partitions import PARTITIONER_KEY

CODEC_KEY = "writer.codec.type"
CODECS: dict[WriterOutputFormat, dict[str, str]] = {
    # Gobblin's names (and Spark's) → Spark's `compression` option; the first is the default.
    WriterOutputFormat.AVRO: {"snappy": "snappy", "deflate": "deflate", "null": "uncompressed",
                              "uncompressed": "uncompressed", "bzip2": "bzip2", "xz": "xz", "zstandard": "zstandard"},
    WriterOutputFormat.PARQUET: {"snappy": "snappy", "gzip": "gzip", "zstd": "zstd", "lz4": "lz4",
                                 "none": "none", "null": "none", "uncompressed": "uncompressed"},
    WriterOutputFormat.ORC: {"snappy": "snappy", "zlib": "zlib", "zstd": "zstd", "lz4": "lz4", "none": "none",
                             "null": "none"},
    WriterOutputFormat.JSON: {"none": "none", "null": "none", "gzip": "gzip", "bzip2": "bzip2", "deflate": "deflate",
                              "snappy": "snappy", "lz4": "lz4"},
}
SPARK_FORMATS = {WriterOutputFormat.AVRO: "avro", WriterOutputFormat.PARQUET: "parquet",
                 WriterOutputFormat.ORC: "orc", WriterOutputFormat.JSON: "json"}


@dataclass(frozen=True)
class WriterSettings:
    """How a job's output is written: Spark's format, its compression, and the Avro schema of the records."""

    output_format: WriterOutputFormat
    compression: str
    avro_schema: str | None
    """The records' Avro schema; None when SQL stages or DataFrame functions make the columns (Spark derives it)."""
    partitioned: bool = False
    """Whether the records carry their time partition (partitions.PARTITION_COLUMN): a folder level of its own."""

    @classmethod
    def of(cls, config: JobConfig, schema: str | None, branch: int = 0) -> WriterSettings:
        """A branch's writer.output.format and writer.codec.type (their `.N` forms first, in a forked job); a
        ConfigError naming the key if not written here. `schema`: the records' Avro schema (JSON), if known."""
        output_format = config.branch(branch).writer_output_format
        where = f" (branch {branch})" if config.fork_branches > 1 else ""
        codecs = CODECS.get(output_format)
        if codecs is None:
            raise ConfigError(f"writer.output.format{where}={output_format.value} is not written by the DataFrame "
                              f"engine ({', '.join(f.value for f in CODECS)})")
        key = codec_key(config, branch)
        given = config.properties.get(key, "").strip().lower()
        codec = given or next(iter(codecs))
        if codec not in codecs:
            raise ConfigError(f"{key}={given!r} is not a codec of {output_format.value} output (one of "
                              f"{', '.join(codecs)})")
        converted = config.converter_sql_select is not None or bool(config.converter_dataframe_functions)
        partitioned = bool(config.properties.get(PARTITIONER_KEY, "").strip())
        return cls(output_format, codecs[codec], None if converted else schema, partitioned)


def codec_key(config: JobConfig, branch: int) -> str:
    """The key a branch's codec is read from: `writer.codec.type.N` over `writer.codec.type` (the records engine's
    rule for a branch's writer keys)."""
    own = f"{CODEC_KEY}.{branch}"
    return own if config.properties.get(own, "").strip() else CODEC_KEY


S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"


def hadoop_options(properties: Mapping[str, str], folder: str) -> dict[str, str]:
    """The job's Hadoop keys (bare or `spark.hadoop.`, over $HADOOP_CONF_DIR's) as options of a write into `folder`:
    Spark opens the write's file system with a Hadoop configuration holding them. Read as oncelog's S3 file system
    reads them: an endpoint set without `fs.s3a.path.style.access` means path-style requests, and `s3://` is S3A."""
    options = dict(FileSystemSettings.of(properties).hadoop)
    if options.get("fs.s3a.endpoint", "").strip() and not options.get("fs.s3a.path.style.access", "").strip():
        options["fs.s3a.path.style.access"] = "true"
    if urls.parse(folder).scheme is urls.Scheme.S3:
        options.setdefault("fs.s3.impl", S3A)  # Hadoop has no s3:// file system of its own any more
    return options


def write_attempt(frame: DataFrame, settings: WriterSettings, folder: str, hadoop: Mapping[str, str],
                  unit_folders: bool = True) -> None:
    """Write the attempt's records under `folder`, one `_wu=<index>` folder per work unit, and in it one `_tp=<time
    partition>` folder per time partition when the job has a partitioner (Spark's commit protocol); `hadoop`: the
    options Spark's file system client takes (hadoop_options). Without `unit_folders`, each Spark task's file lands
    in `folder` itself (no sort by work unit: each Spark partition holds one, and its records name it)."""
    writer = (frame.write if unit_folders else frame.drop(UNIT_COLUMN).write).format(
        SPARK_FORMATS[settings.output_format]).mode("errorifexists").option("compression", settings.compression)
    if unit_folders:
        writer = writer.partitionBy(*((UNIT_COLUMN, PARTITION_COLUMN) if settings.partitioned else (UNIT_COLUMN,)))
    writer = writer.options(**hadoop)
    if settings.output_format is WriterOutputFormat.AVRO and settings.avro_schema is not None:
        writer = writer.option("avroSchema", settings.avro_schema)
    writer.save(urls.hadoop_uri(folder))
