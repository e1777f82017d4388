"""What a local server is built from, made once into the cache: jars resolved by Maven, a binary built by Go.

Each is made in a staging folder, marked complete last and renamed into place, so an interrupted run never leaves
a half copy that looks whole, and two processes making it at once both succeed (the second uses the first's).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from rich.console import Console

from localservers.tools import JAVA_HINT, MAVEN_HINT, find_tool, tail

MARKER = ".complete"
Prepare = Callable[[Path], tuple[list[str], Mapping[str, str] | None]]
"""Given the staging folder, set it up and return the command (and environment) that fills `staging/out`."""


def build_once(final: Path, what: str, error: type[Exception], prepare: Prepare, timeout_s: float = 900) -> Path:
    """`final`, made by running prepare's command once (its output in `staging/out`); `error` names the log."""
    if (final / MARKER).is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=final.parent))
    try:
        command, env = prepare(staging)
        started, console = time.monotonic(), Console(stderr=True)
        with console.status(f"Making {what} into {final} (first run only)"):
            try:
                done = subprocess.run(command, cwd=staging, env=env, capture_output=True, text=True,
                                      timeout=timeout_s)
            except (OSError, subprocess.SubprocessError) as e:  # the timeout included
                raise error(f"running `{Path(command[0]).name}` to make {what} failed: {e}") from e
        out = staging / "out"
        if done.returncode != 0 or not out.is_dir():
            (log := final.parent / "build.log").write_text(done.stdout + done.stderr)
            raise error(f"`{Path(command[0]).name}` failed (exit {done.returncode}) to make {what}; full output in "
                        f"{log}\n{tail(done.stdout + done.stderr)}")
        (out / MARKER).write_text(f"{what}\n")
        if final.exists() and not (final / MARKER).is_file():
            shutil.rmtree(final)  # an incomplete copy from an interrupted run
        try:
            out.rename(final)
        except OSError as e:
            if not (final / MARKER).is_file():  # else a concurrent process finished first: use its copy
                raise error(f"cannot move {what} into {final}: {e}") from e
        console.print(f"{what} ready in {final} ({time.monotonic() - started:.1f}s)")
        return final
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def resolve_jars(pom: Path, version_dir: Path, what: str, error: type[Exception]) -> Path:
    """The runtime jars of `pom` in `version_dir/libs`, resolved by Maven on first use."""

    def prepare(staging: Path) -> tuple[list[str], Mapping[str, str] | None]:
        find_tool("java", JAVA_HINT, error)
        mvn = find_tool("mvn", MAVEN_HINT, error)
        shutil.copyfile(pom, staging / "pom.xml")
        return [mvn, "-B", "-ntp", "-f", str(staging / "pom.xml"), "dependency:copy-dependencies",
                f"-DoutputDirectory={staging / 'out'}", "-DincludeScope=runtime"], None

    return build_once(version_dir / "libs", f"the {what} jars", error, prepare)
