"""The Iceberg data file entries of Parquet files, from their footers: field for field what pyiceberg's
`data_file_statistics_from_parquet_metadata` and `DataFileStatistics` make of each file (sizes, counts, bounds,
split offsets, partition), with all that depends only on the table worked out once per commit rather than once per
file and column (each column's metrics mode, serializer and truncation, each partition field's transform). A table
commit of 10,000 files spent 4.4 s in pyiceberg's per-file path; `test_footers.py` compares both, field by field.

Imported only where a table is touched, as `iceberg` is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import (
    MetricModeTypes,
    StatisticsCollector,
    StatsAggregator,
    _check_pyarrow_schema_compatible,
    compute_statistics_plan,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, partition_record_value
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.types import BinaryType, DecimalType, PrimitiveType, StringType
from pyiceberg.utils.decimal import unscaled_to_decimal
from pyiceberg.utils.truncate import truncate_upper_bound_binary_string, truncate_upper_bound_text_string

from spark_pipeline.tables.files import Footer

logger = logging.getLogger(__name__)

FIXED_LEN_BYTE_ARRAY = "FIXED_LEN_BYTE_ARRAY"
"""The Parquet physical type whose decimal statistics Arrow decodes itself (others are unscaled integers)."""


@dataclass(frozen=True)
class ColumnMetrics:
    """What a table records of one column's values: its mode, and how its bounds are made into bytes."""

    field_id: int
    collector: StatisticsCollector
    decimal_scale: int | None
    """The scale of a decimal column (its statistics of an INT32 or INT64 column are unscaled integers)."""
    lower: Callable[[Any], bytes | None]
    upper: Callable[[Any], bytes | None]

    @classmethod
    def of(cls, collector: StatisticsCollector) -> ColumnMetrics:
        kind = collector.iceberg_type
        length = collector.mode.length
        scale = kind.scale if isinstance(kind, DecimalType) else None
        return cls(collector.field_id, collector, scale, _lower(kind, length), _upper(kind, length))

    @property
    def mode(self) -> MetricModeTypes:
        return self.collector.mode.type


def _lower(kind: PrimitiveType, length: int | None) -> Callable[[Any], bytes | None]:
    """`StatsAggregator.min_as_bytes`: the lower bound truncated (to `length`, if set), as bytes. Only texts and
    binaries are truncated: the statistics plan gives every other column `full` metrics."""
    if length is None:
        return lambda value: to_bytes(kind, value)
    if isinstance(kind, StringType):
        return lambda value: value[:length].encode("utf-8")  # what truncate(length) and to_bytes make of a text
    if isinstance(kind, BinaryType):
        return lambda value: value[:length]  # and of bytes
    raise ValueError(f"{kind} cannot be truncated")


def _upper(kind: PrimitiveType, length: int | None) -> Callable[[Any], bytes | None]:
    """`StatsAggregator.max_as_bytes`: the upper bound as bytes, a text or binary one truncated upward (none when it
    cannot be)."""
    if isinstance(kind, (StringType, BinaryType)):
        text = isinstance(kind, StringType)
        expected, named = (str, "a string") if text else (bytes, "bytes")
        upward: Callable[[Any, int | None], Any] = (truncate_upper_bound_text_string if text
                                                    else truncate_upper_bound_binary_string)

        def truncated(value: Any) -> bytes | None:
            if not isinstance(value, expected):
                raise ValueError(f"Expected the current_max to be {named}")
            bound = upward(value, length)
            return to_bytes(kind, bound) if bound is not None else None
        return truncated
    if length is not None:
        raise ValueError(f"{kind} cannot be truncated")
    return lambda value: to_bytes(kind, value)


@dataclass
class _FileStatistics:
    """One file's statistics as they are gathered over its row groups."""

    sizes: dict[int, int]
    counts: dict[int, int]
    nulls: dict[int, int]
    lows: dict[int, Any]
    highs: dict[int, Any]
    """Each column's bounds: a column is here once its first row group with statistics was read (its bound None
    until one is known), as pyiceberg keeps an aggregator per column."""
    invalid: set[int]
    offsets: list[int]


class DataFiles:
    """The table's data file entries of Parquet files (`of`), its plan made once per table commit."""

    def __init__(self, metadata: TableMetadata) -> None:
        self.metadata = metadata
        self.schema: Schema = metadata.schema()
        self.spec = metadata.spec()
        self.columns = {fid: ColumnMetrics.of(c)
                        for fid, c in compute_statistics_plan(self.schema, metadata.properties).items()}
        self.ids = parquet_path_to_id_mapping(self.schema)
        self.physical_checked: set[tuple[int, str]] = set()
        self.layouts: list[tuple[pq.ParquetSchema, dict[bytes, bytes] | None, list[ColumnMetrics]]] = []
        """Each distinct file schema (its Parquet schema and key-value metadata, from which Arrow reads its Arrow
        schema) with its columns in the file's order, once checked against the table's."""
        self.partition_fields: list[tuple[PartitionField, Callable[[Any], Any]]] = [
            (f, f.transform.transform(self.schema.find_field(f.source_id).field_type)) for f in self.spec.fields]

    def of(self, files: Sequence[Footer]) -> list[DataFile]:
        return [self.entry(footer) for footer in files]

    def entry(self, footer: Footer) -> DataFile:
        """The data file entry of one file (`parquet_file_to_data_file` of pyiceberg, from the footer read)."""
        stats = self._statistics(footer.metadata, self._layout(footer.metadata))
        lower: dict[int, bytes] = {}
        upper: dict[int, bytes] = {}
        for fid, low in stats.lows.items():
            column = self.columns[fid]
            if low is not None and (made := column.lower(low)) is not None:
                lower[fid] = made
            high = stats.highs[fid]
            if high is not None and (made := column.upper(high)) is not None:
                upper[fid] = made
        return DataFile.from_args(
            content=DataFileContent.DATA, file_path=footer.path, file_format=FileFormat.PARQUET,
            partition=self._partition(stats), file_size_in_bytes=footer.size, sort_order_id=None,
            spec_id=self.metadata.default_spec_id, equality_ids=None, key_metadata=None,
            record_count=footer.metadata.num_rows, column_sizes=stats.sizes, value_counts=stats.counts,
            null_value_counts=stats.nulls, nan_value_counts={}, lower_bounds=lower, upper_bounds=upper,
            split_offsets=stats.offsets)

    def _layout(self, metadata: pq.FileMetaData) -> list[ColumnMetrics]:
        """The file's columns, each distinct file schema checked against the table's once (pyiceberg checks every
        file's) and its columns found once."""
        schema, properties = metadata.schema, metadata.metadata
        for known, known_properties, columns in self.layouts:
            if properties == known_properties and schema.equals(known):
                return columns
        _check_pyarrow_schema_compatible(self.schema, schema.to_arrow_schema(),
                                         format_version=self.metadata.format_version)
        made = [self.columns[self.ids[schema.column(p).path]] for p in range(metadata.num_columns)]
        self.layouts.append((schema, properties, made))
        return made

    def _statistics(self, metadata: pq.FileMetaData, columns: list[ColumnMetrics]) -> _FileStatistics:
        """The file's column sizes, value and null counts, bounds and split offsets, over all its row groups."""
        stats = _FileStatistics({}, {}, {}, {}, {}, set(), [])
        for r in range(metadata.num_row_groups):
            group = metadata.row_group(r)
            first = group.column(0)
            data, dictionary = first.data_page_offset, first.dictionary_page_offset
            stats.offsets.append(dictionary if first.has_dictionary_page and dictionary < data else data)
            for pos, column in enumerate(columns):
                self._add(stats, column, first if pos == 0 else group.column(pos), pos)
        stats.offsets.sort()
        for fid in stats.invalid:
            stats.lows.pop(fid, None)
            stats.highs.pop(fid, None)
            stats.nulls.pop(fid, None)
        return stats

    def _add(self, stats: _FileStatistics, column: ColumnMetrics, chunk: pq.ColumnChunkMetaData, pos: int) -> None:
        """One row group's column chunk added to the file's statistics."""
        fid = column.field_id
        stats.sizes[fid] = stats.sizes.get(fid, 0) + chunk.total_compressed_size
        if column.mode is MetricModeTypes.NONE:
            return
        stats.counts[fid] = stats.counts.get(fid, 0) + chunk.num_values
        if not chunk.is_stats_set:
            stats.invalid.add(fid)
            logger.warning("PyArrow statistics missing for column %d when writing file", pos)
            return
        try:
            chunk_stats = chunk.statistics
            if chunk_stats.has_null_count:
                stats.nulls[fid] = stats.nulls.get(fid, 0) + chunk_stats.null_count
            if column.mode is MetricModeTypes.COUNTS:
                return
            physical = chunk_stats.physical_type
            if fid not in stats.lows:
                self._check_physical(column, physical)
            if column.decimal_scale is not None and physical != FIXED_LEN_BYTE_ARRAY:
                low, high = chunk_stats.min_raw, chunk_stats.max_raw
                low = unscaled_to_decimal(low, column.decimal_scale) if low is not None else None
                high = unscaled_to_decimal(high, column.decimal_scale) if high is not None else None
            else:
                low, high = chunk_stats.min, chunk_stats.max
            _bound(stats.lows, fid, low, min)
            _bound(stats.highs, fid, high, max)
        except pa.ArrowNotImplementedError as e:
            stats.invalid.add(fid)
            logger.warning(e)

    def _check_physical(self, column: ColumnMetrics, physical: str) -> None:
        """That the column's Parquet type can hold its table type (pyiceberg's check, once per type and column)."""
        if (column.field_id, physical) in self.physical_checked:
            return
        collector = column.collector
        try:
            StatsAggregator(collector.iceberg_type, physical, collector.mode.length)
        except ValueError as e:
            raise ValueError(f"{e} for column '{collector.column_name}'") from e
        self.physical_checked.add((column.field_id, physical))

    def _partition(self, stats: _FileStatistics) -> Record:
        """The file's partition, from its partition columns' bounds (`DataFileStatistics.partition`)."""
        values: list[Any] = []
        for field, transform in self.partition_fields:
            if field.source_id not in stats.lows:
                values.append(None)
                continue
            if not field.transform.preserves_order:
                raise ValueError(f"Cannot infer partition value from parquet metadata for a non-linear Partition "
                                 f"Field: {field.name} with transform {field.transform}")
            lower_value = transform(partition_record_value(field, stats.lows[field.source_id], self.schema))
            upper_value = transform(partition_record_value(field, stats.highs[field.source_id], self.schema))
            if lower_value != upper_value:
                raise ValueError(f"Cannot infer partition value from parquet metadata as there are more than one "
                                 f"partition values for Partition Field: {field.name}. {lower_value=}, {upper_value=}")
            values.append(lower_value)
        return Record(*values)


def _bound(bounds: dict[int, Any], fid: int, value: Any, pick: Callable[[Any, Any], Any]) -> None:
    """`StatsAggregator.update_min`/`update_max`: the first value taken as it is, later ones only when known."""
    current = bounds.get(fid)
    if current is None:
        bounds[fid] = value
    elif value is not None:
        bounds[fid] = pick(value, current)
