"""What a test does when a real system it needs cannot be had: fail under ``CI=true``, skip elsewhere.

CI must never go green by silently skipping the Kafka, Spark, HDFS, S3 or browser suites.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``, ``1`` or ``yes``)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def unavailable(what: str, reason: str) -> NoReturn:
    """Fail under CI, skip otherwise, saying which system is missing and why."""
    message = f"no {what} available: {reason}"
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
