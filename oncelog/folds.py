"""The public API's fold: a log's current state, as `oncelog state` computes it."""

from __future__ import annotations

from events.log import EventLog, open_log
from projections.projector import Projector
from projections.state import State


def rebuild(log: EventLog | str) -> State:
    """The state of a log (given open, or by URL): its latest snapshot plus the tail, folded."""
    if isinstance(log, str):
        with open_log(log) as opened:
            return rebuild(opened)
    state, _ = Projector(log).rebuild()
    return state
