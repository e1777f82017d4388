"""Settings of a `kafka://` log: oncelog's own, and librdkafka's passed through to every client.

Security (`security.protocol`, `sasl.*`, `ssl.*`) is configured once, in the log URL or the job file's
`oncelog.log.*` keys, and every client of the log gets it. Secrets (`sasl.password`, `ssl.key.password`, …) are
shown only through `redact_url` / `redact_settings`. librdkafka's own log lines and errors go through a
`ClientMonitor`: to Python logging, rate-limited, with an outage said once in our words and a refused credential
or certificate raised as `KafkaSecurityError` naming the listener and the setting to check.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from confluent_kafka import Consumer, KafkaError, KafkaException

from events.errors import ConfigError, KafkaSecurityError, LogUnavailableError
from events.log.interface import DEFAULT_TOPIC, int_setting

DEFAULT_PARTITIONS = 6
DEFAULT_READ_TIMEOUT_S = 30
"""How long a read may wait for the cluster (an answer, or progress) before failing, naming the brokers."""
DEFAULT_WRITE_TIMEOUT_S = 120
CLIENT_PREFIXES = ("producer.", "consumer.", "admin.")
CLIENT_DEFAULTS: dict[str, Any] = {"reconnect.backoff.ms": 20, "enable.sparse.connections": False}
"""librdkafka settings of ours, under the URL's: a new client moves from its bootstrap connection to the broker it
learned of only after half of reconnect.backoff.ms (100 ms by librdkafka's default), which was half of every short
command's time; reconnecting still backs off exponentially, up to reconnect.backoff.max.ms (10 s). Without sparse
connections a client connects to every broker as soon as it learns of it, not when a request first needs it: a new
client's first answer 16 → 6 ms on a local broker, a transactional writer's start 26 → 11 ms (for one connection per
broker per client, and a line when one is down)."""
TRANSIENT_CODES = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.BROKER_NOT_AVAILABLE,
        KafkaError.NOT_ENOUGH_REPLICAS,
        KafkaError._TRANSPORT,
        KafkaError._ALL_BROKERS_DOWN,
        KafkaError._TIMED_OUT,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._DESTROY_BROKER,
    }
)
"""Errors that pass once leadership or metadata settles (a topic just created, a leader moving): librdkafka does
not flag them retriable when a metadata call (end offsets, say) returns them, so they are named here. A query in
flight to a leader that died and left the cluster's metadata fails with _DESTROY_BROKER (its handle is dropped)."""

REDACTED = "***"
SECRET_HINTS = ("password", "secret", "token", "jaas", "credential", "private", "ssl.key.pem", "oauthbearer.config",
                "access.key")
"""A setting whose lower-cased name contains one of these holds a secret: its value is never shown."""
AUTHENTICATION_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
TLS_CODES = frozenset({KafkaError._SSL})
_CUT_SHORT = re.compile(r"handshake failed: Local: (?:Broker transport failure|Timed out)")
"""An authentication error whose handshake the connection broke off (librdkafka: "SASL PLAIN mechanism handshake
failed: Local: Broker transport failure: broker's supported mechanisms: (n/a)"): no credential was refused, and
librdkafka retries it as any dropped connection."""
OUTAGE_CODES = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE})
LOG_EVERY_S = 30.0
"""A librdkafka log line that repeats (modulo timings and counts) is shown once per this many seconds."""
_HANDLED = re.compile(r"fenced by a newer instance|operation with an old epoch|PRODUCER_FENCED|INVALID_PRODUCER_EPOCH"
                      r"|_FENCED|another concurrent operation on the same transaction"
                      r"|Coordinator load in progress: retrying")
"""librdkafka's own lines about a producer fenced by a newer one (TXNERR, FATAL, ADDPARTS): the writer raises
FencedError, which says it in one line of ours; the fencing writer's (GETPID) while the broker still aborts the
fenced one's open transaction, which librdkafka retries; and a writer's first on a new cluster (GETPID), whose
transaction coordinator is still loading, also retried. Theirs go to the debug log only."""
_NOISE = re.compile(r"\s*\(after \d+ms[^)]*\)|\s*\(\d+ identical error\(s\) suppressed\)|\d+ms")
_LISTENER = re.compile(r"(?:(?P<protocol>[a-z_]+)://)?(?P<host>[^\s/,]+:\d+)/")
_QUERY_PAIR = re.compile(r"(?P<lead>[?&])(?P<key>[^=&#]+)=(?P<value>[^&#]*)")
_USERINFO = re.compile(r"(?P<lead>//[^:/@?#]*):[^@/?#]*@")

Client = TypeVar("Client")


def is_transient(error: KafkaError) -> bool:
    """Whether a Kafka error may pass if the same call is made again (after a pause)."""
    return not error.fatal() and (error.retriable() or error.code() in TRANSIENT_CODES)


def refresh_leaders(consumer: Consumer, topic: str, timeout_s: float) -> None:
    """Ask the cluster again who leads each partition of `topic`, so the consumer's next offset query goes there.

    Offset queries (get_watermark_offsets, offsets_for_times) route by the consumer's cached metadata, and nothing
    refreshes it while a dead leader still has a broker handle: without this they ask the dead broker until the read
    timeout, although another replica took over seconds ago. Best effort: when no broker answers (an outage), the
    caller's next query fails again and its own deadline decides.
    """
    try:
        consumer.list_topics(topic, timeout=timeout_s)  # a consumer never auto-creates (allow.auto.create.topics)
    except KafkaException:
        pass  # the caller's next query reports the cause, or succeeds once the cluster answers


def is_secret(name: str) -> bool:
    """Whether a setting (librdkafka's, a job file key) holds a secret whose value must never be shown."""
    lowered = name.lower()
    return any(hint in lowered for hint in SECRET_HINTS)


def redact_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with every secret's value replaced by ***, to show or record them."""
    return {k: (REDACTED if is_secret(k) else v) for k, v in settings.items()}


def redact_url(url: str) -> str:
    """The URL with the values of secret query settings (and a user-info password) replaced by ***.

    Works on the text, not on a parse, so a malformed URL (the one an error is about) is redacted too.
    """

    def pair(match: re.Match[str]) -> str:
        secret = is_secret(unquote(match["key"]))
        return f"{match['lead']}{match['key']}={REDACTED if secret else match['value']}"

    return _USERINFO.sub(lambda m: f"{m['lead']}:{REDACTED}@", _QUERY_PAIR.sub(pair, url))


def redact_message(text: str, url: str) -> str:
    """A message about a log URL, fit to show: the URL redacted, and any secret value it holds scrubbed."""
    try:
        settings = dict(parse_qsl(urlsplit(url).query, keep_blank_values=True))
    except ValueError:  # a URL too malformed to split: its text is still redacted
        settings = {}
    return scrub(text.replace(url, redact_url(url)), settings)


def is_security_setting(name: str) -> bool:
    """Whether a librdkafka setting is about authentication or encryption (every client of a cluster needs it)."""
    return name == "security.protocol" or name.startswith(("sasl.", "ssl."))


@dataclass(frozen=True)
class KafkaSettings:
    """Where the log is and how to reach it.

    `client` settings go to every client (SASL/SSL belong here); `producer.X` / `consumer.X` / `admin.X` to one kind.
    """

    url: str
    bootstrap: str
    topic: str = DEFAULT_TOPIC
    partitions: int | None = None
    replication: int | None = None
    write_timeout_s: float = float(DEFAULT_WRITE_TIMEOUT_S)
    read_timeout_s: float = float(DEFAULT_READ_TIMEOUT_S)
    client: dict[str, str] = field(default_factory=dict, repr=False)

    @classmethod
    def from_url(cls, url: str, bootstrap: str, settings: dict[str, str]) -> KafkaSettings:
        """Split URL settings into oncelog's and librdkafka's; nonsense values are errors naming the setting."""
        shown = redact_url(url)
        settings = dict(settings)
        topic = settings.pop("topic", DEFAULT_TOPIC)
        if not topic:
            raise ConfigError(f"log URL {shown!r}: setting 'topic' is empty")
        partitions = int_setting(settings, "partitions", shown, None)
        replication = int_setting(settings, "replication", shown, None)
        write_timeout = int_setting(settings, "write_timeout_s", shown, DEFAULT_WRITE_TIMEOUT_S)
        read_timeout = int_setting(settings, "read_timeout_s", shown, DEFAULT_READ_TIMEOUT_S)
        return cls(
            url=url,
            bootstrap=bootstrap,
            topic=topic,
            partitions=partitions,
            replication=replication,
            write_timeout_s=float(write_timeout or DEFAULT_WRITE_TIMEOUT_S),
            read_timeout_s=float(read_timeout or DEFAULT_READ_TIMEOUT_S),
            client=settings,
        )

    @property
    def shown_url(self) -> str:
        """The log URL as it may be shown: secrets redacted."""
        return redact_url(self.url)

    @property
    def security(self) -> dict[str, str]:
        """The security settings every client gets (security.protocol, sasl.*, ssl.*), secrets included."""
        return {k: v for k, v in self.client.items() if is_security_setting(k)}

    def config_for(self, kind: str, overrides: Mapping[str, Any], monitor: ClientMonitor) -> dict[str, Any]:
        """librdkafka configuration for a client of `kind` (producer, consumer, admin), watched by `monitor`."""
        config: dict[str, Any] = {**CLIENT_DEFAULTS, "bootstrap.servers": self.bootstrap, "logger": monitor,
                                  "error_cb": monitor.on_error}
        for key, value in self.client.items():
            prefix = next((p for p in CLIENT_PREFIXES if key.startswith(p)), None)
            if prefix is None:
                config[key] = value
            elif prefix == f"{kind}.":
                config[key.removeprefix(prefix)] = value
        config.update(overrides)
        return config

    def monitor(self) -> ClientMonitor:
        """A new monitor for the clients of one log (shares their rate limit and outage notice)."""
        return ClientMonitor(self.bootstrap, self.security, self.timeouts())

    def timeouts(self) -> dict[str, float]:
        """The retry limits an outage notice names, by setting."""
        return {"read_timeout_s": self.read_timeout_s, "write_timeout_s": self.write_timeout_s}

    def make(
        self,
        kind: str,
        factory: Callable[[dict[str, Any]], Client],
        overrides: Mapping[str, Any],
        monitor: ClientMonitor | None = None,
    ) -> Client:
        """Create a client; a setting librdkafka rejects becomes a ConfigError naming it (never its secret value)."""
        try:
            return factory(self.config_for(kind, overrides, monitor or self.monitor()))
        except KafkaException as e:
            error = e.args[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError._INVALID_ARG:
                raise ConfigError(
                    f"log URL {self.shown_url!r}: librdkafka rejected a setting: {self.scrub(error.str())}"
                ) from e
            raise LogUnavailableError(f"cannot create a Kafka {kind} for {self.bootstrap}: {self.scrub(str(e))}") from e
        except (ValueError, TypeError) as e:
            raise ConfigError(f"log URL {self.shown_url!r}: invalid Kafka {kind} setting: {self.scrub(str(e))}") from e

    def scrub(self, text: str) -> str:
        """Text (a library's message) with the value of every secret setting replaced by ***."""
        return scrub(text, self.client)


def scrub(text: str, settings: Mapping[str, Any]) -> str:
    """Text with the values of the secret settings among `settings` replaced by ***."""
    for key, value in settings.items():
        if is_secret(key) and isinstance(value, str) and value:
            text = text.replace(value, REDACTED)
    return text


def listener_of(error: KafkaError, bootstrap: str, security: Mapping[str, str]) -> str:
    """The listener an error is about, as PROTOCOL://host:port: from librdkafka's message, else the bootstrap list."""
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    found = _LISTENER.search(error.str())
    if found is None:
        return f"{protocol}://{bootstrap}"
    return f"{(found['protocol'] or protocol).upper()}://{found['host']}"


def security_failure(error: KafkaError, bootstrap: str, security: Mapping[str, str]) -> KafkaSecurityError | None:
    """Our error for a refused credential or certificate, naming the listener and the setting to check; None for
    any other error."""
    code = error.code()
    listener = listener_of(error, bootstrap, security)
    detail = scrub(error.str(), security)
    if code in AUTHENTICATION_CODES and _CUT_SHORT.search(detail):
        return None
    if code in AUTHENTICATION_CODES:
        user = security.get("sasl.username")
        who = f"sasl.username={user}" if user else "the configured credentials (sasl.username not set)"
        mechanism = security.get("sasl.mechanism", security.get("sasl.mechanisms", "GSSAPI (librdkafka's default)"))
        return KafkaSecurityError(
            f"authentication failed for {who} on {listener}: check sasl.password (and sasl.mechanism={mechanism}) "
            f"[{detail}]"
        )
    if code not in TLS_CODES:
        return None
    host = listener.split("://", 1)[-1]
    lowered = detail.lower()
    if "hostname" in lowered or "host name" in lowered or "subject" in lowered:
        algorithm = security.get("ssl.endpoint.identification.algorithm", "https (the default)")
        return KafkaSecurityError(
            f"certificate of {host} does not name that host: check the broker's certificate or "
            f"ssl.endpoint.identification.algorithm={algorithm} [{detail}]"
        )
    if "verify" in lowered or "trusted" in lowered or "certificate" in lowered:
        ca = security.get("ssl.ca.location", "(not set: the system's CAs)")
        return KafkaSecurityError(f"certificate of {host} not trusted: check ssl.ca.location={ca} [{detail}]")
    return KafkaSecurityError(
        f"TLS with {listener} failed: check security.protocol={security.get('security.protocol', 'PLAINTEXT')} and "
        f"the ssl.* settings [{detail}]"
    )


class ClientMonitor:
    """Watches the librdkafka clients of one log (or source): their log lines and their errors.

    Given to librdkafka as `logger` (it calls `log`) and `error_cb`. Log lines go to Python logging
    (`oncelog.kafka.<client kind>`), each distinct line (timings and counts aside) at most once per `every_s`. An
    outage (every broker down, a name that does not resolve) is said once, in our words: what is unreachable, that
    we retry, and until when; a refused credential or certificate is kept (`failure`) for the caller to raise, since
    librdkafka itself would retry it forever.
    """

    def __init__(
        self,
        bootstrap: str,
        security: Mapping[str, str],
        timeouts: Mapping[str, float],
        every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap = bootstrap
        self._security = dict(security)
        self._timeouts = dict(timeouts)
        self._every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last_shown: dict[tuple[str, str], float] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        self._outage: str | None = None
        self.last_problem: str | None = None
        """librdkafka's latest connection error (secrets scrubbed), to name in a timeout."""
        self.failure: KafkaSecurityError | None = None
        self._notice = logging.getLogger("oncelog.kafka")

    def log(self, level: int, message: str, *args: Any) -> None:
        """librdkafka's `logger` hook: (level, "%s [%s] %s", facility, client, text)."""
        facility, client, text = (str(a) for a in (*args, "", "", "")[:3]) if args else ("", "", message)
        key = (facility, _NOISE.sub("", text))
        now = self._clock()
        with self._lock:
            last = self._last_shown.get(key)
            if last is not None and now - last < self._every_s:
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return
            self._last_shown[key] = now
            hidden = self._suppressed.pop(key, 0)
        if _HANDLED.search(text):
            level = min(level, logging.DEBUG)
        kind = client.split("#", 1)[-1].split("-", 1)[0] if "#" in client else "client"
        more = f" ({hidden} more like it in the last {self._every_s:.0f}s)" if hidden else ""
        logging.getLogger(f"oncelog.kafka.{kind}").log(level, "%s [%s] %s%s", facility, client,
                                                      scrub(text, self._security), more)

    def on_error(self, error: KafkaError) -> None:
        """librdkafka's `error_cb`: keep a security failure, announce an outage once, remember the latest problem."""
        failure = security_failure(error, self.bootstrap, self._security)
        if failure is not None:
            self.failure = failure  # raised by the caller's check(), which says it: no log line of its own
            return
        if self.failure is not None:
            return  # brokers "down" because they refused us: not an outage
        detail = scrub(error.str(), self._security)
        if error.code() in (KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._ALL_BROKERS_DOWN):
            if error.code() != KafkaError._ALL_BROKERS_DOWN or self.last_problem is None:
                self.last_problem = detail
        if error.code() in OUTAGE_CODES:
            self._announce(self.last_problem or detail)

    def _announce(self, detail: str) -> None:
        """Say once per outage what is unreachable, that we retry, and until when."""
        with self._lock:
            if self._outage is not None:
                return
            self._outage = detail
        now = datetime.now().astimezone()
        until = ", ".join(
            f"{'reads' if name.startswith('read') else 'writes'} until {(now + timedelta(seconds=s)):%H:%M:%S} "
            f"({name}={s:.0f})"
            for name, s in self._timeouts.items()
        )
        self._notice.warning("Kafka at %s is unreachable (%s); retrying: %s", self.bootstrap, detail, until)

    def reachable(self) -> None:
        """The cluster answered: end the outage (said once), so the next one is announced again."""
        if self._outage is None:
            return
        with self._lock:
            was, self._outage = self._outage, None
        if was is not None:
            self._notice.warning("Kafka at %s answers again", self.bootstrap)

    def check(self) -> None:
        """Raise the security failure librdkafka reported, if any (it would retry it forever)."""
        if self.failure is not None:
            raise self.failure

    def unreachable(self, doing: str, waited_s: float, setting: str, cause: str) -> LogUnavailableError:
        """The error of a call that got no answer in time: names the brokers, what we did, the setting, the cause."""
        problem = self.last_problem or scrub(cause, self._security)
        return LogUnavailableError(
            f"Kafka at {self.bootstrap} did not answer within {waited_s:.0f}s (setting {setting}) while {doing}: "
            f"{problem}. Check that the brokers are up and reachable, and the listener's security.protocol"
        )

