"""The CLI's timestamp format, shared by the terminal renderers (`replay/render.py`) and the live view's documents."""

from __future__ import annotations

from datetime import datetime


def when(moment: datetime | None) -> str | None:
    """A time as the CLI prints it: ISO-8601 UTC with milliseconds, or None."""
    return None if moment is None else moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
