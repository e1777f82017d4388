"""`oncelog run`, `recover`, `validate`, `schedule` as an operator uses them: progress, Spark's output kept out of the
terminal, `--conf` overrides, `--log` / `$ONCELOG_LOG` precedence, validate's verdicts and exit codes."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pyspark.sql import SparkSession
from rich.console import Console
from typer.testing import CliRunner

from events.job import JobRunStarted
from events.log import open_log
from oncelog.cli import app
from projections.projector import Projector
from projections.views import Phase
from spark_pipeline.jobfile.paths import absolute_config
from spark_pipeline.jobs import load_job_config
from spark_pipeline.launcher import JobLauncher
from spark_pipeline.progress import RichProgress
from tests.fault.pipeline_checks import DATASETS, PARTITIONS, write_job

pytestmark = pytest.mark.spark
ROOT = Path(__file__).parents[3]
PHASES = [p.value for p in Phase]


def job_with_log(base: Path, log_url: str | None, **extra: object) -> Path:
    """A synthetic job file; with `log_url` None it names no log (the log comes from --log, $ONCELOG_LOG or the
    default)."""
    path = write_job(base, log_url or "unused", "full", None, **extra)
    if log_url is None:
        keys = yaml.safe_load(path.read_text())
        del keys["oncelog.log.url"]
        path.write_text(yaml.safe_dump(keys))
    return path


def runs_in(db: Path) -> list[str]:
    """The jobs of the runs recorded in a SQLite log."""
    with open_log(f"sqlite:///{db}") as log:
        state, _ = Projector(log).rebuild(use_snapshot=False)
    return [r.job for r in state.runs.values()]


def phase_lines(stderr: str) -> list[str]:
    """The phases named by the plain progress lines, in order."""
    return [m.group(1) for m in re.finditer(r"^oncelog: .* \d+\.\ds (\w+) — ", stderr, re.MULTILINE)]


def test_run_shows_phases_and_keeps_spark_output_in_the_log_file_it_names(tmp_path: Path) -> None:
    """A fresh process (its own JVM), stdout and stderr pipes: stderr holds only oncelog's phase lines, whole; the
    JVM's log4j output is in the file the summary names."""
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}")
    result = subprocess.run([sys.executable, "-m", "oncelog", "run", str(job)], cwd=tmp_path, capture_output=True,
                            text=True, timeout=600, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("oncelog: crashy run ") for line in lines), result.stderr
    assert phase_lines(result.stderr) == PHASES
    records = DATASETS * PARTITIONS * 200
    assert re.search(rf"commit — publishing {DATASETS} dataset\(s\) \(tasks (\d+)/\1 done, {records:,} records "
                     r"written\)$", result.stderr, re.MULTILINE), result.stderr
    assert f"cleanup — cleaning up (datasets {DATASETS}/{DATASETS} committed)" in result.stderr
    assert "log4j" not in result.stderr and "WARN" not in result.stderr
    named = re.search(r"^Spark's and librdkafka's own output: (.+)$", result.stdout, re.MULTILINE)
    assert named, result.stdout
    log_file = Path(named.group(1))
    assert log_file.parent == tmp_path / ".oncelog" / "logs" and log_file.name.startswith("crashy-")
    assert "log4j" in log_file.read_text()
    assert "COMMITTED" in result.stdout.splitlines()[0]


def test_conf_overrides_job_file_keys_and_oncelog_log_names_the_log(tmp_path: Path, spark: SparkSession,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONCELOG_LOG", f"sqlite:///{tmp_path / 'env.db'}")
    job = job_with_log(tmp_path, None)
    result = CliRunner().invoke(app, ["run", str(job), "--conf", "source.synthetic.records.per.run=30",
                                      "--conf", "job.name=overridden", "--json"])
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["job"] == "overridden" and document["records_written"] == DATASETS * PARTITIONS * 30
    assert runs_in(tmp_path / "env.db") == ["overridden"]
    assert phase_lines(result.stderr) == PHASES


@pytest.mark.parametrize("command", ["run", "recover", "validate"])
def test_a_malformed_conf_is_a_usage_error_naming_it(command: str, tmp_path: Path) -> None:
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}")
    result = CliRunner().invoke(app, [command, str(job), "--conf", "task.maxretries=1", "--conf", "oops"])
    assert result.exit_code == 2
    assert "--conf 'oops': expected KEY=VALUE" in result.stderr
    assert not (tmp_path / "events.db").exists()


@pytest.mark.parametrize(("flag", "in_file", "env", "used"), [
    ("flag", "file", "env", "flag"),
    (None, "file", "env", "file"),
    (None, None, "env", "env"),
    (None, None, None, ".oncelog/events"),
], ids=["flag-wins", "file-beats-env", "env-beats-default", "default"])
def test_the_log_is_the_flag_then_the_job_file_then_oncelog_log_then_the_default(
        flag: str | None, in_file: str | None, env: str | None, used: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ONCELOG_LOG", raising=False)
    job = job_with_log(tmp_path, f"sqlite:///{tmp_path / 'file.db'}" if in_file else None)
    if env:
        monkeypatch.setenv("ONCELOG_LOG", f"sqlite:///{tmp_path / 'env.db'}")
    args = ["recover", str(job), *(["--log", f"sqlite:///{tmp_path / 'flag.db'}"] if flag else [])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.stderr
    created = {str(p.relative_to(tmp_path).with_suffix("")) for p in tmp_path.rglob("*.db")}
    assert created == {used}


def test_schedule_takes_the_log_flag_over_the_job_files(tmp_path: Path, spark: SparkSession,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONCELOG_LOG", f"sqlite:///{tmp_path / 'env.db'}")
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    write_job(jobs, f"sqlite:///{tmp_path / 'file.db'}", "full", None, **{"source.synthetic.records.per.run": 10})
    result = CliRunner().invoke(app, ["schedule", str(jobs), "--once", "--log", f"sqlite:///{tmp_path / 'flag.db'}"])
    assert result.exit_code == 0, result.stderr
    assert "COMMITTED" in result.stdout
    assert runs_in(tmp_path / "flag.db") == ["crashy"]
    assert not (tmp_path / "file.db").exists() and not (tmp_path / "env.db").exists()


def test_run_on_a_folder_says_to_schedule_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{tmp_path} is a folder, not a job file; to run every job in it use `oncelog schedule {tmp_path}`" \
           in result.stderr
    assert "extension" not in result.stderr


def test_validate_gives_a_verdict_per_job_and_runs_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    for name, extra in (("good", {}), ("bad", {"task.maxretries": "many", "job.comit.policy": "full"}),
                        ("twin", {})):
        (tmp_path / name).mkdir()
        write_job(tmp_path / name, url, **{"job.name": name, **extra}).rename(jobs / f"{name}.yaml")
    twin = yaml.safe_load((jobs / "twin.yaml").read_text())
    twin["writer.output.dir"] = str(tmp_path / "good" / "task-output")  # the folder of job `good`
    (jobs / "twin.yaml").write_text(yaml.safe_dump(twin))
    result = CliRunner().invoke(app, ["validate", str(jobs)])
    assert result.exit_code == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert f"INVALID  {jobs / 'bad.yaml'} (2 problems)" in lines
    assert f"OK       {jobs / 'good.yaml'} (job good)" in lines
    assert any("task.maxretries" in line for line in lines)
    assert any("did you mean 'job.commit.policy'" in line for line in lines)
    assert f"INVALID  {jobs / 'twin.yaml'} (1 problem)" in lines
    assert any("task-output" in line and str(jobs / "good.yaml") in line for line in lines)
    assert not (tmp_path / "events.db").exists()
    assert not any((tmp_path / "good").iterdir())  # no folder made

    good = CliRunner().invoke(app, ["validate", str(jobs / "good.yaml"), "--json"])
    assert good.exit_code == 0
    assert json.loads(good.stdout) == [{"file": str(jobs / "good.yaml"), "job": "good", "valid": True,
                                        "problems": [], "notes": []}]
    missing = CliRunner().invoke(app, ["validate", str(jobs / "good.yaml"), str(tmp_path / "nosuch.yaml")])
    assert missing.exit_code == 2 and f"no such job file or folder: {tmp_path / 'nosuch.yaml'}" in missing.stderr


def test_validate_applies_conf_overrides(tmp_path: Path) -> None:
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}", **{"task.maxretries": "many"})
    assert CliRunner().invoke(app, ["validate", str(job)]).exit_code == 1
    assert CliRunner().invoke(app, ["validate", str(job), "--conf", "task.maxretries=2"]).exit_code == 0
    broken = CliRunner().invoke(app, ["validate", str(job), "--conf", "task.maxretries=2", "--conf",
                                      "job.commit.policy=sometimes"])
    assert broken.exit_code == 1 and "job.commit.policy" in broken.stdout


def test_validate_check_log_refuses_folders_another_job_of_the_log_uses(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url)
    (tmp_path / "other").mkdir()
    other = write_job(tmp_path / "other", url, **{"job.name": "other", "writer.staging.dir": str(tmp_path / "staging")})
    properties = absolute_config(load_job_config(other)).properties
    with open_log(url) as log, log.writer("other") as writer:  # what a run of job `other` records first
        writer.append([JobRunStarted(job="other", run_id="r1", properties=properties)])
    assert CliRunner().invoke(app, ["validate", str(job)]).exit_code == 0
    checked = CliRunner().invoke(app, ["validate", str(job), "--check-log"])
    assert checked.exit_code == 1
    assert "other" in checked.stdout and "staging" in checked.stdout


def test_the_rich_display_shows_every_phase_with_tasks_and_records(tmp_path: Path, spark: SparkSession) -> None:
    job = write_job(tmp_path, f"sqlite:///{tmp_path / 'events.db'}")
    screen = io.StringIO()
    with RichProgress(Console(file=screen, force_terminal=True, width=120, color_system=None)) as display:
        result = JobLauncher(load_job_config(job), spark=spark, observer=display).run()
    final = [row for row in screen.getvalue().rsplit("\x1b[2K", 1)[-1].splitlines() if row.strip("\x1b[?25h")]
    assert [row.split()[1] for row in final] == PHASES, final
    assert all(row.startswith("✓") for row in final), final
    tasks = len(result.tasks)
    assert f"{tasks}/{tasks} {result.records_written:,} records written" in final[PHASES.index("tasks")]
    assert f"{DATASETS}/{DATASETS}" in final[PHASES.index("commit")]
