"""The live view's HTTP server: the routes over a `LiveView`, and the process that folds and serves side by side.

Until the fold has reached the end offsets seen at start, every view but `/metrics` answers 503 with the lag in its
JSON body: a partial fold is never served as an answer. Caught up, the views answer 200; `/health` keeps reporting
the lag of the current read (the events between the fold and the end offsets of the log at the last poll).
"""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from events.errors import ConfigError
from events.log import open_log
from projections.state import State
from replay.live.documents import ViewError, dataset_doc, page, run_doc, sequence_doc
from replay.live.metrics import METRICS_TYPE, metrics_text
from replay.live.settings import LiveSettings
from replay.live.view import LiveView, Phase

logger = logging.getLogger(__name__)

JOIN_S = 15.0
"""How long a stopping server waits for the fold thread (it saves its last snapshot meanwhile)."""


@dataclass(frozen=True)
class Answer:
    """An HTTP answer: status, body and its content type, extra headers."""

    status: HTTPStatus
    body: bytes
    content_type: str = "application/json"
    headers: tuple[tuple[str, str], ...] = ()


def json_answer(status: HTTPStatus, document: Mapping[str, Any], *headers: tuple[str, str]) -> Answer:
    """A JSON answer."""
    return Answer(status, json.dumps(document).encode(), "application/json", headers)


ENDPOINTS = ("/health", "/metrics", "/datasets", "/datasets/{urn}", "/runs", "/runs/{run_id}", "/commits/pending")


def answer(view: LiveView, path: str, query: Mapping[str, str]) -> Answer:
    """What a GET of path?query answers (lock held); errors as JSON with the lag while not current."""
    try:
        return _route(view, path, query)
    except ViewError as e:
        body: dict[str, Any] = {"error": str(e)}
        if e.status is HTTPStatus.SERVICE_UNAVAILABLE:
            body |= {"status": view.phase.value, "lag": view.lag()}
            return json_answer(e.status, body, ("Retry-After", "1"))
        return json_answer(e.status, body)


def _route(view: LiveView, path: str, query: Mapping[str, str]) -> Answer:
    """Dispatch a path to its view."""
    if path == "/metrics":
        return Answer(HTTPStatus.OK, metrics_text(view).encode(), METRICS_TYPE)
    if path in ("/", "/health"):
        document = view.health() if path == "/health" else {"status": view.phase.value, "lag": view.lag(),
                                                            "endpoints": list(ENDPOINTS)}
        ok = view.phase is Phase.OK
        return json_answer(HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE, document,
                           *(() if ok else (("Retry-After", "1"),)))
    view.require_current()
    state, job = view.state, query.get("job")
    if path == "/datasets":
        found = {(urn, j): v for (j, urn), v in state.datasets.items() if job is None or j == job}
        return json_answer(HTTPStatus.OK, page(found, query, "datasets", dataset_doc))
    if path.startswith("/datasets/"):
        urn = path.removeprefix("/datasets/")
        docs = [dataset_doc(v) for (j, u), v in sorted(state.datasets.items()) if u == urn and job in (None, j)]
        if not docs:
            raise ViewError(HTTPStatus.NOT_FOUND, f"no dataset {urn!r}" + (f" of job {job!r}" if job else ""))
        return json_answer(HTTPStatus.OK, {"datasets": docs})
    if path == "/runs":
        runs = {key: v for key, v in state.runs.items() if job is None or key[0] == job}
        return json_answer(HTTPStatus.OK, page(runs, query, "runs", lambda v: run_doc(state, v)))
    if path.startswith("/runs/"):
        return _run(state, path.removeprefix("/runs/"), job)
    if path == "/commits/pending":
        return json_answer(HTTPStatus.OK, {"pending": [sequence_doc(s) for s in state.pending_sequences(job)]})
    raise ViewError(HTTPStatus.NOT_FOUND, f"no view {path!r}; the views are {', '.join(ENDPOINTS)}")


def _run(state: State, run_id: str, job: str | None) -> Answer:
    """One run by id (of the job asked, or of the only job that has a run with this id)."""
    found = [v for (j, r), v in state.runs.items() if r == run_id and job in (None, j)]
    if not found:
        raise ViewError(HTTPStatus.NOT_FOUND, f"no run {run_id!r}" + (f" of job {job!r}" if job else ""))
    if len(found) > 1:
        jobs = sorted(v.job for v in found)
        return json_answer(HTTPStatus.CONFLICT, {"error": f"several jobs have a run {run_id!r}: ask with ?job=",
                                                 "jobs": jobs})
    return json_answer(HTTPStatus.OK, run_doc(state, found[0]))


def make_server(view: LiveView, host: str, port: int) -> ThreadingHTTPServer:
    """The HTTP server of a view: each GET is answered from the view's state under its lock."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            parts = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            with view.lock:
                reply = answer(view, unquote(parts.path.rstrip("/") or "/"), query)
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            for name, value in reply.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(reply.body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (http.server's signature)
            logger.debug("%s " + format, self.address_string(), *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    return server


def open_view(settings: LiveSettings) -> tuple[LiveView, ThreadingHTTPServer]:
    """The view of the settings' log and its HTTP server (bound, not yet serving); ConfigError if it cannot bind."""
    log = open_log(settings.log_url)
    try:
        log.ensure_topic()
        view = LiveView(log, settings)
        return view, make_server(view, settings.host, settings.port)
    except OSError as e:
        log.close()
        raise ConfigError(f"--host {settings.host} --port {settings.port}: cannot listen there: {e}") from e
    except BaseException:
        log.close()
        raise


def serve(view: LiveView, server: ThreadingHTTPServer) -> int:
    """Fold in a thread and answer HTTP until SIGTERM/SIGINT or a fold failure; returns the exit code (0, or 1)."""
    stop = threading.Event()
    folder = threading.Thread(target=view.run, args=(stop,), name="oncelog-live-fold", daemon=True)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        logger.info("stopping on signal %d", signum)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}

    def shut_down_when_stopped() -> None:
        stop.wait()
        server.shutdown()

    watcher = threading.Thread(target=shut_down_when_stopped, name="oncelog-live-stop", daemon=True)
    logger.info("serving %s on http://%s:%d", ", ".join(ENDPOINTS), *server.server_address[:2])
    folder.start()
    watcher.start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        server.server_close()
        folder.join(JOIN_S)
        view.log.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 1 if view.phase is Phase.FAILED else 0

