"""Failures an operator sees at once, through `oncelog run` in a pipe (the plain display): each failed attempt on a
line of its own as it is recorded (the task, the root cause's first line, the next attempt and when it starts); a
failure no retry can fix ends its task after one attempt; `runs` and the audit name the culprit; the summary's
duration is the one `runs` shows."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncelog.cli import app
from tests.fault.pipeline_checks import write_job

ROOT = Path(__file__).parents[3]
ATTEMPT_LINE = re.compile(r"^oncelog: crashy run \S+ +[\d.]+s task (task-[\d.]+) attempt (\d+) failed(?: on \S+ \(work "
                          r"unit \S+\))?: (.+); (attempt (\d+) at \d\d:\d\d:\d\d UTC(?: \(in \d+s\))?|no attempts "
                          r"left|not retried: no retry can fix this)$", re.MULTILINE)


def run_in_a_pipe(job: Path, cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """`oncelog run job` in a process of its own, stdout and stderr pipes (what a scheduler or CI sees)."""
    return subprocess.run([sys.executable, "-m", "oncelog", "run", str(job)], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})


def cli(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.spark
def test_each_failed_attempt_is_shown_as_it_happens_and_runs_and_audit_name_the_culprit(tmp_path: Path) -> None:
    """ds.10 of 12 datasets fails every attempt (a failure a retry may fix): under `successful` the others publish,
    and the terminal said so while it happened — attempt 1 failed, attempt 2 at …, attempt 2 failed, no attempts
    left — before the commit began."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "successful", None, **{
        "source.synthetic.datasets": 12, "source.synthetic.partitions": 1, "source.synthetic.fail.attempts": 9,
        "source.synthetic.fail.after.records": 3, "source.synthetic.fail.datasets": "ds.10",
        "task.maxretries": 1, "task.retry.intervalinsec": 2})
    done = run_in_a_pipe(job, tmp_path, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:] + done.stdout[-3000:]
    lines = ATTEMPT_LINE.findall(done.stderr)
    # the pack fails, then its parts (engines.isolation) until ds.10 fails alone: attempts numbered on, the last final
    shown = [(int(attempt), then, following) for _, attempt, _, then, following in lines]
    assert len(shown) >= 2 and [a for a, _, _ in shown] == list(range(1, len(shown) + 1)), done.stderr
    assert all(then.startswith("attempt") and int(following) == a + 1 for a, then, following in shown[:-1]), shown
    assert shown[-1][1:] == ("no attempts left", ""), done.stderr
    assert all("injected failure at offset 3 of ds.10:0" in cause for _, _, cause, _, _ in lines), lines
    assert "py4j" not in done.stderr.lower() and "\tat " not in done.stderr
    last_failure = done.stderr.index("no attempts left")
    assert last_failure < done.stderr.index(" commit — publishing "), "shown before the commit began"

    summary = done.stdout.splitlines()[0]
    took = re.search(r": FAILED in ([\d.]+)s \(\+[\d.]+s starting Spark and ending\) — ", summary)
    assert took, summary
    assert "injected failure at offset 3 of ds.10:0" in done.stdout
    log_file = re.search(r"^each failed attempt's full trace: (.+)$", done.stdout, re.MULTILINE)
    assert log_file and "Traceback (most recent call last)" in Path(log_file.group(1)).read_text()

    runs = cli("runs", "--log", url).splitlines()
    (row,) = [line for line in runs if line.startswith("crashy ")]
    assert " FAILED  " in row and f"  {took.group(1)}s  " in row, (row, summary)
    assert "injected failure at offset 3 of ds.10:0" in row
    audited = cli("audit", "latest", "--log", url).splitlines()
    heading = next(i for i, line in enumerate(audited) if line.startswith("What failed ("))
    culprits = audited[heading + 2:][:1]  # the pack and its parts that failed, each naming ds.10
    assert culprits[0].split()[0] == "ds.10" and "injected failure" in culprits[0], audited[:12]
    steps = json.loads(cli("audit", "latest", "--json", "--log", url))["commit_steps"]
    assert steps and all(s["outcome"] == "executed" and s["duration_ms"] is not None for s in steps), steps[:3]
    assert sum(s["duration_ms"] for s in steps) > 0, "each step's time, as the completing attempt took it"


def test_file_systems_that_cannot_rename_between_each_other_are_refused_before_any_attempt(
        tmp_path: Path, s3_folder: str) -> None:
    """Local staging, task output on S3 (a real server): the files cannot be renamed across; with Gobblin's default
    retries (5, every 300 s) each task would wait 25 minutes for the same error. The run is refused before Spark
    starts, naming the keys (a failure of that kind met only at run time ends its task after one attempt:
    tests/spark_pipeline/engines/test_failures.py)."""
    url = f"sqlite:///{tmp_path / 'events.db'}"
    job = write_job(tmp_path, url, "successful", None, **{
        "writer.output.dir": f"{s3_folder}/task-output", "data.publisher.final.dir": f"{s3_folder}/published",
        "task.maxretries": 5, "task.retry.intervalinsec": 300})
    done = run_in_a_pipe(job, tmp_path, timeout=240)
    assert done.returncode == 2, done.stderr[-3000:] + done.stdout[-3000:]
    assert "found before starting Spark" in done.stderr and "writer.output.dir" in done.stderr, done.stderr
    assert not ATTEMPT_LINE.findall(done.stderr), done.stderr
