"""The job's DataFrame stages between a source's read and the writer: a row policy and a converter in Spark SQL.

`qualitychecker.row.sql` is a condition every record must meet (MANDATORY: the first record that fails it fails its
task, naming the condition and the record's offset); `converter.sql.select` is the select list that makes the
records written. Both run in the JVM: no record enters Python. Neither drops records, so a work unit's counts and
watermarks are the source's.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from events.errors import ConfigError
from spark_pipeline.config import JobConfig
from spark_pipeline.dataframe.sources import UNIT

SELECT_KEY = "converter.sql.select"
POLICY_KEY = "qualitychecker.row.sql"


def has_stages(config: JobConfig) -> bool:
    """Whether the job changes or checks its records on the way to the writer."""
    return config.row_policy_sql is not None or config.converter_sql_select is not None


def transform(config: JobConfig, frame: DataFrame) -> DataFrame:
    """The records the job writes: `frame` checked by its row policy, then converted by its select list."""
    if config.row_policy_sql is not None:
        frame = checked(frame, config.row_policy_sql)
    if config.converter_sql_select is not None:
        frame = selected(frame, config.converter_sql_select)
    return frame


def checked(frame: DataFrame, condition: str) -> DataFrame:
    """`frame`, failing at the first record where `condition` is false or null (Gobblin's MANDATORY row policy)."""
    holds = _expression(frame, POLICY_KEY, condition)
    message = F.concat(F.lit(f"{POLICY_KEY} {condition!r} failed for the record at "), where(frame))
    gate = F.when(F.coalesce(holds, F.lit(False)), F.lit(True)).otherwise(F.raise_error(message))
    return frame.where(gate)


def where(frame: DataFrame) -> F.Column:
    """Where a record is, for an error: its offset and partition (Kafka, synthetic) or its file and line."""
    if "offset" in frame.columns:
        return F.concat(F.lit("offset "), F.col("offset").cast("string"), F.lit(" of partition "),
                        F.col("partition").cast("string"))
    if "line_number" in frame.columns:
        return F.concat(F.lit("line "), F.col("line_number").cast("string"), F.lit(" of file "), F.col("file"))
    return F.lit("a record (its file has no line numbers)")


def selected(frame: DataFrame, select_list: str) -> DataFrame:
    """`frame` through the select list, as `SELECT <list> FROM records` (its work unit column kept for the writer's
    folders, whether or not the list's `*` brings it)."""
    escaped = select_list.replace("{", "{{").replace("}", "}}")
    try:
        converted = frame.sparkSession.sql(f"SELECT {escaped}, {UNIT} FROM {{records}}", records=frame)
    except AnalysisException as e:
        raise ConfigError(f"{SELECT_KEY}={select_list!r} is not a select list over the source's columns "
                          f"({', '.join(c for c in frame.columns if c != UNIT)}): {_first_line(e)}") from e
    names = converted.columns
    extra = [f"_oncelog_extra_{i}" for i, name in enumerate(names[:-1]) if name == UNIT]
    if not extra:
        return converted
    renamed = converted.toDF(*[f"_oncelog_extra_{i}" if name == UNIT and i < len(names) - 1 else name
                               for i, name in enumerate(names)])
    return renamed.drop(*extra)


def _expression(frame: DataFrame, key: str, text: str) -> F.Column:
    """A SQL expression over `frame`'s columns, analysed now: a ConfigError naming the key if Spark rejects it."""
    try:
        column = F.expr(text)
        frame.select(column).schema
    except AnalysisException as e:
        raise ConfigError(f"{key}={text!r} is not a condition over the source's columns "
                          f"({', '.join(c for c in frame.columns if c != UNIT)}): {_first_line(e)}") from e
    return column


def _first_line(error: Exception) -> str:
    """Spark's message without its plan and stack."""
    return str(error).strip().splitlines()[0][:500]
