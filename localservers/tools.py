"""What every local server needs before it starts: a cache folder, the tools it runs, free loopback ports."""

from __future__ import annotations

import os
import random
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path

JAVA_HINT = "install a Java 17+ JDK (e.g. `apt install openjdk-17-jdk-headless`, `brew install openjdk@17`)"
MAVEN_HINT = "install Apache Maven (e.g. `apt install maven`, `brew install maven`)"


def default_cache_dir() -> Path:
    """Where jars and binaries are cached: ``$ONCELOG_CACHE``, else ``$XDG_CACHE_HOME/oncelog``, else
    ``~/.cache/oncelog``."""
    if explicit := os.environ.get("ONCELOG_CACHE"):
        return Path(explicit).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "oncelog"


def find_tool(name: str, hint: str, error: type[Exception]) -> str:
    """The path of an executable (``java`` honours ``$JAVA_HOME``), or `error` saying what to install."""
    java_home = Path(os.environ.get("JAVA_HOME") or "/nonexistent")
    if name == "java" and (java_home / "bin" / "java").is_file():
        return str(java_home / "bin" / "java")
    if (found := shutil.which(name)) is None:
        raise error(f"`{name}` was not found on PATH: {hint}")
    return found


def tail(text: str, lines: int = 40) -> str:
    """The last lines of a tool's output, for error messages."""
    return "\n".join(text.strip().splitlines()[-lines:])


def port_is_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:port now (with SO_REUSEADDR, as the JVM does)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port(what: str, error: type[Exception], avoid: int | None = None) -> int:
    """A free loopback port below the ephemeral range, so that no outgoing connection takes it between restarts."""
    return free_ports(1, what, error, taken=() if avoid is None else (avoid,))[0]


def free_ports(count: int, what: str, error: type[Exception], taken: Iterable[int] = ()) -> list[int]:
    """`count` distinct free loopback ports below the ephemeral range, none of them in `taken`."""
    try:  # Linux; other systems hand out 49152+ (or 32768+)
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    rng, avoid = random.SystemRandom(), set(taken)
    ports: list[int] = []
    for _ in range(100 * count):
        port = rng.randint(20000, max(20001, ephemeral_low - 1))
        if port not in avoid and port_is_free(port):
            avoid.add(port)
            ports.append(port)
            if len(ports) == count:
                return ports
    raise error(f"found no free port on 127.0.0.1 for {what}; pass one explicitly")
