"""The child process of `filesystems.movers.ProcessMover`: makes the batches of folder moves its parent sends.

    python -m filesystems.mover_child REQUESTS_FD REPLIES_FD
"""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection

from filesystems.base import FolderMove
from filesystems.local import LocalFileSystem
from filesystems.movers import NOT_TRIED, READY, move_within


def _local(move: FolderMove) -> bool:
    """Whether both ends are plain local paths (what the child's LocalFileSystem serves)."""
    return move.src.startswith("/") and move.dst.startswith("/")


def serve(requests: Connection, replies: Connection) -> None:
    """The child: make each batch received, reply with its outcomes, until the requests pipe closes."""
    fs = LocalFileSystem()
    replies.send(READY)
    while True:
        try:
            deadline, moves = requests.recv()
        except EOFError:
            return
        replies.send([move_within(fs, move, deadline) if _local(move) else NOT_TRIED for move in moves])


def main(argv: list[str]) -> None:
    requests = Connection(int(argv[0]), writable=False)
    replies = Connection(int(argv[1]), readable=False)
    try:
        serve(requests, replies)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the parent is gone: what it started is made or not, its recovery verifies either


if __name__ == "__main__":
    main(sys.argv[1:])
