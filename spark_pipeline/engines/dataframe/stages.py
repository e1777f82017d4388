"""The job's DataFrame stages between a source's read and the writer: row policies and converters.

`qualitychecker.row.sql` is a condition every record must meet; `qualitychecker.row.sql.type` says what a failing
record does: MANDATORY (the default) fails its task, naming the condition and the record's offset; OPTIONAL lets it
through, counted; ERR_FILE diverts it to `qualitychecker.row.err.file` instead of the dataset. `converter.sql.select`
is the select list that makes the records written; `converter.dataframe.functions` are Python functions
DataFrame -> DataFrame applied after it. Dropped or diverted records change the records written, never the
watermarks: a work unit's actual high watermark is what was read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import cast

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from events.errors import ConfigError
from spark_pipeline.constructs import UNIT_COLUMN
from spark_pipeline.engines.dataframe.record_stages import (
    VERDICT,
    Attempt,
    Verdict,
    diverts,
    has_record_stages,
    record_stage,
)
from spark_pipeline.jobfile.config import JobConfig, PolicyType
from spark_pipeline.jobfile.plugins import import_function

SELECT_KEY = "converter.sql.select"
POLICY_KEY = "qualitychecker.row.sql"
FUNCTIONS_KEY = "converter.dataframe.functions"
PLANNING = Attempt("planning", "planning", 1, ())
"""The attempt of a frame that is analysed or explained, never run."""

FrameFunction = Callable[[DataFrame], DataFrame]


@dataclass(frozen=True)
class Staged:
    """The records a task writes, and those its ERR_FILE policies diverted (each frame as its policy saw it)."""

    written: DataFrame
    diverted: tuple[DataFrame, ...] = ()
    cached: tuple[DataFrame, ...] = ()
    """Frames persisted so that the diverted records and the written ones come from one read."""
    flagged: tuple[Observation, ...] = field(default=())
    """Per OPTIONAL policy: how many records failed it (`flagged`), known once the write ran."""
    drops: bool = False
    """Whether the records written may not be those read, one for one (row policies, record converters, DataFrame
    functions): a work unit's written count is then observed."""
    rejected: tuple[Observation, ...] = ()
    """Per dropping or diverting stage: the records each work unit rejected (`r<i>`), known once the write ran."""

    def release(self) -> None:
        """Drop what was persisted for the attempt."""
        for frame in self.cached:
            frame.unpersist()

    def flagged_count(self) -> int:
        """Records that failed an OPTIONAL policy (each policy counted apart)."""
        return sum(int(o.get.get("flagged") or 0) for o in self.flagged)

    def rejected_counts(self, units: int) -> list[int]:
        """Per work unit: the records its row policies rejected (dropped or diverted), as the record engine counts."""
        return [sum(int(o.get.get(f"r{i}") or 0) for o in self.rejected) for i in range(units)]


def has_stages(config: JobConfig) -> bool:
    """Whether the job changes or checks its records on the way to the writer."""
    return (config.row_policy_sql is not None or config.converter_sql_select is not None
            or bool(config.converter_dataframe_functions) or has_record_stages(config))


def drops_records(config: JobConfig) -> bool:
    """Whether a stage may write fewer records than it reads (record converters, record row policies, DataFrame
    functions, an ERR_FILE SQL policy): the records written are then observed apart from those read."""
    return (bool(config.converter_classes or config.row_policy_classes or config.converter_dataframe_functions)
            or (config.row_policy_sql is not None and config.row_policy_sql_type is PolicyType.ERR_FILE))


def transform(config: JobConfig, frame: DataFrame, attempt: Attempt = PLANNING) -> Staged:
    """The records the job writes, in Gobblin's order: converters, then quality checkers. `frame` through its record
    converters (mapInArrow), its select list and its DataFrame functions, then checked by its record row policies
    (in the record converters' mapInArrow when no SQL or DataFrame converter comes between) and its SQL row policy."""
    staged = Staged(frame)
    units = len(attempt.units)
    late = has_frame_converters(config)
    policies = bool(config.row_policy_classes)
    if config.converter_classes or (policies and not late):
        judging = policies and not late
        staged = judged(staged, record_stage(config, frame, attempt, judging=judging), units,
                        judging and diverts(config))
    frame = staged.written
    if config.converter_sql_select is not None:
        frame = selected(frame, config.converter_sql_select)
    for path in config.converter_dataframe_functions:
        frame = applied(frame, path)
    staged = replace(staged, written=frame)
    if policies and late:
        staged = judged(staged, record_stage(config, frame, attempt, converting=False), units, diverts(config))
    if config.row_policy_sql is not None:
        staged = policy_stage(staged, config.row_policy_sql, config.row_policy_sql_type, units)
    return replace(staged, drops=drops_records(config))


def keeps_records(config: JobConfig) -> bool:
    """Whether every record written is one the source read, unchanged (no converter of any kind; a row policy only
    keeps, drops or diverts it)."""
    return not (config.converter_classes or has_frame_converters(config))


def has_frame_converters(config: JobConfig) -> bool:
    """Whether the job converts its records in Spark (a select list or DataFrame functions)."""
    return config.converter_sql_select is not None or bool(config.converter_dataframe_functions)


def policy_stage(staged: Staged, condition: str, kind: PolicyType, units: int) -> Staged:
    """The SQL row policy of the given type over the records so far."""
    frame = staged.written
    if kind is PolicyType.MANDATORY:
        return replace(staged, written=checked(frame, condition))
    holds = F.coalesce(_expression(frame, POLICY_KEY, condition), F.lit(False))
    if kind is PolicyType.OPTIONAL:
        observation = Observation()
        counted = frame.observe(observation, F.count_if(~holds).alias("flagged"))
        return replace(staged, written=counted, flagged=(*staged.flagged, observation))
    verdict = F.when(holds, F.lit(int(Verdict.KEPT))).otherwise(F.lit(int(Verdict.DIVERTED)))
    return judged(staged, frame.withColumn(VERDICT, verdict), units, diverting=True)


def judged(staged: Staged, marked: DataFrame, units: int, diverting: bool) -> Staged:
    """Split `marked` on its verdict column: the kept records go on, the diverted ones to the error file (one read:
    persisted when some are diverted); the rejected ones counted per work unit."""
    rejected = F.col(VERDICT).isin(int(Verdict.DIVERTED), int(Verdict.DROPPED))
    observations = staged.rejected
    if units:
        observation = Observation()
        marked = marked.observe(observation, *[F.count_if(rejected & (F.col(UNIT_COLUMN) == F.lit(i))).alias(f"r{i}")
                                               for i in range(units)])
        observations = (*observations, observation)
    kept = marked.persist() if diverting else marked
    written = kept.where(F.col(VERDICT) == F.lit(int(Verdict.KEPT))).drop(VERDICT)
    diverted = (kept.where(F.col(VERDICT).isin(int(Verdict.DIVERTED), int(Verdict.DIVERTED_AGAIN))).drop(VERDICT),
                ) if diverting else ()
    return Staged(written, (*staged.diverted, *diverted), (*staged.cached, kept) if diverting else staged.cached,
                  staged.flagged, staged.drops, observations)


def applied(frame: DataFrame, path: str) -> DataFrame:
    """`frame` through the Python function `path` names; it must return a DataFrame keeping the work unit column."""
    function = frame_function(path)
    try:
        out = function(frame)
    except AnalysisException as e:
        raise ConfigError(f"{FUNCTIONS_KEY}: {path} failed on the records' columns "
                          f"({', '.join(c for c in frame.columns if c != UNIT_COLUMN)}): {_first_line(e)}") from e
    if not isinstance(out, DataFrame):
        raise ConfigError(f"{FUNCTIONS_KEY}: {path} returned {type(out).__name__}, not a DataFrame")
    if UNIT_COLUMN not in out.columns:
        raise ConfigError(f"{FUNCTIONS_KEY}: {path} dropped the work unit column {UNIT_COLUMN!r}; a DataFrame function "
                          f"must keep it (select it, or use withColumn / drop on other columns)")
    return out


def frame_function(path: str) -> FrameFunction:
    """The function `module:function` or `module.function` names; a ConfigError naming the key otherwise."""
    try:
        return cast(FrameFunction, import_function(path))
    except ValueError as e:
        raise ConfigError(f"{FUNCTIONS_KEY}={path!r}: {e}") from e


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
        converted = frame.sparkSession.sql(f"SELECT {escaped}, {UNIT_COLUMN} FROM {{records}}", records=frame)
    except AnalysisException as e:
        raise ConfigError(f"{SELECT_KEY}={select_list!r} is not a select list over the records' columns "
                          f"({', '.join(c for c in frame.columns if c != UNIT_COLUMN)}): {_first_line(e)}") from e
    names = converted.columns
    extra = [f"_oncelog_extra_{i}" for i, name in enumerate(names[:-1]) if name == UNIT_COLUMN]
    if not extra:
        return converted
    renamed = converted.toDF(*[f"_oncelog_extra_{i}" if name == UNIT_COLUMN and i < len(names) - 1 else name
                               for i, name in enumerate(names)])
    return renamed.drop(*extra)


def _expression(frame: DataFrame, key: str, text: str) -> F.Column:
    """A SQL expression over `frame`'s columns, analysed now: a ConfigError naming the key if Spark rejects it."""
    try:
        column = F.expr(text)
        _ = frame.select(column).schema  # analysed now, so that a bad expression fails before any task
    except AnalysisException as e:
        raise ConfigError(f"{key}={text!r} is not a condition over the records' columns after the converters "
                          f"({', '.join(c for c in frame.columns if c != UNIT_COLUMN)}): {_first_line(e)}") from e
    return column


def _first_line(error: Exception) -> str:
    """Spark's message without its plan and stack."""
    return str(error).strip().splitlines()[0][:500]
