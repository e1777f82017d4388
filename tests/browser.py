"""A real browser for tests: Debian's Chromium, headless. Installed with apt-get when missing (as root); under CI
a browser that cannot be had fails the test run, elsewhere the tests that need it are skipped."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.unavailable import unavailable

CHROMIUM = "/usr/bin/chromium"
INSTALL_TIMEOUT_S = 900
RENDER_TIMEOUT_S = 120
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--mute-audio")


class BrowserUnavailable(Exception):
    """Chromium is not installed and could not be installed."""


@dataclass(frozen=True)
class Rendered:
    """A page as the browser left it after loading it: its DOM, and how long the browser took (start to exit)."""

    dom: str
    wall_s: float


@dataclass(frozen=True)
class Browser:
    """Headless Chromium at `path`, each call with a fresh profile."""

    path: str

    def _run(self, args: list[str], timeout_s: float) -> tuple[subprocess.CompletedProcess[str], float]:
        with tempfile.TemporaryDirectory(prefix="oncelog-chromium-") as profile:
            began = time.monotonic()
            done = subprocess.run([self.path, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                                  text=True, timeout=timeout_s, check=False)
            return done, time.monotonic() - began

    def dump_dom(self, page: Path, fragment: str = "", timeout_s: float = RENDER_TIMEOUT_S) -> Rendered:
        """The DOM after the page loaded and its scripts ran (`fragment`: a #… added to its URL)."""
        done, wall = self._run(["--dump-dom", page.resolve().as_uri() + fragment], timeout_s)
        if done.returncode != 0 or "<html" not in done.stdout:
            raise AssertionError(f"chromium could not render {page} (exit {done.returncode}): {done.stderr[-2000:]}")
        return Rendered(done.stdout, wall)

    def screenshot(self, page: Path, out: Path, width: int = 1280, height: int = 2000) -> Path:
        """A PNG of the page as a person would see it, `width` × `height` pixels."""
        done, _ = self._run([f"--screenshot={out}", f"--window-size={width},{height}", page.resolve().as_uri()],
                            RENDER_TIMEOUT_S)
        if done.returncode != 0 or not out.exists():
            raise AssertionError(f"chromium took no screenshot of {page} (exit {done.returncode}): "
                                 f"{done.stderr[-2000:]}")
        return out


def find_or_install_chromium() -> str:
    """The path of Debian's Chromium, installed with apt-get if missing; BrowserUnavailable when that fails."""
    found = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        raise BrowserUnavailable("chromium is not installed, and only root can apt-get install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise BrowserUnavailable(f"{' '.join(command)} failed: {e}") from e
        if done.returncode != 0:
            raise BrowserUnavailable(f"{' '.join(command)} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    if not Path(CHROMIUM).exists():
        raise BrowserUnavailable(f"apt-get installed chromium, but {CHROMIUM} is not there")
    return CHROMIUM


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Headless Chromium; under CI=true a browser that cannot be had is a failure, elsewhere a skip."""
    try:
        path = find_or_install_chromium()
    except BrowserUnavailable as e:
        unavailable("browser (Chromium) for the HTML report tests", str(e))
    yield Browser(path)


LOAD_PROBE = ("<script>addEventListener('load', () => { void document.body.offsetHeight; "
              "document.documentElement.dataset.loadedMs = performance.now().toFixed(0); });</script>")
"""Appended to a copy of a page: when the page has loaded and been laid out, the time since navigation began."""


def loaded_ms(page: Path, browser: Browser, scratch: Path) -> tuple[Rendered, float]:
    """Render a copy of `page` with LOAD_PROBE added: the DOM and the milliseconds to a loaded, laid-out page."""
    probed = scratch / f"probed-{page.name}"
    probed.write_text(page.read_text(encoding="utf-8") + LOAD_PROBE, encoding="utf-8")
    rendered = browser.dump_dom(probed)
    root = parse_dom(rendered.dom).first(lambda e: e.tag == "html")
    if root is None or "data-loaded-ms" not in root.attrs:
        raise AssertionError(f"the load probe did not run in {page}")
    return rendered, float(root.attrs["data-loaded-ms"] or "nan")


VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track",
                  "wbr"})


@dataclass
class Element:
    """An element of a rendered DOM: tag, attributes, children (elements and text)."""

    tag: str
    attrs: dict[str, str | None]
    children: list[Element | str]

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        """The element's text, its descendants' included."""
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            if isinstance(child, Element):
                yield from child.walk()

    def all(self, match: Callable[[Element], bool]) -> list[Element]:
        return [e for e in self.walk() if match(e)]

    def first(self, match: Callable[[Element], bool]) -> Element | None:
        return next((e for e in self.walk() if match(e)), None)

    def by_id(self, ident: str) -> Element:
        found = self.first(lambda e: e.attrs.get("id") == ident)
        if found is None:
            raise AssertionError(f"no element with id {ident!r} in the page")
        return found

    def with_class(self, name: str, tag: str | None = None) -> list[Element]:
        return self.all(lambda e: name in e.classes and (tag is None or e.tag == tag))


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {}, [])
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, dict(attrs), [])
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, dict(attrs), []))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse_dom(dom: str) -> Element:
    """The tree of a DOM as Chromium serialized it (every element closed but the void ones)."""
    builder = _TreeBuilder()
    builder.feed(dom)
    builder.close()
    return builder.root
