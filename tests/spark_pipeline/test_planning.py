"""Packing a run's work units into tasks."""

from __future__ import annotations

from pathlib import Path

import yaml

from events.job import WorkUnitSpec
from spark_pipeline.jobs import load_job_config
from spark_pipeline.planning import pack_work_units


def test_the_tasks_hold_the_very_units_returned_each_naming_its_task(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "job.name": "packed", "source.class": "spark_pipeline.sources.synthetic.SyntheticSource",
        "source.synthetic.datasets": 7, "source.synthetic.partitions": 1, "source.synthetic.records.per.run": 2,
        "writer.output.dir": str(tmp_path / "out"), "writer.staging.dir": str(tmp_path / "staging"),
        "data.publisher.final.dir": str(tmp_path / "published"), "oncelog.log.url": f"sqlite:///{tmp_path}/log.db"}))
    planned = [WorkUnitSpec(work_unit_id=f"wu-{i}", dataset_urn=f"ds-{i}", partition=f"ds-{i}:0", low_watermark=0,
                            expected_high_watermark=2) for i in range(7)]
    units, tasks = pack_work_units(load_job_config(job), planned, lambda: 3)
    assert [u.work_unit_id for u in units] == [p.work_unit_id for p in planned]
    assert len(tasks) == 3
    held = [unit for task in tasks for unit in task.work_units]
    assert sorted(map(id, held)) == sorted(map(id, units))
    assert all(unit.multi_work_unit_id == task.multi_work_unit_id for task in tasks for unit in task.work_units)
