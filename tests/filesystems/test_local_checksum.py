"""The local file system's checksum, read with plain system calls: the same digest as hashlib's, and the same errors
as opening the file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from filesystems.base import CHECKSUM_CHUNK
from filesystems.local import LOCAL


@pytest.mark.parametrize("size", [0, 1, CHECKSUM_CHUNK - 1, CHECKSUM_CHUNK, 3 * CHECKSUM_CHUNK + 7])
def test_the_digest_is_sha256_of_the_whole_content(tmp_path: Path, size: int) -> None:
    content = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "part-0.avro"
    path.write_bytes(content)
    assert LOCAL.checksum(str(path)) == hashlib.sha256(content).hexdigest()


def test_a_missing_file_or_a_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="gone.avro"):
        LOCAL.checksum(str(tmp_path / "gone.avro"))
    with pytest.raises(IsADirectoryError):
        LOCAL.checksum(str(tmp_path))
