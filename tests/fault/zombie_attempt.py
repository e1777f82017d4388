"""A zombie task attempt: an attempt given up for lost that lives on in a process of its own and writes late.

`ZombieSource` is the synthetic source, except that the first attempt of a task, after reading a few records, hands
its work to a new process (this module run as a program) and fails as an attempt whose executor stopped answering
does: the task's next attempt then runs and is recorded as succeeded. The zombie process is the first attempt living
on: it runs that attempt (attempt 1) with the records engine's own flow and writer, each time the test releases it,
writing its file into whatever task-output folder attempt 1 writes to. It records nothing in the log (its log writer
would be fenced by the next attempt's). The driver's side releases it at a fault point (`ReleaseZombie`) and waits
until it has written, so that its late write falls where the test wants it: after the chosen attempt succeeded, and
before the commit, or after the run ended.

    zombie/ (beside staging): spec.json (what to run), pid, go-<n> (the test: write now), done-<n> (what it wrote)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from events.job import WorkUnitSpec
from spark_pipeline.commit.faults import FaultInjector, FaultPoint
from spark_pipeline.constructs import Extractor, MultiWorkUnit, Record, WorkUnitState
from spark_pipeline.engines.records.flow import build_constructs
from spark_pipeline.engines.records.task import run_attempt
from spark_pipeline.jobfile.config import JobConfig
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.sources.synthetic import SyntheticExtractor, SyntheticSource

ROOT = Path(__file__).parents[2]
HANDOFF_AFTER = 5
"""Records the first attempt reads before it is given up for lost."""
ROUNDS = 2
WAIT_S = 60.0
SOURCE_KEY = "source.class"
PLAIN_SOURCE = "spark_pipeline.sources.synthetic.SyntheticSource"


class ZombieExtractor(SyntheticExtractor):
    """The synthetic extractor; in a task's first attempt, hands the attempt to a zombie process, then fails."""

    def read_record(self) -> Record | None:
        state = self.state
        if state.attempt == 1 and self.next_watermark == state.work_unit.low_watermark + HANDOFF_AFTER:
            spawn_zombie(state)
            raise ConnectionError(f"attempt {state.attempt} of task {state.task_id} stopped answering (its work "
                                  f"lives on in a zombie process)")
        return super().read_record()


class ZombieSource(SyntheticSource):
    """The synthetic source whose tasks' first attempts live on as zombies."""


    def get_extractor(self, state: WorkUnitState) -> Extractor:
        return ZombieExtractor(state, self.settings())


def spawn_zombie(state: WorkUnitState) -> None:
    """Start the process the attempt lives on in (detached: it outlives the Spark task), with what it must run."""
    folder = zombie_folder(state.config)
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"properties": {**state.config.properties, SOURCE_KEY: PLAIN_SOURCE}, "run_id": state.run_id,
            "task_id": state.task_id, "attempt": state.attempt, "work_unit": state.work_unit.model_dump(mode="json")}
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
    task = MultiWorkUnit(spec["task_id"], (WorkUnitSpec.model_validate(spec["work_unit"]),))
    for round_ in range(1, ROUNDS + 1):
        if not wait_for(folder / f"go-{round_}"):
            return
        results = run_attempt(build_constructs(config), spec["run_id"], task, spec["attempt"], False)
        wrote = [f.model_dump(mode="json") for r in results for f in r.output_files]
        (folder / f"done-{round_}.tmp").write_text(json.dumps(wrote))
        (folder / f"done-{round_}.tmp").rename(folder / f"done-{round_}")


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
