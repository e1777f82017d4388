"""Destination folders made ahead of the renames into them, in a thread of their own.

A first run publishes each dataset into a folder new to it, and a local `mkdir` costs the kernel 0.03–0.8 ms of CPU
on the development VM (more than the rest of a dataset's commit at times). Sequences committed one after another on
one thread would pay it inside each sequence; made ahead in a second thread, it runs on another core while the
sequences' Python runs on this one (the system call releases the GIL). Nothing here is needed for correctness: a
rename still makes any folder not made yet, and an empty folder made for a sequence that then fails publishes nothing.
A process killed while folders are made is a crash before the renames into them. (The simulation's file system makes
no folder ahead, so that a seed replays alike whatever the threads' timing; the crash matrix and the SIGKILL soak run
this on real processes.)
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from types import TracebackType

from events.commit import FsRenameStep
from filesystems import urls
from filesystems.base import FileSystem, FileSystemError
from projections.views import SequenceView
from spark_pipeline.commit.steps import PublishRoots, UnsafeCommitStepError


class FolderPreparer:
    """Makes the folders the sequences' renames move files into, in the sequences' order, until every one is made or
    the commit ends (`with`: started on entry, stopped and joined on exit). Only folders of steps within the job's
    roots are made, as only such steps are applied; the first failure ends it (the rename then makes the folder, or
    says why it cannot)."""

    def __init__(self, fs: FileSystem, roots: PublishRoots, views: Sequence[SequenceView]) -> None:
        self.fs = fs
        self.roots = roots
        self.views = views
        self.made = 0
        """Folders made (or found made) so far."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-folders", daemon=True)

    def __enter__(self) -> FolderPreparer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            for folder in self._folders():
                if self._stop.is_set():
                    return
                self.fs.prepare_folder(folder)
                self.made += 1
        except (OSError, FileSystemError):
            return

    def _folders(self) -> Iterator[str]:
        """Each sequence's destination folders, once in a row, for the steps the roots allow."""
        last = None
        for view in self.views:
            for index, spec in enumerate(view.steps):
                if not isinstance(spec, FsRenameStep) or index in view.applied:
                    continue
                try:
                    self.roots.check(index, spec)
                except UnsafeCommitStepError:
                    break  # the sequence is refused before anything moves: nothing of it is made
                folder = urls.parent(spec.dst)
                if folder != last:
                    yield folder
                    last = folder
