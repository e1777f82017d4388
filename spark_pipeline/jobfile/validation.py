"""Checking job files: parse, substitute, carry Gobblin's keys over, check every key against the models the job's
constructs declare, and the values, constructs and folders: everything the job file itself says.

What depends on the engine that runs the job (an input or output format only Spark reads or writes) is checked by
engines.choice.engine_problems; spark_pipeline/jobs.py loads jobs with both checks, every problem in one report.

Gobblin keys with no meaning in oncelog are accepted and listed in one warning; keys with an oncelog equivalent are
applied as that equivalent, each with a note (`MigrationReport`); see docs/job-config.md.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from filesystems import urls
from filesystems.settings import HADOOP_PREFIXES
from spark_pipeline.jobfile.config import (
    BRANCH_KEYS,
    COMMIT_PARALLELIZE,
    CORE_KEYS,
    DEFAULT_PUBLISHER,
    DEFAULT_WRITER_BUILDER,
    DOTTED_PATH,
    FS_URI_FOLDERS,
    GOBBLIN_CLASS_EQUIVALENTS,
    GOBBLIN_CLASS_KEYS,
    GOBBLIN_KEYS_NOT_USED,
    GOBBLIN_PARALLEL_COMMITS,
    GOBBLIN_PREFIXES_NOT_USED,
    LOG_PREFIX,
    MAX_BRANCHES,
    PARALLEL_COMMITS,
    PATH_KEYS,
    PUBLISHER_FS_URI,
    REPLACE_FINAL_DIR,
    REPLACE_FINAL_DIR_REASON,
    ROW_POLICIES,
    ROW_POLICY_TYPES,
    SPARK_PREFIX,
    SPECULATION,
    TASK_DATA_FOLDERS,
    TASK_DATA_ROOT,
    TASK_POLICIES,
    TASK_POLICY_TYPES,
    WRITER_FS_URI,
    BranchConfig,
    JobConfig,
    JobConfigError,
    PolicyType,
    branch_sources,
    build_branch,
    construct_input,
    construct_model,
    folder_value,
    is_folder_key,
    model_keys,
    policy_messages,
    qualified_name,
    split_list,
    split_suffix,
    validation_messages,
)
from spark_pipeline.jobfile.formats import (
    JOB_FILE_SUFFIXES,
    Entry,
    ParsedFile,
    Problem,
    substitute,
)
from spark_pipeline.jobfile.partitions import PARTITION_KEYS, PARTITIONER_KEY, partitioning_problems
from spark_pipeline.jobfile.paths import JobRoots, nested_pairs, overlaps, resolved_path
from spark_pipeline.jobfile.plugins import import_class, import_function
from spark_pipeline.jobfile.sql_order import sql_order_note

_TRUE = ("true", "yes", "on", "1")
FUNCTIONS_KEY = "converter.dataframe.functions"
GOBBLIN_KNOWN_KEYS = frozenset({*GOBBLIN_KEYS_NOT_USED, *PARTITION_KEYS, *FS_URI_FOLDERS, TASK_DATA_ROOT,
                                COMMIT_PARALLELIZE, PARALLEL_COMMITS, REPLACE_FINAL_DIR})
"""Gobblin keys oncelog knows (ignored or mapped): a close typo of one gets a "did you mean" too."""


# --- what carries over from Gobblin ----------------------------------------------------------------------------


class Verdict(StrEnum):
    """Whether a job file, as it stands, can run."""

    WILL_RUN = "will run"
    WILL_NOT_RUN = "will not run"


@dataclass(frozen=True)
class IgnoredKey:
    """A Gobblin key with no meaning in oncelog: accepted, and listed in the job's one warning with the reason."""

    key: str
    reason: str
    line: int | None = None


@dataclass(frozen=True)
class MappedKey:
    """A Gobblin key applied as its oncelog equivalent: `key` as written → `target` = `value`, and how (`note`)."""

    key: str
    target: str
    value: str
    note: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.key} → {self.target}: {self.note}"


@dataclass(frozen=True)
class MigrationReport:
    """What of one job file carries over: keys ignored (and why), keys mapped (old → new), and the problems."""

    file: str
    job_name: str | None
    ignored: tuple[IgnoredKey, ...] = ()
    mapped: tuple[MappedKey, ...] = ()
    problems: tuple[Problem, ...] = ()
    cautions: tuple[str, ...] = ()
    """What the job may rely on that changed (sql_order: the SQL row policy now runs after the SQL converter)."""

    @property
    def verdict(self) -> Verdict:
        """WILL_RUN when nothing is wrong (ignored and mapped keys do not stop a job)."""
        return Verdict.WILL_NOT_RUN if self.problems else Verdict.WILL_RUN

    @property
    def warning(self) -> str | None:
        """The one warning listing every ignored key, grouped by reason; None when no key is ignored."""
        if not self.ignored:
            return None
        groups: dict[str, list[str]] = {}
        for item in self.ignored:
            groups.setdefault(item.reason, []).append(item.key)
        count = len(self.ignored)
        listed = "; ".join(f"{', '.join(keys)} ({reason})" for reason, keys in groups.items())
        return (f"{self.file}: {count} Gobblin key{'s' if count != 1 else ''} with no meaning in oncelog "
                f"{'are' if count != 1 else 'is'} ignored: {listed}")

    @property
    def notes(self) -> tuple[str, ...]:
        """One line per mapped key: file, line, the Gobblin key and what it became; then the cautions."""
        return tuple(f"{self.file}:{m.line}: {m}" if m.line else f"{self.file}: {m}" for m in self.mapped) + tuple(
            f"{self.file}: {c}" for c in self.cautions)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The ignored-keys warning (when any), then the mapping notes: what `run` shows before it starts."""
        return ((self.warning,) if self.warning else ()) + self.notes

    @property
    def summary(self) -> str:
        """One line: the file, the verdict, and the counts behind it."""
        counts = [f"{len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}"] if self.problems else []
        if self.ignored:
            counts.append(f"{len(self.ignored)} Gobblin key{'s' if len(self.ignored) != 1 else ''} ignored")
        if self.mapped:
            counts.append(f"{len(self.mapped)} mapped")
        job = f" (job {self.job_name})" if self.job_name else ""
        return f"{self.file}{job}: {self.verdict.value}" + (f" — {', '.join(counts)}" if counts else "")

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (for `--json`)."""
        return {
            "file": self.file, "job": self.job_name, "verdict": self.verdict.value,
            "ignored": [{"key": i.key, "reason": i.reason, "line": i.line} for i in self.ignored],
            "mapped": [{"key": m.key, "to": m.target, "value": m.value, "note": m.note, "line": m.line}
                       for m in self.mapped],
            "problems": [{"message": p.message, "line": p.line, "key": p.key} for p in self.problems],
        }

    def with_problems(self, problems: Sequence[Problem]) -> MigrationReport:
        """The report with more problems (the engine's checks, those across jobs), in file order."""
        if not problems:
            return self
        return MigrationReport(self.file, self.job_name, self.ignored, self.mapped,
                               tuple(_ordered([*self.problems, *problems])), self.cautions)


def check_job_file(parsed: ParsedFile, environ: Mapping[str, str]) -> tuple[JobConfig | None, MigrationReport]:
    """Every check of a parsed job file itself: substitution, Gobblin's keys carried over, keys, values, constructs
    and folders. Returns the job as its core keys make it (None: they are invalid) even when the report has other
    problems, for the checks that depend on the engine (engines.choice.engine_problems); and the report."""
    if not parsed.readable:
        return None, MigrationReport(parsed.file, None, problems=tuple(_ordered(parsed.problems)))
    migration = _Migration(parsed, substitute(parsed, environ))
    checker = _Checker(parsed, migration.values, frozenset(migration.consumed))
    job = checker.run()
    report = MigrationReport(parsed.file, migration.values.get("job.name", "").strip() or None,
                             tuple(sorted(migration.ignored + checker.ignored, key=lambda i: (i.line or 0, i.key))),
                             tuple(migration.mapped), tuple(_ordered(parsed.problems)),
                             tuple(n for n in (sql_order_note(migration.values),) if n))
    return job, report


def job_files(root: Path) -> list[Path]:
    """Job files under root, recursively, sorted, hidden files and directories skipped; a JobConfigError when root
    is no directory."""
    if not root.is_dir():
        raise JobConfigError([Problem(str(root), "not a directory of job files")])
    return sorted(p for p in root.rglob("*") if _is_job_file(p, root))


def across_jobs(jobs: Sequence[tuple[Path, JobConfig]]) -> list[Problem]:
    """Two files with one job.name (they would fence each other's runs), and jobs with equal or nested folders (one
    job's cleanup would delete the other's task output): problems of the later file."""
    problems: list[Problem] = []
    owners: dict[str, Path] = {}
    distinct: list[tuple[Path, JobConfig]] = []
    for path, config in jobs:
        if config.job_name in owners:
            message = f"'job.name' {config.job_name!r} is already the name of the job in {owners[config.job_name]}"
            problems.append(Problem(str(path), message, key="job.name"))
            continue
        owners[config.job_name] = path
        distinct.append((path, config))
    return problems + _shared_folders(distinct)


class _Migration:
    """Gobblin's keys with an oncelog equivalent, applied to the resolved values before they are checked.

    `values` is what the checks see; `consumed` are the Gobblin keys applied (not checked as unknown); `mapped`
    and `ignored` say what happened. Problems go to the parsed file, on the line of the Gobblin key.
    """

    def __init__(self, parsed: ParsedFile, values: dict[str, str]) -> None:
        self.parsed = parsed
        self.values = dict(values)
        self.consumed: set[str] = set()
        self.mapped: list[MappedKey] = []
        self.ignored: list[IgnoredKey] = []
        self._classes()
        self._task_data_root()
        self._fs_uris()
        self._parallel_commits()

    def _line(self, key: str) -> int | None:
        """The line a key is set on, when it came from a file."""
        entry = self.parsed.entries.get(key)
        return entry.line if entry else None

    def _set(self, source: str, target: str, value: str, note: str) -> None:
        """Apply `source` as `target` = `value` (a key the file did not set is located on the source's line)."""
        if target not in self.parsed.entries:
            self.parsed.entries[target] = Entry(value, self._line(source))
        self.values[target] = value
        self.mapped.append(MappedKey(source, target, value, note, self._line(source)))

    def _problem(self, key: str, message: str) -> None:
        """A problem about a Gobblin key, on its line."""
        self.parsed.problems.append(self.parsed.located(key, message))

    def _classes(self) -> None:
        """Gobblin's Java classes with an oncelog equivalent (BaseDataPublisher, AvroDataWriterBuilder, …)."""
        for key, value in list(self.values.items()):
            if _base(key) not in GOBBLIN_CLASS_KEYS or value.strip() not in GOBBLIN_CLASS_EQUIVALENTS:
                continue
            equivalent = GOBBLIN_CLASS_EQUIVALENTS[value.strip()]
            if equivalent is None:
                self._set(key, key, "", f"Gobblin's {value.strip()} is what oncelog does by default (key unset)")
            else:
                self._set(key, key, equivalent, f"Gobblin's {value.strip()} → {equivalent}")

    def _task_data_root(self) -> None:
        """Gobblin's task.data.root.dir: the staging and output folders below it, where they are not set."""
        root = self.values.get(TASK_DATA_ROOT, "").strip()
        if TASK_DATA_ROOT not in self.values:
            return
        self.consumed.add(TASK_DATA_ROOT)
        unset = [key for key in TASK_DATA_FOLDERS if not self.values.get(key, "").strip()]
        if not root or not unset:
            reason = "writer.staging.dir and writer.output.dir are set, and win" if root else "empty"
            self.ignored.append(IgnoredKey(TASK_DATA_ROOT, reason, self._line(TASK_DATA_ROOT)))
            return
        for key in unset:
            folder = urls.join(root, TASK_DATA_FOLDERS[key])
            self._set(TASK_DATA_ROOT, key, folder, f"{folder!r} (Gobblin's {TASK_DATA_FOLDERS[key]} below it)")

    def _fs_uris(self) -> None:
        """writer.fs.uri / data.publisher.fs.uri (and `.N`): a bare folder is resolved against the file system."""
        uri_keys = [key for key in self.values if _base(key) in FS_URI_FOLDERS]
        self.consumed.update(uri_keys)
        applied: set[str] = set()
        for key in [k for k in self.values if is_folder_key(k)]:
            uri_key = self._uri_key_of(key)
            if uri_key is not None and self._resolve_folder(key, uri_key):
                applied.add(uri_key)
        for uri_key in uri_keys:
            if uri_key in applied or not self.values[uri_key].strip():
                continue
            folders = FS_URI_FOLDERS[_base(uri_key)]
            suffixed = split_suffix(uri_key)
            if suffixed and any(self.values.get(folder, "").strip() for folder in folders):
                wanted = " and ".join(f"{folder}.{suffixed[1]}" for folder in folders)
                self._problem(uri_key, f"{uri_key!r} applies to branch {suffixed[1]}'s own folders, and none is set: "
                                       f"set {wanted} for it to apply")
                continue
            reason = f"the file system of {' and '.join(folders)}, and no such folder is set"
            self.ignored.append(IgnoredKey(uri_key, reason, self._line(uri_key)))

    def _uri_key_of(self, folder_key: str) -> str | None:
        """The URI key for a folder key: same branch suffix first; the publisher's falls back to the writer's."""
        suffixed = split_suffix(folder_key)
        base, suffix = (suffixed[0], f".{suffixed[1]}") if suffixed else (folder_key, "")
        owner = next((uri for uri, folders in FS_URI_FOLDERS.items() if base in folders), None)
        if owner is None:
            return None
        chain = [owner, WRITER_FS_URI] if owner == PUBLISHER_FS_URI else [owner]
        candidates = [f"{uri}{suffix}" for uri in chain if suffix] + chain
        return next((key for key in candidates if self.values.get(key, "").strip()), None)

    def _resolve_folder(self, folder_key: str, uri_key: str) -> bool:
        """Put a bare absolute folder on the URI's file system (True when the URI was applied; else a problem)."""
        uri, folder = self.values[uri_key].strip(), self.values[folder_key].strip()
        if not urls.has_scheme(uri):
            self._problem(uri_key, f"{uri_key!r}: {uri!r} is not a file-system URI (hdfs://namenode:8020, "
                                   f"s3a://bucket, file:///)")
            return False
        try:
            location = urls.parse(uri)
        except ValueError as e:
            self._problem(uri_key, f"{uri_key!r}: {e}")
            return False
        if urls.has_scheme(folder) or location.scheme is urls.Scheme.FILE:
            where = "already names its file system" if urls.has_scheme(folder) else "stays on the local disk"
            self.mapped.append(MappedKey(uri_key, folder_key, folder, f"{folder!r} {where}", self._line(uri_key)))
            return True
        if not folder.startswith("/"):
            self._problem(folder_key, f"{folder_key!r}: {folder!r} is relative, and {uri_key!r} puts it on "
                                      f"{location.root}: give an absolute path")
            return False
        resolved = location.root + posixpath.normpath(folder)
        self._set(uri_key, folder_key, resolved, f"{folder!r} on {uri!r} is {resolved!r}")
        return True

    def _parallel_commits(self) -> None:
        """Gobblin's job.commit.parallelize / job.commit.parallel.commits: datasets committed in parallel."""
        given = [k for k in (COMMIT_PARALLELIZE, PARALLEL_COMMITS) if k in self.values]
        if not given:
            return
        self.consumed.update(given)
        if self.values.get("commit.parallelism", "").strip():
            for key in given:
                self.ignored.append(IgnoredKey(key, "commit.parallelism is set, and wins", self._line(key)))
            return
        parallel = self.values.get(COMMIT_PARALLELIZE, "").strip().lower() in _TRUE
        commits = self.values.get(PARALLEL_COMMITS, "").strip() or str(GOBBLIN_PARALLEL_COMMITS)
        value = commits if parallel else "1"
        how = f"{PARALLEL_COMMITS} with {COMMIT_PARALLELIZE}=true" if parallel else f"{COMMIT_PARALLELIZE} is not true"
        self._set(given[0], "commit.parallelism", value, f"{value} dataset(s) committed at once ({how})")


def _base(key: str) -> str:
    """A key without its `.N` branch suffix."""
    suffixed = split_suffix(key)
    return suffixed[0] if suffixed else key


def _gobblin_reason(key: str, value: str) -> str | None:
    """Why a Gobblin key (or its `.N` branch form) has no meaning in oncelog; None when it is not one of them."""
    for name in dict.fromkeys((key, _base(key))):
        if name in GOBBLIN_KEYS_NOT_USED:
            return GOBBLIN_KEYS_NOT_USED[name]
        if name == REPLACE_FINAL_DIR and value.strip().lower() not in _TRUE:
            return REPLACE_FINAL_DIR_REASON
        prefix = next((p for p in GOBBLIN_PREFIXES_NOT_USED if name.startswith(p)), None)
        if prefix is not None:
            return GOBBLIN_PREFIXES_NOT_USED[prefix]
    return None


def _shared_folders(jobs: Sequence[tuple[Path, JobConfig]]) -> list[Problem]:
    """A problem for each pair of jobs with equal or nested folders, naming both files (disabled jobs included)."""
    roots = [(path, JobRoots.of(config)) for path, config in jobs]
    problems = []
    for index, (first_path, first) in enumerate(roots):
        for second_path, second in roots[index + 1:]:
            problems += [Problem(str(second_path), f"{message} (job {first.job!r} is defined in {first_path})")
                         for message in overlaps(first, second)]
    return problems


def _is_job_file(path: Path, root: Path) -> bool:
    """A file with a job-file extension, not hidden and not under a hidden directory."""
    hidden = any(part.startswith(".") for part in path.relative_to(root).parts)
    return not hidden and path.is_file() and path.suffix.lower() in JOB_FILE_SUFFIXES


def _ordered(problems: Sequence[Problem]) -> list[Problem]:
    """Problems without duplicates, by file then line (problems without a line first)."""
    unique = list(dict.fromkeys(problems))
    return sorted(unique, key=lambda p: (p.file, p.line or 0))



@dataclass(frozen=True)
class _Usage:
    """A construct class the job uses: the key naming it, and which branch's view of the keys it reads."""

    cls: type
    key: str
    branch: int | None
    branch_level: bool  # its keys may take a `.N` suffix


@dataclass(frozen=True)
class _Folder:
    """A staging, output or final folder of one branch: the key it came from, as written and resolved."""

    key: str
    where: str  # the key, and the branch when there are several
    value: str
    resolved: str

    @property
    def shown(self) -> str:
        """The value as written, with its resolved form when that differs."""
        return repr(self.value) if self.value == self.resolved else f"{self.value!r} ({self.resolved})"


class _Checker:
    """Runs every check over one file's resolved values, recording problems in the parsed file."""

    def __init__(self, parsed: ParsedFile, values: dict[str, str], consumed: frozenset[str]) -> None:
        self.parsed = parsed
        self.consumed = consumed  # Gobblin keys applied as their oncelog equivalent: not checked themselves
        self.ignored: list[IgnoredKey] = []  # Gobblin keys with no meaning here: listed in the job's one warning
        self.failed = frozenset(parsed.entries) - frozenset(values)  # substitution failed: already reported
        self.imported: dict[str, type | None] = {}
        self.bad_folders: set[str] = set()  # folder keys whose value is no folder oncelog serves: already reported
        self.values = {key: self._folder(key, value) if is_folder_key(key) else value for key, value in values.items()}

    def _folder(self, key: str, value: str) -> str:
        """A folder key's value as oncelog reads it; a scheme it cannot serve is a problem naming key and value."""
        stripped = value.strip()
        try:
            folder = folder_value(key, stripped)
        except ValueError as e:
            self.problem(key, f"{key!r}: {stripped!r}: {e}")
            self.bad_folders.add(key)
            return value
        return value if folder == stripped else folder

    def problem(self, key: str | None, message: str) -> None:
        """Record a problem about `key`, on the line the key is set when there is one."""
        self.parsed.problems.append(self.parsed.located(key, message))

    def run(self) -> JobConfig | None:
        """Every check in order; the JobConfig when the core keys are valid (other problems may remain)."""
        core = self._core()
        raw_branches = self.values.get("fork.branches", "").strip() or "1"
        lenient = int(raw_branches) if raw_branches.isdigit() and 1 <= int(raw_branches) <= MAX_BRANCHES else None
        branches = core.fork_branches if core else lenient  # None: invalid, reported; suffixes go unchecked
        usages, imports_ok = self._usages(branches or 1)
        self._check_keys(usages, branches, imports_ok)
        self._check_constructs(usages)
        self._check_speculation()
        if core is not None:
            self._check_master(core)
            self._check_branches(core)
            self._check_functions(core)
            self._check_partitioning(core)
        return core

    def _core(self) -> JobConfig | None:
        """Validate the core keys (values trimmed; an empty value means unset)."""
        data: dict[str, Any] = {k: v.strip() for k, v in self.values.items() if k in CORE_KEYS and v.strip()}
        try:
            return JobConfig.model_validate({**data, "properties": dict(self.values)})
        except ValidationError as e:
            for key, message in validation_messages(e, str, skip_missing=self.failed):
                self.problem(key, message)
            return None

    def _references(self, branches: int) -> list[tuple[str, str, int | None, bool]]:
        """Every (key, class path, branch view, branch-level) the job names, defaults included."""
        refs: list[tuple[str, str, int | None, bool]] = []
        for key, level in (("source.class", False), ("fork.operator.class", False),
                           ("converter.classes", True), (ROW_POLICIES, True)):
            refs += [(key, path, None, level) for path in split_list(self.values.get(key, ""))]
        publisher = self.values.get("data.publisher.type", "").strip() or DEFAULT_PUBLISHER
        for n in range(branches):
            sources = branch_sources(self.values, n, branches)
            sources.setdefault("writer.builder.class", ("writer.builder.class", DEFAULT_WRITER_BUILDER))
            for base in ("converter.classes", ROW_POLICIES, TASK_POLICIES, "writer.builder.class"):
                key, raw = sources.get(base, (base, ""))
                refs += [(key, path, n, True) for path in split_list(raw)]
            refs.append(("data.publisher.type", publisher, n, True))
        return refs

    def _usages(self, branches: int) -> tuple[list[_Usage], bool]:
        """Import every named class (once each); failures are problems naming key, value and file."""
        usages: list[_Usage] = []
        all_ok = True
        for key, path, branch, level in self._references(branches):
            if not DOTTED_PATH.match(path):
                all_ok = False  # the model checks report the malformed path
                continue
            if path not in self.imported:
                self.imported[path] = self._import(key, path)
            cls = self.imported[path]
            all_ok = all_ok and cls is not None
            if cls is not None:
                usages.append(_Usage(cls, key, branch, level))
        return list(dict.fromkeys(usages)), all_ok

    def _import(self, key: str, path: str) -> type | None:
        """Import one class and check its CONFIG_MODEL; None (and a problem) when it cannot be used."""
        given = "" if key in self.values else " (the default)"
        try:
            cls = import_class(path)
            construct_model(cls)
        except (ValueError, TypeError) as e:
            self.problem(key, f"{key!r}: cannot use {path!r}{given}: {e}")
            return None
        return cls

    def _check_keys(self, usages: list[_Usage], branches: int | None, imports_ok: bool) -> None:
        """Every key must be core, `spark.*`/`oncelog.log.*`, or read by a configured construct."""
        construct_keys: set[str] = set()
        branch_keys = set(BRANCH_KEYS)
        for usage in usages:
            model = construct_model(usage.cls)
            keys = set(model_keys(model)) if model else set()
            construct_keys |= keys
            branch_keys |= keys if usage.branch_level else set()
        for key in self.parsed.entries:
            if key in CORE_KEYS or key in construct_keys or key in self.consumed or key in PARTITION_KEYS:
                continue
            reason = _gobblin_reason(key, self.values.get(key, ""))
            if reason is not None:
                self.ignored.append(IgnoredKey(key, reason, self.parsed.entries[key].line))
                continue
            if key.startswith((SPARK_PREFIX, LOG_PREFIX, *HADOOP_PREFIXES)):
                continue
            suffixed = split_suffix(key)
            if suffixed and suffixed[0] in branch_keys:
                if branches is not None and suffixed[1] >= branches:
                    self.problem(key, f"{key!r}: branch {suffixed[1]} does not exist: fork.branches is {branches} "
                                      f"(branches are numbered from 0)")
                continue
            self._unknown(key, CORE_KEYS | construct_keys | GOBBLIN_KNOWN_KEYS, branch_keys, imports_ok)

    def _unknown(self, key: str, known: frozenset[str] | set[str], branch_keys: set[str], imports_ok: bool) -> None:
        """Report an unknown key, with a hint for keys that need a branch suffix, or a close match."""
        if key == REPLACE_FINAL_DIR:
            self.problem(key, f"{key!r}: oncelog never deletes a publish folder before publishing (each run adds "
                              f"its files, exactly once); remove the key or set it to false")
        elif key in BRANCH_KEYS:
            self.problem(key, f"{key!r} needs a branch suffix: {key}.N for branch N")
        else:
            hint = _suggestion(key, known, branch_keys)
            if imports_ok or hint:  # else it may be a key of a class that failed to import: not reported
                self.problem(key, f"unknown key {key!r}{hint}")

    def _check_constructs(self, usages: list[_Usage]) -> None:
        """Validate each construct's CONFIG_MODEL over the keys it reads, in each branch it is used in."""
        for usage in usages:
            model = construct_model(usage.cls)
            if model is None:
                continue
            data, used = construct_input(model, self.values, usage.branch)
            try:
                model.model_validate(data)
            except ValidationError as e:
                owner = f"read by {qualified_name(usage.cls)}, named by {usage.key!r}"
                for key, message in validation_messages(e, _key_of(used), owner, self.failed):
                    self.problem(key or usage.key, message)

    def _check_speculation(self) -> None:
        """Spark must not run a second attempt of a task alongside the first: both would write the same files."""
        value = self.values.get(SPECULATION, "").strip()
        if value and value.lower() != "false":
            self.problem(SPECULATION, f"{SPECULATION!r} must be false (got {value!r}): a speculative copy of a "
                                      f"task would fence the running copy's log writer; oncelog retries tasks itself "
                                      f"(task.maxretries)")

    def _check_functions(self, core: JobConfig) -> None:
        """Every DataFrame function must import (what it does to the columns is checked when a run starts)."""
        for path in core.converter_dataframe_functions:
            try:
                import_function(path)
            except ValueError as e:
                self.problem(FUNCTIONS_KEY, f"{FUNCTIONS_KEY!r}: cannot use {path!r}: {e}")

    def _check_partitioning(self, core: JobConfig) -> None:
        """The time partitioner's keys (pattern, granularity, time zone...), each problem naming its key; it splits
        what the default writer writes (a builder of the job's own gets no partition folders)."""
        for key, message in partitioning_problems(self.values):
            self.problem(key, f"{key!r}: {message}")
        if self.values.get(PARTITIONER_KEY, "").strip():
            for n in range(core.fork_branches):
                branch = build_branch(self.values, n, core.fork_branches)[0]
                builder = branch.writer_builder_class if branch is not None else DEFAULT_WRITER_BUILDER
                if builder != DEFAULT_WRITER_BUILDER:
                    self.problem(PARTITIONER_KEY, f"{PARTITIONER_KEY!r}: the partitioner splits the default writer's "
                                                  f"output ({DEFAULT_WRITER_BUILDER}); writer.builder.class is "
                                                  f"{builder}")
                    break

    def _check_master(self, core: JobConfig) -> None:
        """The master branch's row policies, and the unsuffixed task policies."""
        errors = policy_messages(core.row_policy_classes, core.row_policy_types, ROW_POLICY_TYPES,
                                 row_level=True, row_err_file=core.row_err_file)
        errors += policy_messages(core.task_policy_classes, core.task_policy_types, TASK_POLICY_TYPES, row_level=False)
        if core.row_policy_sql_type is PolicyType.ERR_FILE and core.row_err_file is None:
            errors.append(("qualitychecker.row.sql.type", "'qualitychecker.row.sql.type' is ERR_FILE but "
                                                          "'qualitychecker.row.err.file' is not set"))
        for key, message in errors:
            self.problem(key, message)

    def _check_branches(self, core: JobConfig) -> None:
        """Each branch's settings, what its writer and publisher need, and that branches do not share directories."""
        built: list[tuple[BranchConfig, dict[str, tuple[str, str]]]] = []
        for n in range(core.fork_branches):
            branch, sources, errors = build_branch(self.values, n, core.fork_branches)
            for key, message in errors:
                self.problem(key, message)
            if branch is not None:
                built.append((branch, sources))
                self._check_writer(core, branch, sources)
        self._check_separate_dirs(built, core.fork_branches)

    def _check_separate_dirs(self, built: list[tuple[BranchConfig, dict[str, tuple[str, str]]]],
                             branches: int) -> None:
        """Staging, task output and publish folders of every branch: none equal to or inside another.

        Paths compare resolved (absolute, symlinks followed): a publish root inside staging would be removed with it.
        """
        roots: list[tuple[_Folder, str]] = []
        for branch, sources in built:
            for base, attribute in PATH_KEYS.items():
                value = getattr(branch, attribute)
                key = sources[base][0] if base in sources else base
                if value is None or key in self.bad_folders:
                    continue
                where = f"{key!r}" + (f" (branch {branch.index})" if branches > 1 else "")
                resolved = resolved_path(value)
                roots.append((_Folder(key, where, value, resolved), resolved))
        for outer, inner in nested_pairs(roots):
            if inner.value.rstrip("/") == outer.value.rstrip("/"):
                detail = f"{inner.where} and {outer.where} are both {inner.value!r}"
            elif inner.resolved == outer.resolved:
                detail = (f"{inner.where} {inner.value!r} and {outer.where} {outer.value!r} are one folder, "
                          f"{inner.resolved}")
            else:
                detail = f"{inner.where} {inner.shown} is inside {outer.where} {outer.shown}"
            self.problem(inner.key, f"{detail}; staging, output and final folders must be separate: none equal to "
                                    f"or inside another")

    def _check_writer(self, core: JobConfig, branch: BranchConfig, sources: dict[str, tuple[str, str]]) -> None:
        """A builder of the job's own writes the output format (its SUPPORTED_OUTPUT_FORMATS, when it says); the
        default writer and publisher have their directories. What the default builder writes depends on the engine
        that runs the job: engines.choice.engine_problems checks it."""
        builder = self.imported.get(branch.writer_builder_class)
        supported = getattr(builder, "SUPPORTED_OUTPUT_FORMATS", None)
        if branch.writer_builder_class != DEFAULT_WRITER_BUILDER and supported is not None:
            if branch.writer_output_format not in {str(f).upper() for f in supported}:
                key = sources.get("writer.output.format", ("writer.output.format",))[0]
                formats = ", ".join(sorted(str(f).upper() for f in supported))
                self.problem(key, f"{key!r}: {branch.writer_output_format.value} is not written by "
                                  f"{branch.writer_builder_class} (it writes {formats})")
        self._check_default_dirs(core, branch)

    def _check_default_dirs(self, core: JobConfig, branch: BranchConfig) -> None:
        """The default writer and publisher move files: they need their directories."""
        needed: list[tuple[str, str]] = []
        if branch.writer_builder_class == DEFAULT_WRITER_BUILDER:
            needed += [("writer.staging.dir", DEFAULT_WRITER_BUILDER), ("writer.output.dir", DEFAULT_WRITER_BUILDER)]
        if core.publisher_type == DEFAULT_PUBLISHER:
            needed.append(("data.publisher.final.dir", DEFAULT_PUBLISHER))
        for base, user in needed:
            if getattr(branch, PATH_KEYS[base]) is None:
                per_branch = f" (or {base}.{branch.index} for branch {branch.index})" if core.fork_branches > 1 else ""
                self.problem(None, f"required key {base!r}{per_branch} is missing: {user} needs it")


def _key_of(used: Mapping[str, str]) -> Callable[[str], str]:
    """A field alias's key: the one `used` maps it to, else the alias itself."""
    return lambda alias: used.get(alias, alias)


def _suggestion(key: str, known: frozenset[str] | set[str], branch_keys: set[str]) -> str:
    """` (did you mean 'x'?)` for the closest known key, suffix-aware; empty when nothing is close."""
    suffixed = split_suffix(key)
    close = difflib.get_close_matches(suffixed[0], sorted(branch_keys), n=1, cutoff=0.75) if suffixed else []
    matches = [f"{close[0]}.{suffixed[1]}"] if close and suffixed else []
    matches = matches or difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {matches[0]!r}?)" if matches else ""
