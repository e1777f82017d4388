"""The job launcher: Gobblin's job flow on Spark, publishing exactly once through commit-step events.

lock → recover unfinished commit sequences → plan work units → tasks on Spark → commit policy → the driver plans
all sequences in one atomic batch and applies them → job committed → clean up → release the lock. With
job.commit.on.executors=true (auto: from job.commit.executors.min.datasets datasets on), commit shards do it instead:
one task per shard of datasets, planning its sequences in one atomic batch and applying them.
The engine (Spark) starts once the lock is held and the Source planned work (asked before the run's start is recorded,
which then names Spark's application): a run with nothing to read is recorded without Spark.
SIGINT / SIGTERM before the sequences are planned cancels the run: nothing is published, the run is recorded as
cancelled. The first signal asks Spark to stop the run's tasks and waits for them; a second one stops at once (the tasks
are abandoned, their writers fenced). Once planned, the sequences are the point of no return: the commit finishes (or
the next run does it).
"""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from types import FrameType

from pyspark.sql import SparkSession

from events.errors import ConfigError, FencedError, OncelogError
from events.job import (
    ENGINE_PROPERTY,
    REASON_PROPERTY,
    DatasetSkipped,
    JobLockAcquired,
    JobLockReleased,
    JobRunCancelled,
    JobRunCommitted,
    JobRunFailed,
    JobRunStarted,
    JobRunSucceeded,
    WorkUnitSpec,
    WorkUnitsPlanned,
)
from events.keys import partition_for
from events.log import EventLog, open_log
from events.log.kafka.config import redact_settings
from events.log.lock import Displaced
from events.model import RunFields
from filesystems import urls
from filesystems.base import FileSystem
from filesystems.router import FileSystems
from projections.projector import fold_gc
from projections.state import State
from projections.views import DatasetView, Phase, RunStatus, SequenceView
from replay.lineage_client import LineageClient
from spark_pipeline.commit.faults import NO_FAULTS, FaultInjector, FaultPoint
from spark_pipeline.commit.sequence import CommitResult, Outcome
from spark_pipeline.commit.session import CommitSession, FenceHolders, open_session, shard_writer_name
from spark_pipeline.commit.settings import CommitSettings
from spark_pipeline.commit.shards import (
    ShardAction,
    ShardLostError,
    ShardWork,
    results_of,
    shard_of,
)
from spark_pipeline.commit.steps import PublishRoots
from spark_pipeline.completeness import with_completeness
from spark_pipeline.constructs import (
    CAUGHT_UP_PROPERTY,
    DataPublisher,
    DatasetOutput,
    MultiWorkUnit,
    SourceState,
)
from spark_pipeline.engines.attempts import TaskOutcome
from spark_pipeline.engines.base import TaskEngine
from spark_pipeline.engines.select import engine_for
from spark_pipeline.engines.spark import TasksAborted, TasksStopped, task_writer_name
from spark_pipeline.jobfile.config import CommitOnExecutors, JobCommitPolicy, JobConfig
from spark_pipeline.jobfile.paths import JobRoots, absolute_config, overlaps, run_dirs
from spark_pipeline.jobfile.plugins import import_class, make_construct
from spark_pipeline.lineage import RunLineage
from spark_pipeline.planning import pack_work_units, source_work_units
from spark_pipeline.progress import SILENT, RunObserver


class RunCancelled(OncelogError):
    """The run was cancelled (SIGINT / SIGTERM) before anything was published."""


CANCELLING = ("cancelling: asked Spark to stop the run's tasks, waiting for them to stop; nothing will be published "
              "— press Ctrl-C again (or send a second SIGTERM) to stop now")
STOPPING = ("stopping now: the run's tasks are abandoned (their log writers fenced), the run is recorded as cancelled; "
            "nothing is published")
STILL_STOPPING = "already stopping: recording the run as cancelled"
PUBLISHING = ("not cancelled: the commit is past its point of no return and finishes now (were this process killed, "
              "the next run or `oncelog recover` would finish it)")
"""What a signal does, as the launcher tells it (`notice`) at once."""


def ignore_notice(text: str) -> None:
    """The default `notice`: nobody to tell (library use)."""


@dataclass
class RunResult:
    """How a run ended, and what it did."""

    job: str
    run_id: str
    status: RunStatus
    error: str | None = None
    recovered: list[CommitResult] = field(default_factory=list)
    tasks: list[TaskOutcome] = field(default_factory=list)
    commits: list[CommitResult] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Datasets not pulled because their history was not settled, with the reason."""
    warnings: list[str] = field(default_factory=list)
    engine: tuple[str, str] | None = None
    """The task engine the run's tasks ran on and why (None: an engine that does not say)."""
    stopped_now: bool = False
    """A second signal stopped the run at once: abandoned tasks may still wind down in this process's threads."""

    @property
    def records_written(self) -> int:
        return sum(r.records_written for t in self.tasks for r in t.written)


@dataclass(frozen=True)
class EarlyPlan:
    """The Source's work units and the state they were planned from."""

    state: SourceState
    work_units: list[WorkUnitSpec]
    error: Exception | None = None
    """Why the Source could not plan (the work units are then empty)."""


def new_run_id(now: datetime) -> str:
    """A run id that sorts by start time and cannot collide: 20261121T120000123Z-1a2b3c."""
    return f"{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond // 1000:03d}Z-{uuid.uuid4().hex[:6]}"


class JobLauncher:
    """Runs a job once. The engine runs the tasks (default: Spark, from `spark` or the job's settings); `fs` is the
    file system publishing goes through (default: the job's file systems, by URL)."""

    def __init__(self, config: JobConfig, spark: SparkSession | None = None, faults: FaultInjector = NO_FAULTS,
                 run_id: str | None = None, engine: TaskEngine | None = None, fs: FileSystem | None = None,
                 log: EventLog | None = None, observer: RunObserver = SILENT,
                 lineage: LineageClient | None = None, take_over: bool = False,
                 notice: Callable[[str], None] = ignore_notice) -> None:
        self.config = absolute_config(config)
        self.take_over = take_over
        """Take the job's lock from a live run (which is fenced) instead of being refused."""
        self.log = log
        """The log to use, left open; None: the job's log URL is opened, and closed after the run."""
        self.engine = engine or engine_for(self.config, spark)
        """Runs the tasks: the engine `task.engine` chooses (dataframe or records), unless one is given."""
        self.faults = faults
        self.fs = fs or FileSystems.of(self.config.properties)
        self.run_id = run_id or new_run_id(datetime.now(UTC))
        self.cancel = threading.Event()
        self.stop_now = threading.Event()
        """Set by a second signal: stop waiting for the tasks."""
        self.notice = notice
        """Told at once, in a sentence, what a signal does (from the signal handler: it must not block)."""
        self._publishing = False
        self._in_tasks = False
        self.lineage = RunLineage(lineage or LineageClient.from_environment(), self.config.job_name, self.run_id)
        """Sends the run's OpenLineage events (`lineage`, else OpenLineage's standard configuration; off if none)."""
        self.observer = self.lineage.observing(observer)
        """Told the run's phases and counts as they go (a progress display)."""
        self._mwus: list[MultiWorkUnit] = []
        self._work_units: list[WorkUnitSpec] = []
        self._planned_at_ms = 0
        """The run's work units, and when its Source planned them (epoch ms): partition completeness reads both."""
        self._early: EarlyPlan | None = None
        """The Source's work units asked before the run's start is recorded (see `_plan_early`)."""
        self._engine_started = False
        self._ending: JobRunFailed | JobRunCancelled | None = None
        """The run's end once decided: appended again as it is (never a second payload under its key)."""

    @property
    def run_fields(self) -> RunFields:
        """The job and run id every event of this run carries."""
        return {"job": self.config.job_name, "run_id": self.run_id}

    def commit_settings(self) -> CommitSettings:
        """The job's commit settings: its publish roots, attempts, parallelism, shards, and the run's fault injector."""
        return commit_settings(self.config, self.faults)

    def run(self) -> RunResult:
        """The whole job flow; returns how it ended (FencedError if another run took the job over)."""
        config = self.config
        opened = nullcontext(self.log) if self.log is not None else open_log(config.log_url, config.log_settings)
        with opened as log, self._signals():
            log.ensure_topic()
            self.observer.phase(Phase.LOCK)
            lock = log.job_lock(config.job_name) if config.job_lock_enabled else None
            holder = (lock.acquire(self.run_id, take_over=self.take_over) if lock
                      else f"writer {self._writer_name()} (job lock off)")
            holders = dead_task_writers(config.job_name, self.run_id) if lock else None
            try:
                # A run plans, records and commits an object or more per dataset, all kept: with CPython's thresholds
                # each full collection walks them all again (measured at 100,000 datasets: 2.8 of planning's 4.1 s).
                with fold_gc(), open_session(log, self._writer_name(), self.commit_settings(), self.fs,
                                             holders) as session:
                    with self.lineage.following(log) as lineage_warnings:
                        result = self._run(session, holder, lock.displaced if lock else None)
                    result.warnings += lineage_warnings
                    return result
            finally:
                if lock:
                    lock.release()

    def _writer_name(self) -> str:
        """The job's writer: one name per job fences a concurrent run (Kafka's job lock), unless locking is off."""
        return self.config.job_name if self.config.job_lock_enabled else f"{self.config.job_name}.{self.run_id}"

    def _run(self, session: CommitSession, holder: str, displaced: Displaced | None = None) -> RunResult:
        config, run = self.config, self.run_fields
        check_own_folders(config, session.state)
        self._early = self._plan_early(session.state)
        if self._early.work_units or session.state.pending_sequences(config.job_name):
            self._start_engine()  # before the run's start is recorded, which then names the Spark application
        emit = session.sink.emit
        emit([JobLockAcquired(**run, holder=holder),
              JobRunStarted(**run, job_group=config.job_group,
                            properties={**public_properties(config), **self.engine.identity()})])
        identity = self.engine.identity()
        result = RunResult(config.job_name, self.run_id, RunStatus.RUNNING,
                           engine=(identity[ENGINE_PROPERTY], identity.get(REASON_PROPERTY, ""))
                           if ENGINE_PROPERTY in identity else None)
        warning = session.log.durability_warning
        if warning:
            result.warnings.append(warning)
        try:
            if config.job_lock_enabled:
                session.fence_shards()
                result.warnings += self._end_earlier_runs(session, displaced)
            self.observer.phase(Phase.RECOVER)
            result.recovered = self._recover(session)
            self._clean_stale(session)
            self._extract(session, result)
            if result.status is RunStatus.CANCELLED:
                return result
            self._publish(session, result)
        except FencedError:
            raise
        except RunCancelled as e:
            result.stopped_now = self.stop_now.is_set()
            self._finish(session, result, RunStatus.CANCELLED, str(e))
        except TasksAborted as e:  # a run's failure like a failed task's, shown in its summary: not a crash
            self.engine.stop(config, self.run_id, self._mwus, session.log)  # nothing of its tasks lands after its end
            self._finish(session, result, RunStatus.FAILED, str(e), failed_tasks=list(e.task_ids))
        except Exception as e:
            self._finish(session, result, RunStatus.FAILED, f"{type(e).__name__}: {e}")
            raise
        return result

    def _end_earlier_runs(self, session: CommitSession, displaced: Displaced | None) -> list[str]:
        """Record the end of every earlier run of the job the log shows unfinished: with the job's lock and writer
        now ours, each is over (dead, or fenced by a take-over), and must not stay RUNNING forever. Returns what to
        tell the user."""
        job = self.config.job_name
        ended = [r.run_id for r in session.state.runs_of(job) if r.run_id != self.run_id and not r.status.finished]
        if not ended:
            return []

        def reason(run_id: str) -> str:
            if displaced is not None and displaced.claim.run_id == run_id:
                return displaced.reason(self.run_id)
            return (f"dead: this run ended without recording its end and no longer held the job's lock; run "
                    f"{self.run_id} took the lock")

        session.sink.emit([JobRunFailed(job=job, run_id=run_id, error=reason(run_id)) for run_id in ended])
        return [f"earlier run {run_id} of {job} recorded as ended ({reason(run_id).split(':', 1)[0]})"
                for run_id in ended]

    def _extract(self, session: CommitSession, result: RunResult) -> None:
        """Plan work units from the committed state of the settled datasets, and run the tasks."""
        config, run = self.config, self.run_fields
        self.observer.phase(Phase.PLAN)
        state = session.state
        unsettled = state.unsettled_datasets(config.job_name)
        result.skipped = {urn: skip_reason(sequence) for urn, sequence in sorted(unsettled.items())}
        planned_from = source_state(self.config, state, self.run_id)
        early, self._early = self._early, None  # its units are copied below: not held twice for the run
        if early is not None and early.state == planned_from:
            if early.error is not None:
                raise early.error
            planned = early.work_units
        else:
            self._planned_at_ms = epoch_ms()
            planned = source_work_units(config, planned_from)
        if planned:
            self._start_engine()
        work_units, self._mwus = pack_work_units(config, planned, self.engine.slots)
        self._work_units = work_units
        skips = [DatasetSkipped(**run, dataset_urn=urn, sequence_id=unsettled[urn].sequence_id, reason=reason)
                 for urn, reason in result.skipped.items()]
        session.sink.emit([*skips, WorkUnitsPlanned(**run, work_units=tuple(work_units))])
        self._check_cancelled()
        self.observer.phase(Phase.TASKS, len(self._mwus))
        if self._mwus:
            try:
                self._in_tasks = True  # a second signal raises TasksStopped here, out of waiting for the tasks
                result.tasks = self.engine.run(config, self.run_id, self._mwus, self.observer.tasks_done)
            except Exception:
                self._check_cancelled()  # the tasks were cancelled by our signal handler
                raise
            finally:
                self._in_tasks = False
        self._check_cancelled()
        self.faults.reached(FaultPoint.AFTER_TASK_OUTPUT)
        session.catch_up()

    def _plan_early(self, state: State) -> EarlyPlan:
        """The Source's work units, asked before the run's start is recorded so that Spark starts only for a run with
        tasks (its application then named in JobRunStarted). Planning proper reuses them when recovery left what
        they were planned from unchanged (a failure too: raised there, where the run records it)."""
        planned_from = source_state(self.config, state, self.run_id)
        self._planned_at_ms = epoch_ms()
        try:
            return EarlyPlan(planned_from, source_work_units(self.config, planned_from))
        except Exception as e:  # raised again by planning proper, which records the run's failure
            return EarlyPlan(planned_from, [], e)

    def _start_engine(self) -> None:
        """Start the engine (Spark's JVM) once the run needs it, keeping the run's own SIGINT / SIGTERM handlers
        (Spark installs its own SIGINT handler as it starts)."""
        if self._engine_started:
            return
        self._engine_started = True
        self.observer.phase(Phase.START)
        if threading.current_thread() is not threading.main_thread():
            self.engine.start()
            return
        kept = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.engine.start()
        finally:
            for signum, handler in kept.items():
                if handler is not None:
                    signal.signal(signum, handler)

    def _publish(self, session: CommitSession, result: RunResult) -> None:
        """Apply the commit policy, then plan every dataset's sequence and commit them: per shard in the shards'
        tasks (each shard's sequences in one batch), or on the driver (all in one batch)."""
        config, run = self.config, self.run_fields
        failed = [t for t in result.tasks if not t.succeeded]
        if failed and config.job_commit_policy is JobCommitPolicy.FULL:
            self._finish(session, result, RunStatus.FAILED, failure_message(failed), failed_task_ids(failed))
            return
        succeeded = [] if failed else [
            JobRunSucceeded(**run, tasks=len(result.tasks), records_written=result.records_written,
                            records_extracted=sum(r.records_extracted for t in result.tasks for r in t.results))]
        outputs = with_event_time(self._work_units, self._planned_at_ms, session.state.dataset_states(config.job_name),
                                  [o for o in dataset_outputs(result.tasks, config.job_commit_policy)
                                   if o.dataset_urn not in result.skipped], set(result.skipped))
        self._check_cancelled(publishing=True)
        in_shards = self.commit_settings().in_shards(len(outputs))
        if in_shards:
            session.sink.emit(succeeded)
            self.observer.phase(Phase.COMMIT, len(outputs))
            result.commits = self._commit_shards(session, ShardAction.PUBLISH, outputs)
            self.observer.datasets_done(len(result.commits))
        else:
            result.commits = self._commit_on_driver(session, result, outputs, succeeded)
        unfinished = [c for c in result.commits if c.outcome is not Outcome.COMPLETED]
        if failed or unfinished:
            errors = [failure_message(failed)] if failed else []
            errors += [f"commit of {c.dataset_urn} {c.outcome}: {c.error}" for c in unfinished]
            self._finish(session, result, RunStatus.FAILED, "; ".join(errors), failed_task_ids(failed))
            return
        if in_shards:  # on the driver, commit_all recorded it with the last completions
            session.sink.emit(self._committed(result, result.commits))
        result.status = RunStatus.COMMITTED
        self._clean_up(session, settled=True)

    def _commit_on_driver(self, session: CommitSession, result: RunResult, outputs: list[DatasetOutput],
                          succeeded: Sequence[JobRunSucceeded]) -> list[CommitResult]:
        """Plan every dataset's sequence, record the plans in one atomic batch after the run's JobRunSucceeded (none
        after a failed task), then commit them here."""
        config = self.config
        publisher = make_construct(config, "data.publisher.type", config.publisher_type, DataPublisher)
        states = session.state.dataset_states(config.job_name)
        with fold_gc.paused():  # plans and their views, all kept: a collection would find nothing to free
            planned = with_completeness(config, self.run_id, publisher.plan(self.run_id, outputs, states), outputs,
                                        states)
            # the run's success and every dataset's sequence, one atomic batch: the point of no return
            session.sink.emit([*succeeded, *planned])
        self.faults.reached(FaultPoint.AFTER_PLANNING)
        keys = dict.fromkeys((p.job, p.dataset_urn, p.sequence_id) for p in planned)  # a sequence may span events
        views = [session.state.sequences[key] for key in keys]
        self.observer.phase(Phase.COMMIT, len(views))

        def closing(commits: list[CommitResult]) -> tuple[JobRunCommitted, ...]:
            """The run's JobRunCommitted, recorded with the last completions (none after a failed task)."""
            return self._committed(result, commits) if succeeded else ()

        return session.committer.commit_all(views, done=self.observer.datasets_done, closing=closing)

    def _committed(self, result: RunResult, commits: list[CommitResult]) -> tuple[JobRunCommitted, ...]:
        """The run's JobRunCommitted, if every sequence completed (none if any did not)."""
        if any(c.outcome is not Outcome.COMPLETED for c in commits):
            return ()
        return (JobRunCommitted(**self.run_fields,
                                datasets_committed=tuple(c.dataset_urn for c in commits),
                                datasets_abandoned=(), datasets_skipped=tuple(result.skipped)),)

    def _recover(self, session: CommitSession) -> list[CommitResult]:
        """Finish every pending sequence of the job before anything is extracted: per shard, in the shards' tasks
        (only shards holding one), or on the driver, as job.commit.on.executors says for this many sequences."""
        job = self.config.job_name
        if not self.commit_settings().in_shards(len(session.state.pending_sequences(job))):
            return session.committer.recover(job)
        return self._commit_shards(session, ShardAction.RECOVER, [])

    def _commit_shards(self, session: CommitSession, action: ShardAction, outputs: list[DatasetOutput]
                       ) -> list[CommitResult]:
        """Assign the datasets (RECOVER: the pending sequences) to shards, run one task per shard that has any, and
        (RECOVER) fold what they appended: the run plans from it. A published shard's events are not read back: its
        summary says how each sequence ended. A shard lost is a crash of that shard (the next run recovers it): the
        run fails."""
        settings, log = self.commit_settings(), session.log
        shards = settings.shard_count(log.partitions)
        assigned: dict[int, list[DatasetOutput]] = {}
        if action is ShardAction.RECOVER:
            for sequence in session.state.pending_sequences(self.config.job_name):
                assigned.setdefault(shard_of(sequence.dataset_urn, log.partitions, shards), [])
        for output in outputs:
            assigned.setdefault(shard_of(output.dataset_urn, log.partitions, shards), []).append(output)
        if not assigned:
            return []
        job = self.config.job_name
        newer_runs_from = session.state.offsets.get(partition_for(job, log.partitions), 0)
        work = [ShardWork(job, self.run_id, shard, shards, shard_writer_name(self._writer_name(), shard), action,
                          newer_runs_from, tuple(assigned[shard]))
                for shard in sorted(assigned)]
        self._start_engine()
        try:
            summaries = self.engine.commit_engine(log, self.fs).run(self.config, work, settings)
        except ShardLostError as e:
            self.faults.shard_lost(str(e))
            raise
        if action is ShardAction.RECOVER:
            session.catch_up()
        return results_of(summaries)

    def _finish(self, session: CommitSession, result: RunResult, status: RunStatus, error: str,
                failed_tasks: list[str] | None = None) -> None:
        """End the run as failed or cancelled: recorded (after every task event), unpublished output removed."""
        run = self.run_fields
        if self._ending is None:  # a failure to record the first ending must not record a second one
            result.status, result.error = status, error
            if status is RunStatus.CANCELLED:
                self.engine.stop(self.config, self.run_id, self._mwus, session.log)
                session.catch_up()
            self._ending = (JobRunCancelled(**run, reason=error) if status is RunStatus.CANCELLED
                            else JobRunFailed(**run, error=error[:4000], failed_tasks=tuple(failed_tasks or ())))
        session.sink.emit([self._ending])
        self._clean_up(session)

    def _clean_up(self, session: CommitSession, settled: bool = False) -> None:
        """Remove the run's staging and, unless a sequence of the run still needs it, its task output (`settled`:
        every sequence of the run completed, as the commit's results say; else the log is read to know)."""
        self.observer.phase(Phase.CLEANUP)
        keep_output = False
        if not settled:
            session.catch_up()  # what this run appended before a failure may be in the log: never delete what it needs
            keep_output = self.run_id in runs_holding_output(session, self.config.job_name)
        for dirs in run_dirs(self.config, self.run_id):
            self.fs.remove_tree(dirs.staging)
            self.faults.reached(FaultPoint.DURING_CLEANUP)
            if not keep_output:
                self.fs.remove_tree(dirs.output)
        session.sink.emit([JobLockReleased(job=self.config.job_name, run_id=self.run_id)])

    def _clean_stale(self, session: CommitSession) -> None:
        """Remove staging and task output that the log says belong to earlier runs of this job that are over (or, with
        the job lock held, dead), and that no unsettled sequence needs. Folders of other jobs are never touched."""
        job = self.config.job_name
        runs = {r.run_id for r in session.state.runs_of(job)
                if r.run_id != self.run_id and (r.status.finished or self.config.job_lock_enabled)}
        doomed = runs - runs_holding_output(session, job)
        for dirs in run_dirs(self.config, ""):
            for root in (dirs.staging, dirs.output):
                for name in self.fs.list_folders(root):
                    if name in doomed:
                        self.fs.remove_tree(urls.join(root, name))

    def _check_cancelled(self, publishing: bool = False) -> None:
        """RunCancelled once a signal came; `publishing`: the last check, after which a signal cancels nothing."""
        self._publishing = publishing  # first: a signal from here on is told the commit finishes, and sets no flag
        if self.cancel.is_set():
            self._publishing = False
            how = "a second signal stopped it at once" if self.stop_now.is_set() else "its tasks stopped"
            raise RunCancelled(f"cancelled by a signal before anything was published ({how}); the next run starts "
                               f"over")

    def _on_signal(self) -> None:
        """A signal (in the main thread): the first cancels (Spark asked to stop the tasks), the second stops now."""
        if self._publishing:
            self.notice(PUBLISHING)
            return
        if not self.cancel.is_set():
            self.cancel.set()
            self.notice(CANCELLING)
            # not from the handler itself: the main thread may be inside py4j
            threading.Thread(target=self.engine.cancel, args=(self.run_id,), daemon=True,
                             name="oncelog-cancel").start()
            return
        if self.stop_now.is_set():
            self.notice(STILL_STOPPING)
            return
        self.stop_now.set()
        self.notice(STOPPING)
        self.engine.halt(self.run_id)
        if self._in_tasks:
            self._in_tasks = False
            raise TasksStopped("stopped by a second signal while waiting for the run's tasks")

    @contextmanager
    def _signals(self) -> Iterator[None]:
        """SIGINT / SIGTERM cancel the run, a second one stops it now (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handler(signum: int, frame: FrameType | None) -> None:
            self._on_signal()

        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for signum, old in previous.items():
                signal.signal(signum, old)


def dead_task_writers(job: str, own_run_id: str | None = None) -> FenceHolders:
    """The task writers of the job's earlier unfinished runs, for the holder of the job's lock to fence: each such
    run is dead (or displaced by a take-over), and a task of it killed inside a Kafka transaction holds the log's
    stable end until the transaction times out (the log's write_timeout_s, two minutes by default)."""

    def names(state: State) -> list[str]:
        return sorted(task_writer_name(job, run.run_id, task) for run in state.runs_of(job)
                      if run.run_id != own_run_id and not run.status.finished
                      for task in state.task_ids(job, run.run_id))

    return names


def commit_settings(config: JobConfig, faults: FaultInjector = NO_FAULTS) -> CommitSettings:
    """A job's commit settings (its config made absolute first): publish roots, attempts, parallelism, shards."""
    dirs = run_dirs(config, "")
    on_executors = config.commit_on_executors
    if on_executors is CommitOnExecutors.AUTO and publisher_class(config).ONE_COMMIT_PER_RUN:
        on_executors = CommitOnExecutors.FALSE  # one table commit a run, not one a shard
    return CommitSettings(PublishRoots.of([d.output for d in dirs], [d.final for d in dirs]),
                          max_attempts=config.commit_sequence_max_attempts, parallelism=config.commit_parallelism,
                          shards=config.commit_shards, on_executors=on_executors,
                          executors_min_datasets=config.commit_executors_min_datasets,
                          batch_records=config.commit_batch_records,
                          fence_fresh_s=config.commit_fence_fresh_ms / 1000,
                          moves_ahead_min=config.commit_moves_ahead_min_datasets, faults=faults)


def publisher_class(config: JobConfig) -> type[DataPublisher]:
    """The class `data.publisher.type` names (DataPublisher itself when it names none: the job's checks say why)."""
    try:
        named = import_class(config.publisher_type)
    except ValueError:
        return DataPublisher
    return named if isinstance(named, type) and issubclass(named, DataPublisher) else DataPublisher


def source_state(config: JobConfig, state: State, run_id: str) -> SourceState:
    """What the Source plans a run from: the job's committed dataset states and previous work units, and the datasets
    whose history is not settled (not pulled)."""
    job = config.job_name
    return SourceState(config, run_id, state.dataset_states(job), tuple(state.previous_work_unit_states(job, run_id)),
                       frozenset(state.unsettled_datasets(job)))


def check_own_folders(config: JobConfig, state: State) -> None:
    """Refuse to run a job whose folders overlap those another job recorded in the log (a ConfigError naming both)."""
    mine = JobRoots.of(config)
    problems = [message for job, view in sorted(state.jobs.items()) if job != config.job_name and view.properties
                for message in overlaps(mine, JobRoots.from_properties(job, view.properties))]
    if problems:
        raise ConfigError("; ".join(problems) + "; nothing was run")


def runs_holding_output(session: CommitSession, job: str) -> set[str]:
    """Runs whose task output a sequence may still move: pending ones, and abandoned ones not rolled back."""
    return {s.run_id for s in session.state.sequences.values() if s.job == job and not s.settled}


def skip_reason(sequence: SequenceView) -> str:
    """Why a dataset is not pulled, and what settles it."""
    if sequence.pending:
        return (f"commit sequence {sequence.sequence_id} is still pending after recovery ({sequence.last_error}); "
                f"the next run or `oncelog recover` finishes it")
    return (f"commit sequence {sequence.sequence_id} was abandoned ({sequence.last_error}); "
            f"fix the cause, then `oncelog recover --release {sequence.dataset_urn}` rolls it back and frees it")


def dataset_outputs(tasks: list[TaskOutcome], policy: JobCommitPolicy) -> list[DatasetOutput]:
    """The work-unit results the commit policy publishes, grouped by dataset URN (in URN order): those of the work
    units that succeeded (a task's failing work units are isolated: engines.isolation), and under `partial` what
    the failed ones' last attempts fully wrote."""
    grouped: dict[str, list] = {}
    for task in tasks:
        for result in task.written if policy is JobCommitPolicy.PARTIAL else task.results:
            grouped.setdefault(result.dataset_urn, []).append(result)
    return [DatasetOutput(urn, tuple(results)) for urn, results in sorted(grouped.items())]


def epoch_ms() -> int:
    """The current time in epoch milliseconds."""
    return int(datetime.now(UTC).timestamp() * 1000)


def with_event_time(work_units: list[WorkUnitSpec], planned_at_ms: int, states: Mapping[str, DatasetView],
                    outputs: list[DatasetOutput], skipped: set[str]) -> list[DatasetOutput]:
    """The outputs, each with the source partitions caught up at planning (its Source said so of their work unit, and
    it was published to its end; or no work unit was planned for them), and an output without results for each
    dataset with time partitions still open and no work unit this run (idle: it may complete them)."""
    planned = {u.work_unit_id: u for u in work_units}
    pulled = {u.dataset_urn for u in work_units}
    with_units = {(u.dataset_urn, u.partition) for u in work_units}
    enriched = []
    for output in outputs:
        view = states.get(output.dataset_urn)
        caught = {r.partition for r in output.results
                  if (unit := planned.get(r.work_unit_id)) is not None
                  and unit.properties.get(CAUGHT_UP_PROPERTY) == "true"
                  and r.actual_high_watermark >= r.expected_high_watermark}
        caught |= {p for p in (view.watermarks if view else ()) if (output.dataset_urn, p) not in with_units}
        enriched.append(replace(output, caught_up=frozenset(caught), planned_at_ms=planned_at_ms))
    known = {o.dataset_urn for o in outputs}
    idle = [DatasetOutput(urn, (), frozenset(view.watermarks), planned_at_ms) for urn, view in sorted(states.items())
            if urn not in known and urn not in pulled and urn not in skipped and view.blocked_by is None
            and view.completeness is not None and view.completeness.open_partitions]
    return enriched + idle


def failure_message(failed: list[TaskOutcome]) -> str:
    """What failed, in one line per task (a task whose failing work units were isolated names them)."""
    return "; ".join(f"task {t.task_id}: work unit(s) failed: {t.error}"
                     if any(f.task_id != t.task_id for f in t.failures)
                     else f"task {t.task_id} failed after {t.attempts} attempt(s): {t.error}" for t in failed)


def failed_task_ids(failed: list[TaskOutcome]) -> list[str]:
    """The tasks (or parts of tasks) whose work units failed for good."""
    return [f.task_id for t in failed for f in t.failures] or [t.task_id for t in failed]


def public_properties(config: JobConfig) -> dict[str, str]:
    """The job's properties for the JobRunStarted event, without secret-looking values."""
    return redact_settings(config.properties)

