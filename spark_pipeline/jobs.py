"""Loading jobs: a job file's own checks (jobfile/validation.py), then those that depend on the engine that runs the
job (engines/choice.py, `engine_problems`), every problem of a job in one JobConfigError naming file, line and key.

The entry points the CLI and the `oncelog` API use: `load_job_config`, `load_job` (with what of its Gobblin keys
carried over), `load_job_dir`, `migration_report(s)`, and `config_from_properties` for a job given as flat properties.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from spark_pipeline.engines.choice import engine_problems
from spark_pipeline.jobfile.config import JobConfig, JobConfigError
from spark_pipeline.jobfile.formats import Entry, ParsedFile, Problem, parse_job_file
from spark_pipeline.jobfile.validation import MigrationReport, across_jobs, check_job_file, job_files


@dataclass(frozen=True)
class LoadedJob:
    """A valid job and what of its Gobblin keys was ignored or mapped (`warnings` for `run` to show)."""

    config: JobConfig
    report: MigrationReport

    @property
    def warnings(self) -> tuple[str, ...]:
        """The ignored-keys warning and the mapping notes, one line each."""
        return self.report.warnings


def load_job(path: str | Path, *, environ: Mapping[str, str] | None = None) -> LoadedJob:
    """Load and fully validate one job file, with its migration report; raises JobConfigError listing every problem."""
    environ = os.environ if environ is None else environ
    config, report = _assess(parse_job_file(Path(path), environ), environ)
    if config is None:
        raise JobConfigError(report.problems)
    return LoadedJob(config, report)


def load_job_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> JobConfig:
    """Load and fully validate one job file; raises JobConfigError listing every problem before anything runs."""
    return load_job(path, environ=environ).config


def validate_parsed(parsed: ParsedFile, environ: Mapping[str, str]) -> JobConfig:
    """Substitute, validate and build a JobConfig from a parsed file, or raise JobConfigError."""
    config, report = _assess(parsed, environ)
    if config is None:
        raise JobConfigError(report.problems)
    return config


def config_from_properties(properties: Mapping[str, str], *, source: str = "<properties>",
                           environ: Mapping[str, str] | None = None) -> JobConfig:
    """Validate flat properties as a job file would be (substitution included), `source` naming them in problems;
    raises JobConfigError."""
    parsed = ParsedFile(source, {key: Entry(value) for key, value in properties.items()})
    return validate_parsed(parsed, os.environ if environ is None else environ)


def migration_report(path: str | Path, *, environ: Mapping[str, str] | None = None) -> MigrationReport:
    """What of one (Gobblin) job file carries over, and whether it will run; never raises for a bad file."""
    environ = os.environ if environ is None else environ
    return _assess(parse_job_file(Path(path), environ), environ)[1]


def migration_reports(folder: str | Path, *, environ: Mapping[str, str] | None = None) -> list[MigrationReport]:
    """One report per job file under `folder` (as `load_job_dir` finds them), with the checks across jobs.

    Two files with one job.name, or two jobs with equal or nested folders, are problems of the later file's report.
    """
    return [report for _, _, report in _assess_dir(Path(folder), os.environ if environ is None else environ)]


def load_job_dir(directory: str | Path, *, environ: Mapping[str, str] | None = None) -> list[JobConfig]:
    """Every job file under `directory` (recursively, hidden entries skipped), sorted by path.

    One bad file fails the whole directory, with every file's problems listed; two files with one job.name too
    (they would fence each other's runs), and two jobs whose folders are equal or nested (one job's cleanup would
    delete the other's task output).
    """
    assessed = _assess_dir(Path(directory), os.environ if environ is None else environ)
    problems = [problem for _, _, report in assessed for problem in report.problems]
    if problems:
        raise JobConfigError(problems)
    return [config for _, config, _ in assessed if config is not None]


def _assess(parsed: ParsedFile, environ: Mapping[str, str]) -> tuple[JobConfig | None, MigrationReport]:
    """The job file's checks, then the engine's on the job its core keys make: the JobConfig (None when anything is
    wrong) and the report."""
    config, report = check_job_file(parsed, environ)
    if config is not None:
        report = report.with_problems([parsed.located(key, message) for key, message in engine_problems(config)])
    return (config if not report.problems else None), report


def _assess_dir(root: Path,
                environ: Mapping[str, str]) -> list[tuple[Path, JobConfig | None, MigrationReport]]:
    """Every job file under root, assessed, with problems across jobs added to the later file's report."""
    assessed = [(path, *_assess(parse_job_file(path, environ), environ)) for path in job_files(root)]
    extra: dict[str, list[Problem]] = {}
    for problem in across_jobs([(path, config) for path, config, _ in assessed if config is not None]):
        extra.setdefault(problem.file, []).append(problem)
    out: list[tuple[Path, JobConfig | None, MigrationReport]] = []
    for path, config, report in assessed:
        more = extra.get(str(path), [])
        out.append((path, None if more else config, report.with_problems(more)))
    return out
