"""A job's roots, from its config or from the properties a run recorded, and where two jobs' roots overlap."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.errors import ConfigError
from spark_pipeline.jobfile.config import JobConfig, JobConfigError
from spark_pipeline.jobfile.paths import (
    JobRoots,
    absolute_config,
    nested_pairs,
    overlaps,
)
from spark_pipeline.jobs import config_from_properties
from spark_pipeline.launcher import public_properties
from spark_pipeline.scheduler import Scheduler

SOURCE = "spark_pipeline.sources.synthetic.SyntheticSource"


def job(name: str, root: str, **extra: str) -> JobConfig:
    """A job whose folders are staging, output and published under `root`."""
    return config_from_properties({"job.name": name, "source.class": SOURCE, "writer.staging.dir": f"{root}/staging",
                                      "writer.output.dir": f"{root}/output",
                                      "data.publisher.final.dir": f"{root}/published", **extra})


def roots(name: str, staging: str, output: str, publish: str) -> JobRoots:
    return JobRoots(name, (staging,), (output,), (publish,))


def test_roots_of_a_config_are_resolved_absolute_paths_of_every_branch(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = job("A", "lake/../lake", **{"fork.branches": "2", "writer.output.dir.1": "file:///out/one"})
    assert JobRoots.of(config) == JobRoots(
        "A", (f"{tmp_path}/lake/staging/fork_0", f"{tmp_path}/lake/staging/fork_1"),
        (f"{tmp_path}/lake/output/fork_0", "/out/one"),
        (f"{tmp_path}/lake/published/fork_0", f"{tmp_path}/lake/published/fork_1"))


def test_roots_read_from_recorded_properties_equal_the_config_s(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = job("A", "lake", **{"fork.branches": "3", "data.publisher.final.dir.2": "elsewhere",
                                 "fork.branch.name.1": "json", "oncelog.log.password": "s3cret"})
    recorded = public_properties(absolute_config(config))  # what JobRunStarted carries
    assert recorded["oncelog.log.password"] == "***"
    assert JobRoots.from_properties("A", recorded) == JobRoots.of(config)
    assert f"{tmp_path}/lake/staging/json" in JobRoots.from_properties("A", recorded).staging


def test_recorded_properties_are_read_without_importing_the_job_s_classes() -> None:
    recorded = {"job.name": "Old", "source.class": "gone.module.Source", "writer.staging.dir": "/s",
                "writer.output.dir": "/o", "data.publisher.final.dir": "/p"}
    assert JobRoots.from_properties("Old", recorded) == roots("Old", "/s", "/o", "/p")
    assert JobRoots.from_properties("Old", {"job.name": "Old"}) == JobRoots("Old", (), (), ())


def test_recorded_properties_that_name_no_supported_folder_are_an_error_naming_job_and_key() -> None:
    with pytest.raises(ConfigError, match="job 'Old': recorded 'data.publisher.final.dir' 'gs://b/x': scheme 'gs'"):
        JobRoots.from_properties("Old", {"data.publisher.final.dir": "gs://b/x"})
    assert JobRoots.from_properties("Old", {"data.publisher.final.dir": "s3a://b/x/"}).publish == ("s3a://b/x",)
    with pytest.raises(ConfigError, match="recorded 'fork.branches' is 'two'"):
        JobRoots.from_properties("Old", {"fork.branches": "two"})


def test_disjoint_jobs_do_not_overlap() -> None:
    a = roots("A", "/lake/a/staging", "/lake/a/output", "/lake/a/published")
    b = roots("B", "/lake/ab/staging", "/lake/a-b/output", "/lake/b")  # shared name prefixes are no nesting
    assert overlaps(a, b) == [] and overlaps(b, a) == []


def test_equal_and_nested_roots_give_one_message_per_pair_naming_jobs_keys_and_paths() -> None:
    a = roots("A", "/lake/staging", "/lake/a/output", "/published")
    b = roots("B", "/lake/staging", "/lake/a", "/published/b")
    reason = "two jobs must not share folders (one job's cleanup of stale runs would delete the other's files)"
    assert overlaps(a, b) == [
        f"'writer.output.dir' of job 'A' (/lake/a/output) is inside 'writer.output.dir' of job 'B' (/lake/a): {reason}",
        f"'writer.staging.dir' of job 'A' and 'writer.staging.dir' of job 'B' are both /lake/staging: {reason}",
        f"'data.publisher.final.dir' of job 'B' (/published/b) is inside 'data.publisher.final.dir' of job 'A' "
        f"(/published): {reason}",
    ]


def test_a_root_of_everything_overlaps_every_root_of_the_other_job() -> None:
    a = roots("A", "/", "/x/o", "/x/p")
    b = roots("B", "/s", "/o", "/p")
    found = overlaps(a, b)
    assert len(found) == 3 and all("of job 'B'" in m and "inside 'writer.staging.dir' of job 'A' (/)" in m
                                   for m in found)


def test_the_scheduler_refuses_to_start_when_two_jobs_of_its_folder_share_folders(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    first, second = tmp_path / "a.properties", tmp_path / "sub" / "b.properties"
    second.parent.mkdir()
    first.write_text(f"job.name=A\nsource.class={SOURCE}\nwriter.staging.dir={lake}/staging\n"
                     f"writer.output.dir={lake}/a/output\ndata.publisher.final.dir={lake}/a/published\n")
    second.write_text(f"job.name=B\nsource.class={SOURCE}\nwriter.staging.dir={lake}/b/staging\n"
                      f"writer.output.dir={lake}/b/output\ndata.publisher.final.dir={lake}/b/published\n")
    assert [j.job_name for j in Scheduler.from_directory(tmp_path).jobs] == ["A", "B"]
    first.write_text(first.read_text().replace(f"{lake}/staging", f"{lake}/b"))  # A's staging holds B's folders
    with pytest.raises(JobConfigError) as caught:
        Scheduler.from_directory(tmp_path)
    found = [str(p) for p in caught.value.problems]
    assert len(found) == 3, found
    assert all(p.startswith(f"{second}: ") and p.endswith(f"(job 'A' is defined in {first})") for p in found)
    assert (f"'writer.output.dir' of job 'B' ({lake}/b/output) is inside 'writer.staging.dir' of job 'A' ({lake}/b)"
            in found[0])


_PATHS = st.lists(st.sampled_from(["a", "b", "a-b", "ab", "a.b"]), min_size=0, max_size=3).map(
    lambda parts: "/" + "/".join(parts))


@settings(max_examples=300, deadline=None)
@given(paths=st.lists(_PATHS, max_size=8))
def test_nested_pairs_finds_exactly_the_equal_or_nested_pairs(paths: list[str]) -> None:
    found = nested_pairs(list(enumerate(paths)))
    expected = {(i, j) for i, outer in enumerate(paths) for j, inner in enumerate(paths)
                if i != j and Path(inner).is_relative_to(outer) and (outer != inner or i < j)}
    assert len(found) == len(set(found)) and set(found) == expected
