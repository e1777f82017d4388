"""`oncelog s3 up --bucket NAME` with a name S3 refuses: the rule is told, and no server is left running."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from localservers import s3 as s3_local
from localservers.s3_cli import app


@pytest.mark.parametrize("name", ["hb", "Orders", "a" * 64, "-orders", "my..bucket", "192.168.1.1"])
def test_an_invalid_bucket_name_is_explained_and_starts_no_server(name: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["up", "--bucket", "orders", "--bucket", name, "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert f"--bucket {name!r} is not a valid S3 bucket name: 3 to 63 characters: lowercase letters" in result.stderr
    assert s3_local.status(tmp_path) is None
    assert result.stdout == ""


@pytest.mark.parametrize("name", ["hb1", "orders.2026-11", "a" * 63])
def test_valid_bucket_names_pass(name: str) -> None:
    s3_local.check_bucket_name(name)
