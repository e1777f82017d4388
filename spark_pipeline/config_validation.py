"""Loading job files: parse, substitute, check every key against the models the job's constructs declare."""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from spark_pipeline.config import (
    BRANCH_KEYS,
    CORE_KEYS,
    DEFAULT_PUBLISHER,
    DEFAULT_WRITER_BUILDER,
    DOTTED_PATH,
    GOBBLIN_KEYS_NOT_USED,
    LOG_PREFIX,
    MAX_BRANCHES,
    PATH_KEYS,
    ROW_POLICIES,
    ROW_POLICY_TYPES,
    SPARK_PREFIX,
    SPECULATION,
    TASK_POLICIES,
    TASK_POLICY_TYPES,
    BranchConfig,
    JobConfig,
    JobConfigError,
    WriterOutputFormat,
    branch_sources,
    build_branch,
    construct_input,
    construct_model,
    import_class,
    folder_value,
    is_folder_key,
    model_keys,
    policy_messages,
    qualified_name,
    split_list,
    split_suffix,
    validation_messages,
)
from filesystems.settings import HADOOP_PREFIXES
from spark_pipeline.config_files import JOB_FILE_SUFFIXES, ParsedFile, Problem, parse_job_file, substitute
from spark_pipeline.paths import JobRoots, nested_pairs, overlaps, resolved_path



def load_job_config(path: str | Path, *, environ: Mapping[str, str] | None = None) -> JobConfig:
    """Load and fully validate one job file; raises JobConfigError listing every problem before anything runs."""
    parsed = parse_job_file(Path(path))
    return validate_parsed(parsed, os.environ if environ is None else environ)


def validate_parsed(parsed: ParsedFile, environ: Mapping[str, str]) -> JobConfig:
    """Substitute, validate and build a JobConfig from a parsed file, or raise JobConfigError."""
    if not parsed.readable:
        raise JobConfigError(_ordered(parsed.problems))
    values = substitute(parsed, environ)
    config = _Checker(parsed, values).run()
    if parsed.problems or config is None:
        raise JobConfigError(_ordered(parsed.problems))
    return config


def load_job_dir(directory: str | Path, *, environ: Mapping[str, str] | None = None) -> list[JobConfig]:
    """Every job file under `directory` (recursively, hidden entries skipped), sorted by path.

    One bad file fails the whole directory, with every file's problems listed; two files with one job.name too
    (they would fence each other's runs), and two jobs whose folders are equal or nested (one job's cleanup would
    delete the other's task output).
    """
    root = Path(directory)
    if not root.is_dir():
        raise JobConfigError([Problem(str(root), "not a directory of job files")])
    configs: list[JobConfig] = []
    problems: list[Problem] = []
    owners: dict[str, Path] = {}
    for path in sorted(p for p in root.rglob("*") if _is_job_file(p, root)):
        try:
            config = load_job_config(path, environ=environ)
        except JobConfigError as e:
            problems.extend(e.problems)
            continue
        if config.job_name in owners:
            message = f"'job.name' {config.job_name!r} is already the name of the job in {owners[config.job_name]}"
            problems.append(Problem(str(path), message, key="job.name"))
            continue
        owners[config.job_name] = path
        configs.append(config)
    problems += _shared_folders([(owners[c.job_name], c) for c in configs])
    if problems:
        raise JobConfigError(problems)
    return configs


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

    def __init__(self, parsed: ParsedFile, values: dict[str, str]) -> None:
        self.parsed = parsed
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
        entry = self.parsed.entries.get(key) if key else None
        self.parsed.problems.append(Problem(self.parsed.file, message, entry.line if entry else None, key))

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
            if key in CORE_KEYS or key in construct_keys or key.startswith((SPARK_PREFIX, LOG_PREFIX, *HADOOP_PREFIXES)):
                continue
            suffixed = split_suffix(key)
            if suffixed and suffixed[0] in branch_keys:
                if branches is not None and suffixed[1] >= branches:
                    self.problem(key, f"{key!r}: branch {suffixed[1]} does not exist: fork.branches is {branches} "
                                      f"(branches are numbered from 0)")
                continue
            self._unknown(key, CORE_KEYS | construct_keys, branch_keys, imports_ok)

    def _unknown(self, key: str, known: frozenset[str] | set[str], branch_keys: set[str], imports_ok: bool) -> None:
        """Report an unknown key, with a hint for Gobblin keys oncelog does not use, or a close match."""
        if key in GOBBLIN_KEYS_NOT_USED:
            self.problem(key, f"{key!r} is a Gobblin key oncelog does not use: {GOBBLIN_KEYS_NOT_USED[key]}")
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
                for key, message in validation_messages(e, lambda a: used.get(a, a), owner, self.failed):
                    self.problem(key or usage.key, message)

    def _check_speculation(self) -> None:
        """Spark must not run a second attempt of a task alongside the first: both would write the same files."""
        value = self.values.get(SPECULATION, "").strip()
        if value and value.lower() != "false":
            self.problem(SPECULATION, f"{SPECULATION!r} must be false (got {value!r}): two attempts of one task "
                                      f"write the same file names; oncelog retries tasks itself (task.maxretries)")

    def _check_master(self, core: JobConfig) -> None:
        """The master branch's row policies, and the unsuffixed task policies."""
        errors = policy_messages(core.row_policy_classes, core.row_policy_types, ROW_POLICY_TYPES,
                                 row_level=True, row_err_file=core.row_err_file)
        errors += policy_messages(core.task_policy_classes, core.task_policy_types, TASK_POLICY_TYPES, row_level=False)
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
        """The output format is one the builder writes; the default writer and publisher have their directories."""
        builder = self.imported.get(branch.writer_builder_class)
        supported = getattr(builder, "SUPPORTED_OUTPUT_FORMATS", None)
        if supported is None and branch.writer_builder_class == DEFAULT_WRITER_BUILDER:
            supported = (WriterOutputFormat.AVRO,)
        if supported is not None and branch.writer_output_format not in {str(f).upper() for f in supported}:
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


def _suggestion(key: str, known: frozenset[str] | set[str], branch_keys: set[str]) -> str:
    """` (did you mean 'x'?)` for the closest known key, suffix-aware; empty when nothing is close."""
    suffixed = split_suffix(key)
    close = difflib.get_close_matches(suffixed[0], sorted(branch_keys), n=1, cutoff=0.75) if suffixed else []
    matches = [f"{close[0]}.{suffixed[1]}"] if close and suffixed else []
    matches = matches or difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {matches[0]!r}?)" if matches else ""
