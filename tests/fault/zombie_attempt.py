"""A zombie task attempt: an attempt given up for lost that lives on in a process of its own and writes late.

`ZombieSource` is the synthetic source, except that the first attempt of a task hands its work to a new process
(this module run as a program) and fails as an attempt whose executor stopped answering does: on the records engine
after reading a few records, on the DataFrame engine as it reads its frame. The task's next attempt then runs and is
recorded as succeeded. The zombie process is the first attempt living on: each time the test releases it, it runs
that attempt (attempt 1 of the task the log recorded as failed so) with the records engine's own flow and writer,
writing its file into the task-output folder attempt 1 writes to, under the name either engine gives it (both move an
attempt's files into `writers.attempt_output_dir`, named by their watermark range). It records nothing in the log
(its log writer would be fenced by the next attempt's). The driver's side releases it at a fault point
(`ReleaseZombie`) and waits until it has written, so that its late write falls where the test wants it: after the
chosen attempt succeeded, and before the commit, or after the run ended.

    zombie/ (beside staging): spec.json (what to run), pid, go-<n> (the test: write now), done-<n> (what it wrote)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from events.job import WorkUnitSpec, WorkUnitsPlanned
from events.log import open_log
from events.task import TaskFailed, TaskStarted
from spark_pipeline.commit.faults import FaultInjector, FaultPoint
from spark_pipeline.constructs import Extractor, MultiWorkUnit, Record, WorkUnitState
from spark_pipeline.engines.records.flow import build_constructs
from spark_pipeline.engines.records.task import run_attempt
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.sources.synthetic import SyntheticExtractor, SyntheticSource

ROOT = Path(__file__).parents[2]
HANDOFF_AFTER = 5
"""Records the first attempt reads before it is given up for lost (on the records engine)."""
STOPPED = "stopped answering (its work lives on in a zombie process)"
ROUNDS = 2
WAIT_S = 60.0
SOURCE_KEY = "source.class"
PLAIN_SOURCE = "spark_pipeline.sources.synthetic.SyntheticSource"


class ZombieExtractor(SyntheticExtractor):
    """The synthetic extractor; in a task's first attempt, hands the attempt to a zombie process, then fails."""

    def read_record(self) -> Record | None:
        state = self.state
        if state.attempt == 1 and self.next_watermark == state.work_unit.low_watermark + HANDOFF_AFTER:
            spawn_zombie(state.config, state.attempt)
            raise ConnectionError(f"attempt {state.attempt} of task {state.task_id} {STOPPED}")
        return super().read_record()


class ZombieSource(SyntheticSource):
    """The synthetic source whose tasks' first attempts live on as zombies (on either engine)."""

    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return ZombieExtractor(state, self.settings())

    def read_frame(self, spark: SparkSession, units: Sequence[tuple[int, WorkUnitSpec]], attempt: int) -> DataFrame:
        if attempt == 1:
            spawn_zombie(self.config, attempt)
            raise ConnectionError(f"attempt {attempt} {STOPPED}")
        return super().read_frame(spark, units, attempt)


def spawn_zombie(config: JobConfig, attempt: int) -> None:
    """Start the process the attempt lives on in (detached: it outlives the Spark task), with what it must run (the
    run, task and work units: read from the log once released, where the attempt's failure is recorded by then)."""
    folder = zombie_folder(config)
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"properties": {**config.properties, SOURCE_KEY: PLAIN_SOURCE}, "attempt": attempt}
    (folder / "spec.json").write_text(json.dumps(spec))
    process = subprocess.Popen([sys.executable, "-m", "tests.fault.zombie_attempt", str(folder)], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=(folder / "stderr").open("wb"),
                               start_new_session=True)
    (folder / "pid").write_text(str(process.pid))


def zombie_folder(config: JobConfig) -> Path:
    """Where the zombie and the test talk: `zombie` beside the job's (local) staging folder."""
    return Path(str(config.writer_staging_dir)).parent / "zombie"


def live_on(folder: Path) -> None:
    """The zombie: each time it is released (go-<n>), run the attempt again as it was, and say what it wrote."""
    spec = json.loads((folder / "spec.json").read_text())
    config = config_from_properties(spec["properties"])
    for round_ in range(1, ROUNDS + 1):
        if not wait_for(folder / f"go-{round_}"):
            return
        run_id, task = haunted_task(config, spec["attempt"])
        results = run_attempt(build_constructs(config), run_id, task, spec["attempt"], False)
        wrote = [f.model_dump(mode="json") for r in results for f in r.output_files]
        (folder / f"done-{round_}.tmp").write_text(json.dumps(wrote))
        (folder / f"done-{round_}.tmp").rename(folder / f"done-{round_}")


def haunted_task(config: JobConfig, attempt: int) -> tuple[str, MultiWorkUnit]:
    """The run and the task (with its work units) whose `attempt` the log recorded as failed by the hand-off."""
    with open_log(config.log_url, config.log_settings) as log:
        events = [stored.event for stored in log.read()]
    failed = [e for e in events if isinstance(e, TaskFailed) and e.attempt == attempt and STOPPED in (e.error or "")]
    if not failed:
        raise AssertionError(f"no attempt {attempt} failed by a hand-off in {config.log_url}")
    run_id, task_id = failed[-1].run_id, failed[-1].task_id
    (started,) = [e for e in events if isinstance(e, TaskStarted) and (e.run_id, e.task_id, e.attempt) == (
        run_id, task_id, attempt)]
    specs = {u.work_unit_id: u for e in events if isinstance(e, WorkUnitsPlanned) and e.run_id == run_id
             for u in e.work_units}
    return run_id, MultiWorkUnit(task_id, tuple(specs[i] for i in started.work_unit_ids))


def wait_for(path: Path, pid: int | None = None, timeout_s: float = WAIT_S) -> bool:
    """Whether `path` appeared within the timeout (and before process `pid`, if given, ended)."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline or (pid is not None and not alive(pid)):
            return path.exists()
        time.sleep(0.05)
    return True


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (not a zombie process of the kernel's kind, waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def release(folder: Path, round_: int) -> list[dict[str, object]]:
    """Let the zombie write once more, and wait until it has: the output files it wrote."""
    (folder / f"go-{round_}").touch()
    if not wait_for(folder / f"done-{round_}", int((folder / "pid").read_text())):
        stderr = (folder / "stderr").read_text() if (folder / "stderr").exists() else ""
        raise AssertionError(f"the zombie did not write (round {round_}): {stderr[-2000:]}")
    wrote: list[dict[str, object]] = json.loads((folder / f"done-{round_}").read_text())
    return wrote


class ReleaseZombie(FaultInjector):
    """At the end of the tasks (the chosen attempt recorded as succeeded, nothing planned yet), the zombie writes."""

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        self.wrote: list[dict[str, object]] = []

    def reached(self, point: FaultPoint) -> None:
        if point is FaultPoint.AFTER_TASK_OUTPUT:
            self.wrote = release(self.folder, 1)


if __name__ == "__main__":
    live_on(Path(sys.argv[1]))
