"""The default DataPublisher: plans, per dataset, the sequence that publishes the run's output; moves nothing.

Steps, in order: an FsRename per output file the task's result recorded (from the task-output folder of the attempt
that succeeded → the branch's data.publisher.final.dir, same path below it), a HighWatermark per partition that
moved, and the DatasetState with every partition's watermark.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from events.commit import (
    CommitSequencePlanned,
    CommitStepSpec,
    DatasetStateStep,
    FsRenameStep,
    HighWatermarkStep,
)
from filesystems import urls
from projections.views import DatasetView
from spark_pipeline.constructs import DataPublisher, DatasetOutput


class BaseDataPublisher(DataPublisher):
    """Publishes file output by renames, then moves the watermarks and commits the dataset state."""

    def destination(self, run_id: str, path: str, branch: int, folder: str = "") -> str:
        """Where a task output file is published: its path below its attempt's task-output `folder` (in logs from
        before attempts had folders: below the run's), under the branch's final directory."""
        output_dir, final_dir = self._branch_folders[branch]
        return urls.join(final_dir, urls.relative_to(path, folder or urls.join(output_dir, run_id)))

    @functools.cached_property
    def _branch_folders(self) -> dict[int, tuple[str, str]]:
        """Each branch's task output and final folders (its settings built once, not once per file)."""
        branches = (self.config.branch(b) for b in range(self.config.fork_branches))
        return {b: (str(s.writer_output_dir), str(s.publisher_final_dir)) for b, s in enumerate(branches)}

    def plan(self, run_id: str, outputs: list[DatasetOutput], dataset_states: Mapping[str, DatasetView]
             ) -> list[CommitSequencePlanned]:
        planned = []
        for output in outputs:
            previous = dataset_states.get(output.dataset_urn)
            watermarks = dict(previous.watermarks) if previous else {}
            steps: list[CommitStepSpec] = []
            for result in output.results:
                steps += [FsRenameStep.trusted(src=f.path, dst=self.destination(run_id, f.path, f.branch, f.folder),
                                               size=f.size, checksum=f.checksum, records=f.records,
                                               partition=f.partition)
                          for f in result.output_files]
            for result in output.results:
                # A partition seen for the first time records where it starts, even with nothing in range.
                if result.partition not in watermarks or result.actual_high_watermark != watermarks[result.partition]:
                    steps.append(HighWatermarkStep.trusted(partition=result.partition,
                                                           low_watermark=result.low_watermark,
                                                           value=result.actual_high_watermark))
                watermarks[result.partition] = result.actual_high_watermark
            if not steps:
                continue  # nothing extracted and no watermark moved: the dataset keeps its state
            records = sum(r.records_written for r in output.results)
            files = sum(len(r.output_files) for r in output.results)
            steps.append(DatasetStateStep.trusted(watermarks=watermarks, records_published=records,
                                                  files_published=files))
            # unvalidated (`trusted`): every value comes from the run's task results, validated as they were read
            planned.append(CommitSequencePlanned.trusted(job=self.config.job_name, run_id=run_id,
                                                         dataset_urn=output.dataset_urn, sequence_id=run_id,
                                                         steps=tuple(steps)))
        return planned
