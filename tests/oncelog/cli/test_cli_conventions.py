"""The conventions every oncelog command keeps (docs/cli.md), one test each, on real SQLite logs.

Pipes get whole lines (no wrapping, no truncation, no boxes); errors are one line; `--version` and `-h`; flags
shown as flags; `runs`, `audit latest` and run-id prefixes; `--log` over `$ONCELOG_LOG`; one exit-code policy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.codec import Record
from events.commit import CommitSequenceAbandoned, CommitStepRolledBack
from events.dataset import DatasetReleased
from events.job import JobRunCancelled, JobRunFailed
from events.log import EventLog, open_log
from events.model import Event
from oncelog.cli import app
from tests.factories import one_of_each

ROOT = Path(__file__).resolve().parents[3]
LONG_URN = "kafka.orders.eu-west-1." + "very-long-topic-name-" * 6
runner = CliRunner()


def a_run(job: str, run_id: str, urn: str, start_s: float) -> list[Event]:
    """A committed run of one dataset (a retried task, a failed then applied step, one dataset skipped)."""
    drop = (CommitSequenceAbandoned, CommitStepRolledBack, DatasetReleased, JobRunFailed, JobRunCancelled)
    return [e.model_copy(update={"emitted_at": e.emitted_at + timedelta(seconds=start_s)})
            for e in one_of_each(job, run_id, urn) if not isinstance(e, drop)]


RUNS = [("orders", "20261121T120000123Z-1a2b3c", "orders.eu", 0),
        ("orders", "20261121T130000456Z-4d5e6f", "orders.us", 3600),
        ("clicks", "20261121T123000789Z-777777", "clicks.web", 1800)]


@pytest.fixture
def log(tmp_path: Path) -> Iterator[EventLog]:
    """A SQLite log of three partitions holding three committed runs of two jobs, one with a very long URN."""
    opened = open_log(f"sqlite:///{tmp_path / 'events.db'}?partitions=3")
    opened.ensure_topic()
    for job, run_id, urn, start in RUNS:
        opened.append(a_run(job, run_id, urn, start))
    opened.append(a_run("orders", "20261121T140000000Z-abcdef", LONG_URN, 7200))
    yield opened
    opened.close()


def cli(log: EventLog, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `oncelog ARGS --log URL` (CliRunner's stdout is not a terminal)."""
    result = runner.invoke(app, [*args, "--log", log.url], env=env)
    return result.exit_code, result.stdout, result.stderr


def spoil(log: EventLog) -> None:
    """Append a record no reader can decode."""
    with log.writer("vandal") as writer:
        writer.append_records([Record(0, b"junk", b"\x0b\x05Bogus\x00\x01", 0)])


def test_piped_state_and_tail_are_one_whole_line_per_record(log: EventLog) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "FORCE_COLOR")}
    piped = subprocess.run([sys.executable, str(ROOT / "oncelog" / "__main__.py"), "state", "--log", log.url],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    long_line = [line for line in lines if f"{LONG_URN}:0=" in line]  # the Datasets sheet's (its time partitions too)
    assert len(long_line) == 1, piped.stdout  # the whole URN, on the dataset's one line
    assert f"{LONG_URN}:0=100" in long_line[0] and "2026-11-21T14:00:12.123Z" in long_line[0]
    assert len(long_line[0]) > 200 and not any(c in piped.stdout for c in "│┃━…\x1b")
    assert lines[0] == "Datasets:" and lines[1].split() == [
        "job", "dataset", "watermarks", "last", "run", "committed", "at", "records", "files", "blocked", "by"]
    logged = list(log.read())
    code, out, err = cli(log, "tail", "--max", str(len(logged)), "--group", "pipe")
    assert code == 0, err
    events = out.splitlines()  # one line per event, however long its key
    assert [line.split()[3] for line in events] == [e.event.key for e in logged]
    assert any(len(line) > 160 for line in events) and all(line.startswith("2026-11-21T") for line in events)


def test_an_error_is_one_line_on_stderr_naming_what_is_wrong(log: EventLog) -> None:
    code, out, err = cli(log, "state", LONG_URN + "-nope")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: no dataset ") and f"{LONG_URN}-nope" in err
    assert f"did you mean {LONG_URN!r}" in err


def test_version_and_short_help_everywhere_with_flags_shown_as_flags() -> None:
    shown = runner.invoke(app, ["--version"])
    assert shown.exit_code == 0 and shown.stdout == f"oncelog {version('oncelog')}\n"
    for command in ([], ["state"], ["runs"], ["gc"], ["tail"], ["run"], ["kafka"], ["kafka", "up"], ["s3", "up"],
                    ["serve"]):
        short, long = runner.invoke(app, [*command, "-h"]), runner.invoke(app, [*command, "--help"])
        assert short.exit_code == 0 and short.stdout == long.stdout and "Usage:" in short.stdout, command
        assert "<bool>" not in short.stdout, command
    gc_help = runner.invoke(app, ["gc", "-h"]).stdout
    assert "--dry-run " in gc_help and "--no-dry-run" not in gc_help and "--json " in gc_help
    assert "--stop-on-error " in runner.invoke(app, ["rebuild", "-h"]).stdout


def test_runs_lists_every_run_from_the_fold_and_filters_by_job_and_time(log: EventLog) -> None:
    code, out, err = cli(log, "runs", "--json")
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [r["run_id"] for r in runs] == ["20261121T120000123Z-1a2b3c", "20261121T123000789Z-777777",
                                           "20261121T130000456Z-4d5e6f", "20261121T140000000Z-abcdef"]  # by start
    first = runs[0]
    assert (first["job"], first["status"], first["duration_s"], first["records_written"]) == (
        "orders", "COMMITTED", 14.0, 100)
    assert first["datasets_committed"] == ["orders.eu"] and first["datasets_skipped"] == ["orders.eu.other"]
    only = json.loads(cli(log, "runs", "--json", "--job", "clicks")[1])["runs"]
    assert [r["run_id"] for r in only] == ["20261121T123000789Z-777777"]
    since = json.loads(cli(log, "runs", "--json", "--since", "2026-11-21T12:30:00Z")[1])["runs"]
    assert len(since) == 3 and "20261121T120000123Z-1a2b3c" not in {r["run_id"] for r in since}
    code, out, _ = cli(log, "runs")
    assert code == 0
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [r[:3] for r in rows] == [[r["job"], r["run_id"], "COMMITTED"] for r in runs]
    assert rows[0][3:] == ["2026-11-21T12:00:01.123Z", "14.0s", "100", "1", "1", "0", "-"]  # no error
    code, _, err = cli(log, "runs", "--job", "order")
    assert code == 2 and "no job 'order'" in err and "did you mean 'orders'" in err
    code, _, err = cli(log, "runs", "--since", "last tuesday")
    assert code == 2 and "--since 'last tuesday'" in err


def test_audit_takes_latest_and_unique_prefixes_of_run_ids(log: EventLog) -> None:
    def audited(*args: str) -> str:
        code, out, err = cli(log, "audit", *args, "--json")
        assert code == 0, err
        return str(json.loads(out)["run"]["run_id"])

    assert audited("latest") == "20261121T140000000Z-abcdef"
    assert audited("latest", "--job", "clicks") == "20261121T123000789Z-777777"
    assert audited("20261121T13") == "20261121T130000456Z-4d5e6f"
    assert audited("20261121T120000123Z-1a2b3c") == "20261121T120000123Z-1a2b3c"
    code, _, err = cli(log, "audit", "20261121T1")
    assert code == 2 and "ambiguous" in err and err.count("\n") == 1
    assert all(run_id in err for _, run_id, _, _ in RUNS)
    code, _, err = cli(log, "audit", "2027")
    assert code == 2 and "no run '2027'" in err


def test_log_flag_wins_over_the_environment(log: EventLog, tmp_path: Path) -> None:
    from_env = runner.invoke(app, ["runs", "--json"], env={"ONCELOG_LOG": log.url})
    assert from_env.exit_code == 0 and len(json.loads(from_env.stdout)["runs"]) == 4
    elsewhere = f"sqlite:///{tmp_path / 'none.db'}"
    flag = runner.invoke(app, ["runs", "--json", "--log", elsewhere], env={"ONCELOG_LOG": log.url})
    assert flag.exit_code == 2 and str(tmp_path / "none.db") in flag.stderr
    assert not (tmp_path / "none.db").exists(), "reading must not create a log"


@pytest.mark.parametrize("command", [["state"], ["rebuild"], ["replay", "--until", "1"], ["runs"]])
def test_problems_in_the_log_exit_1_unless_allowed(log: EventLog, command: list[str]) -> None:
    assert cli(log, *command)[0] == 0
    spoil(log)
    if command[0] == "replay":
        command = ["replay", "--until", str(max(log.end_offsets().values()) - 1)]
    code, _, err = cli(log, *command)
    assert code == 1 and "could not be used" in err and "Bogus" in err and err.count("\n") == 1
    code, _, err = cli(log, *command, "--allow-problems")
    assert code == 0 and err.startswith("warning: 1 record(s)")


def test_unknown_job_or_dataset_is_a_usage_error_with_close_matches(log: EventLog) -> None:
    code, out, err = cli(log, "state", "--job", "nojob")
    assert code == 2 and out == "" and "no job 'nojob'" in err and "clicks, orders" in err
    code, _, err = cli(log, "state", "orders.ue")
    assert code == 2 and "did you mean" in err and "'orders.eu'" in err
    code, _, err = cli(log, "state", "clicks.web", "--job", "orders")
    assert code == 2 and "no dataset 'clicks.web' of job 'orders'" in err
    code, _, err = cli(log, "replay", "--until", "5", "orders.us")
    assert code == 2 and "as of --until 5" in err  # the run of orders.us came later


@pytest.mark.parametrize("command", [["verify"], ["state"], ["runs"], ["audit"], ["gc", "--keep-runs", "1"]])
def test_a_log_url_given_as_an_argument_is_refused_naming_the_option(log: EventLog, command: list[str]) -> None:
    """What a new user types first: the URL where an argument goes (taken for a dataset or run, or "unexpected extra
    argument" before)."""
    result = runner.invoke(app, [*command, log.url])
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{log.url} is a log URL: the log is given by option, as in: oncelog {command[0]} --log '{log.url}'" in (
        " ".join(result.stderr.split()))
    assert "is a log URL" not in cli(log, *command)[2]  # the same with --log


def test_the_suggested_command_quotes_a_url_the_shell_would_split_or_glob() -> None:
    """A Kafka URL's query (`?`, `&`) would be globbed or cut by the shell if pasted unquoted."""
    url = "kafka://localhost:9092/audit?security.protocol=SASL_SSL&sasl.mechanism=PLAIN"
    result = runner.invoke(app, ["verify", url])
    assert result.exit_code == 2 and result.stdout == ""
    assert f"oncelog verify --log '{url}'" in " ".join(result.stderr.split())


def test_replay_refuses_offsets_past_the_end_and_partitions_left_out(log: EventLog) -> None:
    last = max(log.end_offsets().values()) - 1
    assert cli(log, "replay", "--until", str(last))[0] == 0
    code, _, err = cli(log, "replay", "--until", "99999")
    assert code == 2 and "past the end" in err and f"its last offset is {last}" in err
    code, _, err = cli(log, "replay", "--until", "0:10,1:10")
    assert code == 2 and "no offset for partition(s) 2" in err and "3 partitions" in err
    assert cli(log, "replay", "--until", "0:10,1:10,2:10")[0] == 0


def test_tail_refuses_nonsense_and_matches_event_types_in_any_case(log: EventLog) -> None:
    refused = runner.invoke(app, ["tail", "--max", "-5", "--log", log.url])
    assert refused.exit_code == 2 and "--max" in refused.stderr and refused.stdout == ""
    code, out, err = cli(log, "tail", "--type", "jobruncommitted", "--max", "4", "--group", "any-case", "--json",
                         "--idle-timeout", "5")
    assert code == 0, err
    assert [json.loads(line)["type"] for line in out.splitlines()] == ["JobRunCommitted"] * 4
    code, _, err = cli(log, "tail", "--type", "JobRunComitted", "--max", "1")
    assert code == 2 and "unknown event type 'JobRunComitted'" in err and "did you mean 'JobRunCommitted'" in err


def test_a_three_slash_url_missing_a_log_that_four_slashes_would_find_says_so(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """`sqlite:///tmp/x.db` is tmp/x.db below the current folder: the error names the URL of the log at /tmp/x.db."""
    with open_log(f"sqlite:///{tmp_path}/events.db") as log, log.writer("test") as writer:  # four slashes
        writer.append(one_of_each()[:1])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    three_slashes = f"sqlite://{tmp_path}/events.db"
    refused = runner.invoke(app, ["state", "--log", three_slashes])
    assert refused.exit_code == 2 and refused.stdout == ""
    message = " ".join(refused.stderr.split())
    assert f"no log at {str(tmp_path)[1:]}/events.db" in message
    assert f"but there is one at {tmp_path}/events.db: an absolute path takes four slashes, --log sqlite:///" \
           f"{tmp_path}/events.db" in message
    nowhere = runner.invoke(app, ["state", "--log", "sqlite:///no/such/events.db"])
    assert nowhere.exit_code == 2
    assert f"a path relative to {elsewhere} (an absolute path takes four slashes" in " ".join(nowhere.stderr.split())
