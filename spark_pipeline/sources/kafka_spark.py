"""Options of Spark's Kafka reader (`spark-sql-kafka-0-10`) from the same security settings as every other client.

oncelog configures Kafka security once, with librdkafka's names (docs/kafka-security.md). Spark's reader runs the
Java client, whose settings differ: :func:`spark_kafka_options` translates the security settings into its `kafka.`
options, and :func:`job_kafka_options` picks them for a job's Kafka source by the record engine's precedence
(:meth:`KafkaSourceSettings.security`). A setting it cannot translate is a ConfigError naming it, never dropped.

Secrets: the password travels in `kafka.sasl.jaas.config` and a client key's PEM text in `kafka.ssl.keystore.key`.
Spark shows data source options in plans (EXPLAIN, the SQL tab) after redacting those whose key or value matches
`spark.sql.redaction.options.regex` or `spark.redaction.regex`; neither default matches a PEM key, so a session that
reads Kafka gets :func:`redaction_conf`. A refused credential or certificate surfaces as a Java exception in the
Python error's text; :func:`spark_kafka_failure` maps it to KafkaSecurityError naming the listener and the setting.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path

from events.errors import ConfigError, KafkaSecurityError
from events.log.kafka.config import scrub

PREFIX = "kafka."
"""Spark passes an option `kafka.X` to the Java client as its setting X."""
OPTIONS_REDACTION = "spark.sql.redaction.options.regex"
DEFAULT_OPTIONS_REDACTION = "(?i)url"
"""Spark's default for OPTIONS_REDACTION."""
SECRET_OPTIONS = r"(?i:sasl[.]jaas[.]config|ssl[.]keystore[.]key)"
"""The reader's options holding a secret that Spark's default patterns miss (a PEM key's text matches none)."""
PKCS8_HEADERS = ("-----BEGIN PRIVATE KEY-----", "-----BEGIN ENCRYPTED PRIVATE KEY-----")
CERTIFICATE_HEADER = "-----BEGIN CERTIFICATE-----"
PBES2_OID = bytes.fromhex("06092a864886f70d01050d")
"""DER of PBES2's object identifier (1.2.840.113549.1.5.13), how an encrypted PKCS#8 key names its scheme."""


class SecurityProtocol(StrEnum):
    """Kafka's security protocols (the same names in librdkafka and the Java client)."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def sasl(self) -> bool:
        """Whether the protocol authenticates with SASL."""
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @property
    def tls(self) -> bool:
        """Whether the protocol encrypts with TLS."""
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)


class SaslLogin(StrEnum):
    """The SASL mechanisms the reader supports, with the Java login module that each needs in its JAAS config."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def login_module(self) -> str:
        """The JAAS login module of the mechanism."""
        if self is SaslLogin.PLAIN:
            return "org.apache.kafka.common.security.plain.PlainLoginModule"
        return "org.apache.kafka.common.security.scram.ScramLoginModule"


TRANSLATED = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
                        "ssl.ca.location", "ssl.endpoint.identification.algorithm", "ssl.certificate.location",
                        "ssl.key.location", "ssl.key.password"})
"""The librdkafka settings spark_kafka_options translates; any other is refused."""


def spark_kafka_options(bootstrap: str, security: Mapping[str, str]) -> dict[str, str]:
    """Spark Kafka reader options (`kafka.`-prefixed Java client settings) for brokers and librdkafka security
    settings; reads only the PEM files of a client certificate (mTLS), which the Java client wants as text."""
    if not bootstrap.strip():
        raise ConfigError("the Kafka bootstrap servers are empty: give host:port[,host:port…]")
    unknown = sorted(set(security) - TRANSLATED)
    if unknown:
        raise ConfigError(f"Kafka setting(s) {', '.join(unknown)} cannot be given to Spark's Kafka reader (it "
                          f"translates only {', '.join(sorted(TRANSLATED))})")
    protocol = _protocol(security)
    _refuse_unused(security, protocol)
    options = {f"{PREFIX}bootstrap.servers": bootstrap, f"{PREFIX}security.protocol": protocol.value}
    if protocol.sasl:
        options |= _sasl_options(security, protocol)
    if protocol.tls:
        options |= _tls_options(security)
    return options


def _protocol(security: Mapping[str, str]) -> SecurityProtocol:
    """security.protocol, PLAINTEXT when unset (librdkafka's default)."""
    value = security.get("security.protocol", SecurityProtocol.PLAINTEXT.value)
    try:
        return SecurityProtocol(value.upper())
    except ValueError as e:
        raise ConfigError(f"security.protocol={value!r} is not one of "
                          f"{', '.join(p.value for p in SecurityProtocol)}") from e


def _refuse_unused(security: Mapping[str, str], protocol: SecurityProtocol) -> None:
    """A sasl.* or ssl.* setting the protocol would not use is a mistake to name, not to drop."""
    unused = sorted(k for k in security if (k.startswith("sasl.") and not protocol.sasl)
                    or (k.startswith("ssl.") and not protocol.tls))
    if unused:
        raise ConfigError(f"{', '.join(unused)} set, but security.protocol={protocol.value} does not use "
                          f"{'them' if len(unused) > 1 else 'it'}: set security.protocol to a protocol that does "
                          f"(SASL_SSL, SASL_PLAINTEXT, SSL) or remove the setting")


def _sasl_options(security: Mapping[str, str], protocol: SecurityProtocol) -> dict[str, str]:
    """kafka.sasl.mechanism and kafka.sasl.jaas.config (the user's name and password, quoted for Kafka's parser)."""
    named = {security[k].strip().upper() for k in ("sasl.mechanism", "sasl.mechanisms") if k in security}
    if len(named) > 1:
        raise ConfigError(f"sasl.mechanism and sasl.mechanisms disagree ({', '.join(sorted(named))}): set one")
    if not named:
        raise ConfigError(f"security.protocol={protocol.value} needs sasl.mechanism (one of "
                          f"{', '.join(m.value for m in SaslLogin)}); librdkafka's default GSSAPI is not supported "
                          f"for Spark's Kafka reader")
    (name,) = named
    try:
        mechanism = SaslLogin(name)
    except ValueError as e:
        raise ConfigError(f"sasl.mechanism={name} is not supported for Spark's Kafka reader (supported: "
                          f"{', '.join(m.value for m in SaslLogin)})") from e
    missing = [k for k in ("sasl.username", "sasl.password") if not security.get(k)]
    if missing:
        raise ConfigError(f"sasl.mechanism={mechanism.value} needs {' and '.join(missing)}")
    jaas = (f"{mechanism.login_module} required username={jaas_quote(security['sasl.username'])} "
            f"password={jaas_quote(security['sasl.password'])};")
    return {f"{PREFIX}sasl.mechanism": mechanism.value, f"{PREFIX}sasl.jaas.config": jaas}


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes, escaped so that Kafka's parser (java.io.StreamTokenizer) reads back
    exactly `value`: it ends a quoted string at a quote or a line break and unescapes backslashes."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def _tls_options(security: Mapping[str, str]) -> dict[str, str]:
    """Truststore (a CA PEM file), host name check, and the client certificate as a PEM keystore (mTLS)."""
    options: dict[str, str] = {}
    if "ssl.ca.location" in security:
        ca = security["ssl.ca.location"]
        if not Path(ca).is_file():
            raise ConfigError(f"ssl.ca.location={ca}: not a file (Spark's Kafka reader needs one PEM file of CA "
                              f"certificates, not a folder or 'probe')")
        options |= {f"{PREFIX}ssl.truststore.type": "PEM", f"{PREFIX}ssl.truststore.location": ca}
    if "ssl.endpoint.identification.algorithm" in security:
        algorithm = security["ssl.endpoint.identification.algorithm"].strip().lower()
        if algorithm not in ("https", "none"):
            raise ConfigError(f"ssl.endpoint.identification.algorithm={algorithm!r} is not 'https' or 'none'")
        options[f"{PREFIX}ssl.endpoint.identification.algorithm"] = "" if algorithm == "none" else algorithm
    return options | _keystore_options(security)


def _keystore_options(security: Mapping[str, str]) -> dict[str, str]:
    """A client certificate and key as the Java client's PEM keystore, by content (it takes no separate files)."""
    given = [k for k in ("ssl.certificate.location", "ssl.key.location") if k in security]
    if not given:
        if "ssl.key.password" in security:
            raise ConfigError("ssl.key.password set without ssl.key.location: there is no client key to decrypt")
        return {}
    if len(given) == 1:
        missing = "ssl.key.location" if given == ["ssl.certificate.location"] else "ssl.certificate.location"
        raise ConfigError(f"{given[0]} set without {missing}: a client certificate needs both")
    chain = _pem_text(security, "ssl.certificate.location")
    if CERTIFICATE_HEADER not in chain:
        raise ConfigError(f"ssl.certificate.location={security['ssl.certificate.location']}: no PEM certificate "
                          f"({CERTIFICATE_HEADER}) in the file")
    key = _pem_text(security, "ssl.key.location")
    header = next((h for h in PKCS8_HEADERS if h in key), None)
    if header is None:
        raise ConfigError(f"ssl.key.location={security['ssl.key.location']}: the Java client's PEM keystore reads "
                          f"PKCS#8 keys only ({' or '.join(PKCS8_HEADERS)}): convert it with `openssl pkcs8 -topk8 "
                          f"-in KEY -out KEY.pk8` (add -nocrypt to leave it unencrypted)")
    encrypted = header == PKCS8_HEADERS[1]
    if encrypted and PBES2_OID in _pem_der(key)[:32]:
        raise ConfigError(f"ssl.key.location={security['ssl.key.location']}: the key is encrypted with PBES2 "
                          f"(OpenSSL 3's default), which Kafka's PEM keystore cannot decrypt on Java 17 "
                          f"(NoSuchAlgorithmException): re-encrypt it with `openssl pkcs8 -topk8 -v1 PBE-SHA1-3DES "
                          f"-in KEY -out KEY.pk8`")
    if encrypted != ("ssl.key.password" in security):
        fix = "encrypted: set ssl.key.password" if encrypted else "not encrypted: remove ssl.key.password"
        raise ConfigError(f"ssl.key.location={security['ssl.key.location']}: the key is {fix}")
    options = {f"{PREFIX}ssl.keystore.type": "PEM", f"{PREFIX}ssl.keystore.certificate.chain": chain,
               f"{PREFIX}ssl.keystore.key": key}
    if encrypted:
        options[f"{PREFIX}ssl.key.password"] = security["ssl.key.password"]
    return options


def _pem_der(text: str) -> bytes:
    """The DER bytes of the first PEM block in `text` ("…-----BEGIN X-----<base64>-----END X-----"), else empty."""
    parts = text.split("-----")
    try:
        return base64.b64decode("".join(parts[2].split()), validate=True) if len(parts) > 2 else b""
    except binascii.Error:
        return b""


def _pem_text(security: Mapping[str, str], setting: str) -> str:
    """The text of the PEM file a setting names; a file that cannot be read is a ConfigError naming the setting."""
    path = security[setting]
    try:
        return Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{setting}={path}: cannot read the PEM file: {e}") from e


def redaction_conf(spark_conf: Mapping[str, str]) -> dict[str, str]:
    """The session setting that hides the reader's secret options in plans and Spark's UI, added to the pattern the
    job's `spark.*` keys set (or Spark's default)."""
    current = spark_conf.get(OPTIONS_REDACTION, DEFAULT_OPTIONS_REDACTION)
    return {OPTIONS_REDACTION: f"{current}|{SECRET_OPTIONS}" if current else SECRET_OPTIONS}


_AUTHENTICATION = ("SaslAuthenticationException", "Authentication failed")
_UNTRUSTED = ("PKIX path building failed", "unable to find valid certification path")
_HOSTNAME = ("No subject alternative", "No name matching")
_JAVA_CLASS = re.compile(r"(?:[A-Za-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)")
_TLS = ("SSLHandshakeException", "SslAuthenticationException", "SSL handshake failed")


def spark_kafka_failure(error: BaseException, bootstrap: str,
                        security: Mapping[str, str]) -> KafkaSecurityError | None:
    """Our error for a Spark Kafka read that Kafka refused (credential or certificate), naming the listener and the
    setting to check, secrets scrubbed; None when the error's text shows no such refusal."""
    secrets = {**security, **{f"{k}.quoted": jaas_quote(v)[1:-1] for k, v in security.items()}}
    text = scrub(str(error), secrets)  # the password as typed, and as quoted in the JAAS config
    protocol = security.get("security.protocol", SecurityProtocol.PLAINTEXT.value).upper()
    listener = f"{protocol}://{bootstrap}"
    if any(hint in text for hint in _AUTHENTICATION):
        user = security.get("sasl.username")
        who = f"sasl.username={user}" if user else "the configured credentials (sasl.username not set)"
        mechanism = security.get("sasl.mechanism", security.get("sasl.mechanisms", "(not set)"))
        return KafkaSecurityError(f"authentication failed for {who} on {listener}: check sasl.password (and "
                                  f"sasl.mechanism={mechanism}) [{_java_line(text, _AUTHENTICATION)}]")
    if any(hint in text for hint in _HOSTNAME):
        algorithm = security.get("ssl.endpoint.identification.algorithm", "https (the default)")
        return KafkaSecurityError(f"certificate of {bootstrap} does not name that host: check the broker's "
                                  f"certificate or ssl.endpoint.identification.algorithm={algorithm} "
                                  f"[{_java_line(text, _HOSTNAME)}]")
    if any(hint in text for hint in _UNTRUSTED):
        ca = security.get("ssl.ca.location", "(not set: the JVM's CAs)")
        return KafkaSecurityError(f"certificate of {bootstrap} not trusted: check ssl.ca.location={ca} "
                                  f"[{_java_line(text, _UNTRUSTED)}]")
    if any(hint in text for hint in _TLS):
        return KafkaSecurityError(f"TLS with {listener} failed: check security.protocol={protocol} and the ssl.* "
                                  f"settings [{_java_line(text, _TLS)}]")
    return None


def _java_line(text: str, hints: tuple[str, ...]) -> str:
    """The first line of a Java error's text that holds one of `hints`, from its innermost exception class on
    ("ExecutionException: …SaslAuthenticationException: msg" gives "…SaslAuthenticationException: msg")."""
    line = next(line for line in text.splitlines() if any(hint in line for hint in hints))
    parts = line.split(": ")
    innermost = max((i for i, part in enumerate(parts) if _JAVA_CLASS.fullmatch(part.strip())), default=0)
    found = ": ".join(parts[innermost:]).strip()
    return found if len(found) <= 300 else f"{found[:300]}…"
