"""OpenLineage's own client, configured the standard way, and off unless configured.

Configured means any of OpenLineage's standard settings: `OPENLINEAGE_URL` (with `OPENLINEAGE_ENDPOINT`,
`OPENLINEAGE_API_KEY`), `OPENLINEAGE__TRANSPORT__…` variables, or an `openlineage.yml` (named by `OPENLINEAGE_CONFIG`,
else in the working directory, else in `~/.openlineage/`); `OPENLINEAGE_DISABLED=true` turns it off.
`OPENLINEAGE_NAMESPACE` names the job namespace (default `oncelog`). The client's failures become LineageError.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

from openlineage.client import OpenLineageClient
from openlineage.client.event_v2 import RunEvent
from openlineage.client.transport.http import HttpTransport

from events.errors import ConfigError, EventDecodeError, OncelogError
from events.job import JobRunStarted
from events.log import EventLog
from events.model import Event
from replay.lineage import DEFAULT_NAMESPACE, DEFAULT_PRODUCER, LineageSettings, runs_of

CONFIG_FILE = "openlineage.yml"


class LineageError(OncelogError):
    """An OpenLineage event could not be sent: the endpoint is unreachable or refused it; names the endpoint."""


def lineage_configured(environ: Mapping[str, str], cwd: Path, home: Path) -> bool:
    """Whether OpenLineage is configured by its standard settings (and not disabled)."""
    if environ.get("OPENLINEAGE_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OPENLINEAGE_URL") or any(k.startswith("OPENLINEAGE__TRANSPORT") for k in environ):
        return True
    named = environ.get("OPENLINEAGE_CONFIG")
    return any(p.is_file() for p in (Path(named) if named else None, cwd / CONFIG_FILE,
                                     home / ".openlineage" / CONFIG_FILE) if p is not None)


@contextmanager
def environment_kept() -> Iterator[None]:
    """Leave os.environ as it was: OpenLineage's client writes `OPENLINEAGE__TRANSPORT__…` copies of OPENLINEAGE_URL
    into it, which would outlive the setting they copy (and make lineage look configured after it is removed)."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        os.environ.update(before)


def lineage_settings(environ: Mapping[str, str]) -> LineageSettings:
    """The job namespace (`OPENLINEAGE_NAMESPACE`), the producer and oncelog's version."""
    try:
        installed = package_version("oncelog")
    except PackageNotFoundError:
        installed = "unknown"
    return LineageSettings(environ.get("OPENLINEAGE_NAMESPACE") or DEFAULT_NAMESPACE, DEFAULT_PRODUCER, installed)


class LineageClient:
    """Sends OpenLineage run events through OpenLineage's client."""

    def __init__(self, client: OpenLineageClient, settings: LineageSettings) -> None:
        self.client = client
        self.settings = settings

    @classmethod
    def from_environment(cls) -> LineageClient | None:
        """The client OpenLineage's standard configuration describes; None when it describes none (lineage off).

        ConfigError when the configuration is there but cannot be used (it names where it is read from)."""
        if not lineage_configured(os.environ, Path.cwd(), Path.home()):
            return None
        try:
            with environment_kept():
                client = OpenLineageClient()
        except Exception as e:  # the client raises what its transport factory and YAML parser raise
            raise ConfigError(f"the OpenLineage configuration (OPENLINEAGE_URL, OPENLINEAGE__TRANSPORT__*, "
                              f"OPENLINEAGE_CONFIG or {CONFIG_FILE}) cannot be used: {e}") from e
        return cls(client, lineage_settings(os.environ))

    @property
    def endpoint(self) -> str:
        """Where events go: the HTTP endpoint, else the transport's kind."""
        transport = self.client.transport
        if isinstance(transport, HttpTransport):
            return f"{transport.url.rstrip('/')}/{transport.endpoint.lstrip('/')}"
        return f"the {transport.kind} transport"

    def send(self, event: RunEvent) -> None:
        """Send one event; LineageError naming the endpoint if it cannot be sent."""
        try:
            self.client.emit(event)
        except Exception as e:  # requests' and the transports' errors, whatever the transport
            raise LineageError(f"OpenLineage {event.eventType.value if event.eventType else 'event'} of job "
                               f"{event.job.name!r} could not be sent to {self.endpoint}: {e}") from e

    def close(self) -> None:
        """Let the transport finish and release its connections."""
        self.client.close(timeout=5.0)


def past_runs(log: EventLog, since: datetime, job: str | None, progress: Callable[[int], None],
              unreadable: Callable[[EventDecodeError], None]) -> list[list[Event]]:
    """The events of every run (of `job`, if given) that started at or after `since`, run by run in start order:
    read from the log's first record at that time to its end. Records that cannot be decoded go to `unreadable`."""
    events: list[Event] = []
    for count, logged in enumerate(log.read(log.offsets_for_time(int(since.timestamp() * 1000)),
                                            on_error=unreadable), start=1):
        if job is None or logged.event.job == job:
            events.append(logged.event)
        if count % 10_000 == 0:
            progress(count)
    runs = [run for run in runs_of(events).values()
            if any(isinstance(e, JobRunStarted) and e.emitted_at >= since for e in run)]
    return sorted(runs, key=lambda run: next(e.emitted_at for e in run if isinstance(e, JobRunStarted)))
