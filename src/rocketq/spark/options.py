"""Options of the ``rocketq`` Spark data source, parsed once into frozen dataclasses.

Spark hands a data source its options as a case-insensitive string map; this module turns that
map into :class:`ReadOptions` / :class:`WriteOptions` and rejects bad values with one
:class:`~rocketq.errors.ConfigError` that names every problem. Pure (no pyspark import).

======================  =========  ===========================================================
option                  default    meaning
======================  =========  ===========================================================
nameServer              required   ``host:port`` of the name server(s), ``;``-separated
topic / topicPattern    one of     comma-separated topics, or a regex over the name server's
                                   topic list (read); default topic of rows without one (write)
startingOffsets         earliest   ``earliest`` | ``latest`` | JSON (batch default earliest,
                        / latest   streaming default latest)
endingOffsets           latest     ``latest`` | JSON (batch only)
startingTimestamp       —          epoch ms; start of every queue = first message stored at or
                                   after it (wins over startingOffsets)
subExpression           ``*``      tag filter ``TagA || TagB``
minPartitions           —          split queue ranges so the scan has at least this many tasks
maxOffsetsPerTrigger    —          streaming admission control (offsets per micro-batch)
failOnDataLoss          true       retention removed offsets still needed: fail, or warn + skip
consumerGroup           —          streaming: commit progress as this group's offsets
pushFilters             false      batch: accept filter pushdown (needs the Spark conf
                                   ``spark.sql.python.filterPushdown.enabled=true``)
pullBatchSize           32         messages per pull request
requestTimeoutMs        10000      timeout of one broker / name-server request
writeTimeoutMs          600000     write: staged rows must be committed within this time
sendTimeoutMs           3000       write: timeout of one send
commitRetryMs           60000      write: how long the driver retries the commit on a broker
                                   that fails (e.g. restarts) before naming the rows in doubt
accessKey / secretKey   —          ACL account every request is signed with
tls                     false      connect to the name servers and brokers with TLS
tlsCaPath               —          PEM CA that signed the servers' certificates (default: the
                                   system's CAs); host names are not checked, as in RocketMQ
tlsCertPath/tlsKeyPath  —          PEM client certificate and key, for servers that ask
======================  =========  ===========================================================

File paths are opened where the connections are made: on the driver and on every executor.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from rocketq.errors import ConfigError
from rocketq.remoting.tls import client_context
from rocketq.spark.offsets import OffsetSpec, parse_offset_spec, parse_tag_expression

DEFAULT_PULL_BATCH_SIZE = 32
MAX_PULL_BATCH_SIZE = 1024
DEFAULT_REQUEST_TIMEOUT_MS = 10_000
DEFAULT_WRITE_TIMEOUT_MS = 600_000
DEFAULT_SEND_TIMEOUT_MS = 3_000
DEFAULT_COMMIT_RETRY_MS = 60_000

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


class _Options:
    """Case-insensitive lookup that records problems instead of raising at the first one."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self.values = {str(k).lower(): str(v) for k, v in raw.items() if v is not None}
        self.problems: list[str] = []

    def get(self, name: str) -> str | None:
        value = self.values.get(name.lower())
        return value if value is None or value.strip() else None

    def integer(self, name: str, default: int | None, *, low: int, high: int | None = None) -> int | None:
        text = self.get(name)
        if text is None:
            return default
        try:
            value = int(text.strip())
        except ValueError:
            self.problems.append(f"{name}={text!r} is not an integer")
            return default
        if value < low or (high is not None and value > high):
            bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
            self.problems.append(f"{name}={value} must be {bound}")
            return default
        return value

    def boolean(self, name: str, default: bool) -> bool:
        text = self.get(name)
        if text is None:
            return default
        word = text.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        self.problems.append(f"{name}={text!r} must be true or false")
        return default

    def raise_problems(self, what: str) -> None:
        if self.problems:
            raise ConfigError(f"invalid rocketq {what} options: " + "; ".join(self.problems))


@dataclass(frozen=True, slots=True)
class TlsOptions:
    """TLS to the cluster (option ``tls=true``): the CA and client certificate files."""

    ca_path: str | None = None
    cert_path: str | None = None
    key_path: str | None = None

    def context(self) -> ssl.SSLContext:
        """A client context (ConfigError when a file is missing or not PEM)."""
        return client_context(self.ca_path, cert_path=self.cert_path, key_path=self.key_path)


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Options of a batch or streaming read."""

    name_server: str
    topics: tuple[str, ...]
    topic_pattern: str | None
    starting_offsets: OffsetSpec
    ending_offsets: OffsetSpec
    starting_timestamp_ms: int | None
    tags: frozenset[str] | None
    sub_expression: str
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    consumer_group: str | None
    push_filters: bool
    pull_batch_size: int
    request_timeout_ms: int
    #: ACL account (options ``accessKey``/``secretKey``) every request is signed with.
    keys: tuple[str, str] | None = field(default=None, repr=False)
    #: TLS to the cluster (options ``tls``, ``tlsCaPath``, ``tlsCertPath``, ``tlsKeyPath``).
    tls: TlsOptions | None = None

    def matches_topic(self, topic: str) -> bool:
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics


def _keys(opts: _Options) -> tuple[str, str] | None:
    access_key, secret_key = opts.get("accessKey"), opts.get("secretKey")
    if bool(access_key) != bool(secret_key):
        opts.problems.append("accessKey and secretKey must be given together")
        return None
    return (access_key.strip(), secret_key.strip()) if access_key and secret_key else None


def _tls(opts: _Options) -> TlsOptions | None:
    enabled = opts.boolean("tls", False)
    ca, cert, key = opts.get("tlsCaPath"), opts.get("tlsCertPath"), opts.get("tlsKeyPath")
    if bool(cert) != bool(key):
        opts.problems.append("tlsCertPath and tlsKeyPath must be given together")
    if not enabled:
        if ca or cert or key:
            opts.problems.append("tlsCaPath/tlsCertPath/tlsKeyPath are given but tls is not true")
        return None
    return TlsOptions(
        ca.strip() if ca else None, cert.strip() if cert else None, key.strip() if key else None
    )


def _name_server(opts: _Options) -> str:
    value = opts.get("nameServer") or opts.get("namesrvAddr")
    if value is None:
        opts.problems.append("nameServer is required (host:port of the name server)")
        return ""
    return value.strip()


def parse_read_options(raw: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Parse the options of ``spark.read`` (``streaming=False``) or ``spark.readStream``."""
    opts = _Options(raw)
    name_server = _name_server(opts)
    topic_text = opts.get("topic") or opts.get("topics")
    pattern = opts.get("topicPattern")
    topics: tuple[str, ...] = ()
    if (topic_text is None) == (pattern is None):
        opts.problems.append("give exactly one of topic (comma-separated) and topicPattern (regex)")
    elif topic_text is not None:
        topics = tuple(dict.fromkeys(t.strip() for t in topic_text.split(",") if t.strip()))
        if not topics:
            opts.problems.append(f"topic={topic_text!r} names no topic")
    elif pattern is not None:
        try:
            re.compile(pattern)
        except re.error as exc:
            opts.problems.append(f"topicPattern={pattern!r} is not a regular expression: {exc}")
    starting: OffsetSpec = "latest" if streaming else "earliest"
    ending: OffsetSpec = "latest"
    try:
        text = opts.get("startingOffsets")
        if text is not None:
            starting = parse_offset_spec(text, what="startingOffsets")
    except ConfigError as exc:
        opts.problems.append(str(exc))
    try:
        text = opts.get("endingOffsets")
        if text is not None:
            if streaming:
                opts.problems.append("endingOffsets applies to batch reads only")
            ending = parse_offset_spec(text, what="endingOffsets", allow_earliest=False)
    except ConfigError as exc:
        opts.problems.append(str(exc))
    sub_expression = (opts.get("subExpression") or "*").strip()
    tags: frozenset[str] | None = None
    try:
        tags = parse_tag_expression(sub_expression)
    except ConfigError as exc:
        opts.problems.append(str(exc))
    max_per_trigger = opts.integer("maxOffsetsPerTrigger", None, low=1)
    if max_per_trigger is not None and not streaming:
        opts.problems.append("maxOffsetsPerTrigger applies to streaming reads only")
    options = ReadOptions(
        name_server=name_server,
        topics=topics,
        topic_pattern=pattern,
        starting_offsets=starting,
        ending_offsets=ending,
        starting_timestamp_ms=opts.integer("startingTimestamp", None, low=0),
        tags=tags,
        sub_expression=sub_expression,
        min_partitions=opts.integer("minPartitions", None, low=1),
        max_offsets_per_trigger=max_per_trigger,
        fail_on_data_loss=opts.boolean("failOnDataLoss", True),
        consumer_group=opts.get("consumerGroup"),
        push_filters=opts.boolean("pushFilters", False),
        pull_batch_size=opts.integer(
            "pullBatchSize", DEFAULT_PULL_BATCH_SIZE, low=1, high=MAX_PULL_BATCH_SIZE
        )
        or DEFAULT_PULL_BATCH_SIZE,
        request_timeout_ms=opts.integer("requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS, low=1)
        or DEFAULT_REQUEST_TIMEOUT_MS,
        keys=_keys(opts),
        tls=_tls(opts),
    )
    opts.raise_problems("streaming read" if streaming else "read")
    return options


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Options of a batch or streaming write."""

    name_server: str
    topic: str | None
    producer_group: str | None
    write_timeout_ms: int
    send_timeout_ms: int
    request_timeout_ms: int
    checkpoint_location: str | None
    commit_retry_ms: int = DEFAULT_COMMIT_RETRY_MS
    #: ACL account (options ``accessKey``/``secretKey``) every request is signed with.
    keys: tuple[str, str] | None = field(default=None, repr=False)
    #: TLS to the cluster (options ``tls``, ``tlsCaPath``, ``tlsCertPath``, ``tlsKeyPath``).
    tls: TlsOptions | None = None


def _or_default(value: int | None, default: int) -> int:
    return default if value is None else value


def parse_write_options(raw: Mapping[str, str], *, streaming: bool) -> WriteOptions:
    """Parse the options of ``df.write`` / ``df.writeStream``."""
    opts = _Options(raw)
    name_server = _name_server(opts)
    checkpoint = opts.get("checkpointLocation")
    if streaming and checkpoint is None:
        opts.problems.append(
            "the rocketq sink needs .option('checkpointLocation', dir): it records published batches there"
        )
    options = WriteOptions(
        name_server=name_server,
        topic=(opts.get("topic") or "").strip() or None,
        producer_group=opts.get("producerGroup"),
        write_timeout_ms=opts.integer("writeTimeoutMs", DEFAULT_WRITE_TIMEOUT_MS, low=1000)
        or DEFAULT_WRITE_TIMEOUT_MS,
        send_timeout_ms=opts.integer("sendTimeoutMs", DEFAULT_SEND_TIMEOUT_MS, low=1)
        or DEFAULT_SEND_TIMEOUT_MS,
        request_timeout_ms=opts.integer("requestTimeoutMs", DEFAULT_REQUEST_TIMEOUT_MS, low=1)
        or DEFAULT_REQUEST_TIMEOUT_MS,
        checkpoint_location=checkpoint,
        commit_retry_ms=_or_default(opts.integer("commitRetryMs", None, low=0), DEFAULT_COMMIT_RETRY_MS),
        keys=_keys(opts),
        tls=_tls(opts),
    )
    opts.raise_problems("streaming write" if streaming else "write")
    return options


__all__ = ["ReadOptions", "TlsOptions", "WriteOptions", "parse_read_options", "parse_write_options"]
