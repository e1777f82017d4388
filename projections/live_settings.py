"""What `oncelog serve` is told, apart from the faust app itself (so the CLI loads without importing faust)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_APP_ID = "oncelog-live"
DEFAULT_PORT = 6066
DEFAULT_HOST = "127.0.0.1"
DEFAULT_DATA_DIR = Path(".oncelog/live")


@dataclass(frozen=True)
class LiveSettings:
    """The log, the HTTP port and host, the app id (consumer group), the data dir."""

    log_url: str
    port: int = DEFAULT_PORT
    host: str = DEFAULT_HOST
    app_id: str = DEFAULT_APP_ID
    data_dir: Path = DEFAULT_DATA_DIR
