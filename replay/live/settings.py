"""What `oncelog serve` is told (a frozen value object, so the CLI loads without the HTTP server's code)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PORT = 6066
DEFAULT_HOST = "127.0.0.1"
DEFAULT_POLL_S = 0.2
"""How often a caught-up view asks the log for its end offsets (the follow latency, at most)."""
DEFAULT_SNAPSHOT_EVERY = 100_000
"""Events folded since the last snapshot that make the view save a new one (a restart then folds less)."""


@dataclass(frozen=True)
class LiveSettings:
    """The log, the HTTP address, how often to look for new events, and when to save snapshots."""

    log_url: str
    port: int = DEFAULT_PORT
    host: str = DEFAULT_HOST
    poll_s: float = DEFAULT_POLL_S
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    """0: never save one (the view still starts from the latest snapshot others saved)."""
    use_snapshot: bool = True
    """False: fold the whole log from its start (ignores any snapshot)."""
    dataset_metrics: bool = False
    """Also serve two series per dataset on /metrics (last commit time, watermarks): off, so a job of thousands of
    datasets does not swamp Prometheus."""
