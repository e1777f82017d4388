"""The published files against what their commit sequences recorded: each file's size, from the publish folder's one
listing, and with a content check its SHA-256 — read streamed on a few threads, or on S3 the checksum the store
computed when the object was written — for every file, or for a seeded random sample of them.

A finding names the file, the sequence that published it (and where its plan lies in the log) and both sizes or both
checksums: recorded, and found.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from filesystems.base import FileInfo, FileSystem, FileSystemError

CONTENT_WORKERS = 8
"""Files read at once: reading is I/O bound (a disk, a DataNode, an S3 endpoint), a few streams keep it busy."""
IN_FLIGHT_PER_WORKER = 4
"""Reads queued per worker: enough to keep every thread busy, few enough that a huge history is not all queued."""
T = TypeVar("T")
R = TypeVar("R")


class FileProblem(Enum):
    """What a published file can be found to be, as the violation's kind."""

    MISSING = "missing-file"
    SIZE = "size-differs"
    CONTENT = "content-differs"


@dataclass(frozen=True)
class PublishedFile:
    """A file a completed sequence published: where, the size and SHA-256 it recorded, and which sequence."""

    path: str
    size: int
    checksum: str
    sequence: str
    """The sequence as a violation names it: its id, dataset and job."""
    at: str
    """Where the sequence's plan lies in the log (topic[partition]@offset)."""


@dataclass(frozen=True)
class Finding:
    """A published file that is not as its sequence recorded it."""

    problem: FileProblem
    message: str
    position: str


@dataclass(frozen=True)
class ContentCheck:
    """Whose content verify reads: every published file's, or `sample` of them chosen at random with `seed`."""

    sample: int | None = None
    seed: int = 0
    workers: int = CONTENT_WORKERS


@dataclass(frozen=True)
class FilesChecked:
    """What the check of the published files under the publish folder covered."""

    sizes: int
    """Files whose presence and size were compared (every one published under the folder)."""
    contents: int | None = None
    """Files whose content was compared (None: no content check); a sampled file found missing or of another size
    counts as checked (its finding is already there)."""
    sampled_from: int | None = None
    """With a sample: the files it was chosen from."""
    seed: int | None = None
    """With a sample: the seed that chose it (the same seed on the same history chooses the same files)."""


class ContentProgress(Protocol):
    """Told how far the content check is: once its extent, then each file as it is done (from one thread)."""

    def started(self, files: int, size: int) -> None:
        """The check reads `files` files of `size` bytes in all."""

    def checked(self, size: int) -> None:
        """One more file, of `size` bytes, is checked."""


@dataclass(frozen=True)
class Unshown:
    """The progress nobody sees (library use, tests, pipes)."""

    def started(self, files: int, size: int) -> None:
        """Nothing to show."""

    def checked(self, size: int) -> None:
        """Nothing to show."""


UNSHOWN = Unshown()


def check_files(expected: Sequence[PublishedFile], found: Mapping[str, FileInfo], fs: FileSystem,
                content: ContentCheck | None = None, progress: ContentProgress = UNSHOWN,
                ) -> tuple[list[Finding], FilesChecked]:
    """Each expected file (published under the folder) against the folder's listing (`found`, by the same canonical
    path): missing, or of another size; with `content`, the SHA-256 of every file (or a sample) of the right size."""
    findings: list[Finding] = []
    intact: list[tuple[PublishedFile, FileInfo]] = []
    for published in sorted(expected, key=lambda p: p.path):
        info = found.get(published.path)
        if info is None:
            findings.append(_missing(published))
        elif info.size != published.size:
            findings.append(Finding(FileProblem.SIZE, f"{published.path}, published by {published.sequence}, holds "
                                    f"{info.size:,} bytes; the sequence recorded {published.size:,}", published.at))
        else:
            intact.append((published, info))
    if content is None:
        return findings, FilesChecked(sizes=len(expected))
    chosen = choose(sorted(p.path for p in expected), content)
    to_read = [pair for pair in intact if pair[0].path in chosen]
    findings += check_contents(to_read, fs, content.workers, progress)
    sampled = content.sample is not None
    return sorted(findings, key=lambda f: f.message), FilesChecked(
        sizes=len(expected), contents=len(chosen), sampled_from=len(expected) if sampled else None,
        seed=content.seed if sampled else None)


def choose(paths: Sequence[str], content: ContentCheck) -> set[str]:
    """The files whose content is read: all, or `content.sample` of them chosen at random by `content.seed` (from
    the sorted paths, so one seed on one history always chooses the same files)."""
    if content.sample is None or content.sample >= len(paths):
        return set(paths)
    return set(random.Random(content.seed).sample(list(paths), content.sample))


def check_contents(files: Sequence[tuple[PublishedFile, FileInfo]], fs: FileSystem, workers: int,
                   progress: ContentProgress) -> list[Finding]:
    """Compare the SHA-256 of each file (found at its listed location) with the recorded one, `workers` at a time."""
    progress.started(len(files), sum(info.size for _, info in files))
    findings: list[Finding] = []
    for (published, info), checksum in parallel(files, lambda pair: _checksum(fs, pair[1].path), workers):
        progress.checked(info.size)
        if checksum is None:
            findings.append(_missing(published))
        elif checksum != published.checksum:
            findings.append(Finding(FileProblem.CONTENT, f"{published.path}, published by {published.sequence}, has "
                                    f"sha256 {checksum}; the sequence recorded {published.checksum}", published.at))
    return findings


def _checksum(fs: FileSystem, path: str) -> str | None:
    """The file's SHA-256 (hex), or None if it was deleted since the listing; a failed read names the file."""
    try:
        return fs.checksum(path)
    except (OSError, FileSystemError) as e:
        if fs.size(path) is None:
            return None
        raise FileSystemError(f"reading {path} to check its content failed: {e}") from e


def parallel(items: Iterable[T], work: Callable[[T], R], workers: int) -> Iterator[tuple[T, R]]:
    """(item, work(item)) for each item, as they finish, at most `workers` at once and a bounded queue (a history
    of millions of files is not all submitted at once); the first error stops the rest and is raised."""
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="verify-content")
    pending: dict[Future[R], T] = {}
    try:
        for item in items:
            pending[pool.submit(work, item)] = item
            if len(pending) >= workers * IN_FLIGHT_PER_WORKER:
                yield from _collect(pending)
        while pending:
            yield from _collect(pending)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _collect(pending: dict[Future[R], T]) -> Iterator[tuple[T, R]]:
    """Wait for at least one of the pending futures; yield those done, and forget them."""
    done, _ = wait(pending, return_when=FIRST_COMPLETED)
    for future in done:
        yield pending.pop(future), future.result()


def _missing(published: PublishedFile) -> Finding:
    return Finding(FileProblem.MISSING, f"{published.path}, published by {published.sequence}, is gone (the sequence "
                   f"recorded {published.size:,} bytes, sha256 {published.checksum})", published.at)
