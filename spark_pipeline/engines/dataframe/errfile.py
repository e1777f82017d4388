"""The records ERR_FILE row policies diverted, written where and as the record engine writes them: JSON lines in
`<qualitychecker.row.err.file>/<run_id>/<task_id>-<work_unit_id>.jsonl`, one file per work unit, appended to.

Written by the driver once the attempt's output is committed: diverted records are expected to be few.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row

from events.job import WorkUnitSpec
from spark_pipeline.constructs import UNIT_COLUMN
from spark_pipeline.writers import path_segment


def write_diverted(err_dir: str | None, run_id: str, task_id: str, units: Sequence[WorkUnitSpec],
                   frames: Iterable[DataFrame]) -> int:
    """Append every diverted record to its work unit's error file; how many there were."""
    lines: dict[int, list[str]] = {}
    for frame in frames:
        for row in frame.toLocalIterator():
            record = as_record(row)
            lines.setdefault(int(record.pop(UNIT_COLUMN)), []).append(json.dumps(record, default=str))
    if not lines or err_dir is None:
        return 0
    folder = Path(err_dir) / run_id
    folder.mkdir(parents=True, exist_ok=True)
    for index, found in sorted(lines.items()):
        with (folder / f"{task_id}-{path_segment(units[index].work_unit_id)}.jsonl").open("a", encoding="utf-8") as out:
            out.writelines(line + "\n" for line in found)
    return sum(len(found) for found in lines.values())


def as_record(row: Row) -> dict[str, Any]:
    """A Spark row as the record engine's record: a dict in column order, binary values as bytes."""
    return {k: bytes(v) if isinstance(v, bytearray) else v for k, v in row.asDict(recursive=True).items()}
