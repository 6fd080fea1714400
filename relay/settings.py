"""One frozen settings object, built once from defaults and ``RELAY_*`` variables.

Each setting is declared once, below: its variable, parser, default and one line of doc
(:func:`relay.domain.settingspec.setting`); ``from_env``, the errors naming a variable and
the configuration reference (:func:`reference_markdown`) are derived from it. Nothing else
in relay reads the environment: the object is passed in explicitly. Secrets (API tokens, a
password inside the Redis URL) are redacted in its ``repr``.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from relay.domain import access, otelenv
from relay.domain.retry import max_attempts_for, parse_duration, parse_schedule
from relay.domain.settingspec import SettingsError, read_env, redacted_repr, reference, setting
from relay.domain.settingvalues import (
    _ack_timeout,
    _app_name,
    _body_cap,
    _event_loop,
    _flag,
    _fraction,
    _identifier,
    _log_format,
    _non_negative_int,
    _port,
    _positive_duration,
    _positive_int,
    _prefix,
    _redis_url,
    _sentinels,
    _tokens,
    outbox_table,
    redact_dsn,
    redact_url,
)

DEFAULT_SCHEDULE = "5s,5m,30m,2h,5h,10h,10h"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEV_DIR = Path(".relay")  # `relay dev`'s data folder: api-token, redis-url, redis/
DEV_REDIS_RECORD = "redis-url"  # in it: the Redis a running `relay dev` uses


REDIS = "Redis"
API = "HTTP API"
DELIVERY = "Delivery"
HEALTH = "Endpoint health"
KEEPING = "Retention"
JOBS = "Replay jobs"
OPS = "Operational events"
OUTBOX = "Postgres outbox"
ARCHIVE = "History archive"
PROCESS = "Processes and logs"


def _worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


def _token_count(tokens: tuple[str, ...]) -> str:
    return f"<{len(tokens)} token(s)>"


@dataclass(frozen=True, kw_only=True)
class Settings:
    # One field per RELAY_* variable, read by from_env; the fields after them are derived.
    # fmt: off
    redis_url: str = setting("RELAY_REDIS_URL", _redis_url, DEFAULT_REDIS_URL, group=REDIS,
        doc="Redis URL: `redis://`, `rediss://` or `unix://`. The operator commands use the "
        "Redis a running `relay dev` recorded in `.relay/redis-url` when it is unset",
        secret=redact_url)
    dev_private_redis: bool = setting("RELAY_DEV_PRIVATE_REDIS", _flag, "0", group=REDIS,
        doc="`1`: `relay dev` starts its own `redis-server` even when one answers on the "
        "default URL (`relay dev --private-redis`, `make run PRIVATE_REDIS=1`)")
    redis_cluster: bool = setting("RELAY_REDIS_CLUSTER", _flag, "0", group=REDIS,
        doc="`1`: `RELAY_REDIS_URL` is a seed node of a Redis Cluster")
    redis_sentinels: tuple[tuple[str, int], ...] = setting(
        "RELAY_REDIS_SENTINELS", _sentinels, "", empty=(), group=REDIS,
        doc="Redis Sentinel addresses, `host:port,host:port` (port `26379` when left out): "
        "Sentinel names the primary, and `RELAY_REDIS_URL` still gives the db number, user, "
        "password and options (its host and port are ignored); not with "
        "`RELAY_REDIS_CLUSTER=1` or a `unix://` URL")
    redis_sentinel_master: str = setting("RELAY_REDIS_SENTINEL_MASTER", str, "relay",
        group=REDIS, doc="the name the Sentinels monitor the primary under")
    redis_sentinel_password: str = setting("RELAY_REDIS_SENTINEL_PASSWORD", str, "",
        group=REDIS, secret=True,
        doc="password of the Sentinels themselves (`requirepass` in `sentinel.conf`); the "
        "primary's own comes from `RELAY_REDIS_URL`")
    ack_replicas: int = setting("RELAY_ACK_REPLICAS", _non_negative_int, "0", group=REDIS,
        doc="replicas that must confirm (`WAIT`) every write answered to a client before the "
        "answer, else 503 `replication_timeout`; `0` sends no `WAIT`; on a cluster, the "
        "replicas of the master that took the write")
    ack_timeout: float = setting("RELAY_ACK_TIMEOUT", _ack_timeout, "1s", group=REDIS,
        doc="how long that confirmation may take (1 ms to 4 s, under the 5 s socket timeout)")
    key_prefix: str = setting("RELAY_KEY_PREFIX", _prefix, "relay", group=REDIS,
        doc="prefix of every key")
    shards: int = setting("RELAY_SHARDS", _positive_int, "1", group=REDIS,
        doc="queue shards, each under its own hash tag")

    host: str = setting("RELAY_HOST", str, "127.0.0.1", group=API,
        doc="bind address of the API (and of a worker's `/metrics`)")
    port: int = setting("RELAY_PORT", _port, "8080", group=API, doc="bind port of the API")
    header_timeout: float = setting("RELAY_HEADER_TIMEOUT", _positive_duration, "75s",
        group=API, doc="an API connection must send a complete request head within this of "
        "opening, or of its previous answer, else it is closed (an idle keep-alive connection "
        "too: keep a load balancer's idle timeout under it); see "
        "[Connection limits](../operating/connections.md)")
    body_timeout: float = setting("RELAY_BODY_TIMEOUT", _positive_duration, "60s", group=API,
        doc="a request body must have arrived within this of the API's starting to read it, "
        "else 408 `request_timeout` and the connection is closed")
    max_connections_per_client: int = setting("RELAY_MAX_CONNECTIONS_PER_CLIENT",
        _non_negative_int, "256", group=API,
        doc="connections one client address may hold open to the API; past it a new one is "
        "closed at once, unanswered (`0`: no cap). Behind a proxy or NAT every connection "
        "has its address: see [Connection limits](../operating/connections.md)")
    api_tokens: tuple[str, ...] = setting("RELAY_API_TOKENS", _tokens, "", empty=(), group=API,
        doc="comma-separated operator bearer tokens: every route, every app",
        secret=_token_count)
    auth_disabled: bool = setting("RELAY_AUTH_DISABLED", _flag, "0", group=API,
        doc="`1` runs the API without auth")
    api_rate: float = setting("RELAY_API_RATE", access.parse_api_rate, "100/s,200",
        also="api_burst", group=API,
        doc="requests per API key or portal session, shared by every API replica: "
        "`RATE[/s|/m|/h][,BURST]` (`0`: no limit); past it 429 `rate_limited` with "
        "`Retry-After`; the operator's `RELAY_API_TOKENS` are not limited")
    portal_ttl: float = setting("RELAY_PORTAL_TTL", _positive_duration, "1h", group=API,
        doc="lifetime of a portal session (`POST /v1/apps/{app}/portal`)")
    portal_frame_ancestors: str = setting("RELAY_PORTAL_FRAME_ANCESTORS",
        access.parse_frame_ancestors, "", group=API, shown="none (`'none'`)",
        doc="who may embed `/portal/` in a frame: CSP `frame-ancestors` sources, "
        "space-separated (`https://app.example.com`, `'self'`)")
    public_url: str = setting("RELAY_PUBLIC_URL", access.parse_public_url, "", group=API,
        shown="the request's own scheme and Host, only when that Host is a loopback "
        "`host[:port]` (`localhost`, `127.0.0.1`, `[::1]`); any other Host is 400 "
        "`public_url_required`",
        doc="the API's public base URL, for portal session URLs (`https://hooks.example.com`; "
        "no user, query or fragment)")
    max_payload_bytes: int = setting("RELAY_MAX_PAYLOAD_BYTES", _positive_int, "262144",
        group=API, doc="largest event payload (serialized)")
    idempotency_ttl: float = setting("RELAY_IDEMPOTENCY_TTL", _positive_duration, "24h",
        group=API, doc="how long an `Idempotency-Key` is remembered")
    max_schedule_ahead: float = setting("RELAY_MAX_SCHEDULE_AHEAD", _positive_duration, "30d",
        group=API, doc="how far ahead an event's `deliver_at` may be; a later one is 422 "
        "`deliver_at_too_far`")
    event_types_strict: bool = setting("RELAY_EVENT_TYPES_STRICT", _flag, "0", group=API,
        doc="`1`: an event whose type is not in the catalog (`/v1/event-types`) is 422 "
        "`unknown_event_type`, and endpoints may subscribe only to known types")

    retry_schedule: tuple[float, ...] = setting("RELAY_RETRY_SCHEDULE", parse_schedule,
        DEFAULT_SCHEDULE, group=DELIVERY, doc="delays between attempts; attempts = entries + 1")
    retry_jitter: float = setting("RELAY_RETRY_JITTER", _fraction, "0.2", group=DELIVERY,
        doc="fraction of each delay drawn at random (±)")
    retry_after_cap: float = setting("RELAY_RETRY_AFTER_CAP", parse_duration, "1h",
        group=DELIVERY, doc="longest `Retry-After` honoured")
    http_timeout: float = setting("RELAY_HTTP_TIMEOUT", _positive_duration, "10s",
        group=DELIVERY, doc="one delivery request, connect to last byte (to a broker: "
        "connect to its acknowledgement)")
    destination_idle: float = setting("RELAY_DESTINATION_IDLE", _positive_duration, "60s",
        group=DELIVERY, doc="a broker connection (Redis, NATS, RabbitMQ destination) unused "
        "this long is closed")
    lease_seconds: float = setting("RELAY_LEASE_SECONDS", _positive_duration, "30s",
        group=DELIVERY, doc="claim lease, extended while a send is in flight")
    worker_concurrency: int = setting("RELAY_WORKER_CONCURRENCY", _positive_int, "64",
        group=DELIVERY, doc="sends in flight per worker process")
    claim_batch: int = setting("RELAY_CLAIM_BATCH", _positive_int, "64", group=DELIVERY,
        doc="most deliveries taken by one claim")
    allow_private_networks: bool = setting("RELAY_ALLOW_PRIVATE_NETWORKS", _flag, "0",
        group=DELIVERY, doc="`1` lets endpoints resolve to loopback and private addresses")
    slow_send_after: float = setting("RELAY_SLOW_SEND_AFTER", _positive_duration, "1s",
        group=DELIVERY, doc="a send this slow stops counting against the concurrency")
    shutdown_grace: float = setting("RELAY_SHUTDOWN_GRACE", parse_duration, "20s",
        group=DELIVERY, doc="on SIGTERM, how long in-flight sends may finish")
    response_body_cap: int = setting("RELAY_RESPONSE_BODY_CAP", _body_cap, "512",
        group=DELIVERY, doc="bytes of the receiver's answer body kept in the attempt log "
        "(`detail`; 0 to 65536); see [What the receiver answered]"
        "(../guides/investigating.md#what-the-receiver-answered)")

    breaker_threshold: int = setting("RELAY_BREAKER_THRESHOLD", _positive_int, "5",
        group=HEALTH, doc="consecutive failures that open an endpoint's breaker")
    breaker_cooldown: float = setting("RELAY_BREAKER_COOLDOWN", _positive_duration, "30s",
        group=HEALTH, doc="the breaker's first open period")
    breaker_cooldown_max: float = setting("RELAY_BREAKER_COOLDOWN_MAX", _positive_duration,
        "1h", group=HEALTH, doc="the open period's cap while probes keep failing")
    disable_after: float = setting("RELAY_DISABLE_AFTER", _positive_duration, "5d",
        group=HEALTH, doc="failing this long without a success disables an endpoint")

    retention: float = setting("RELAY_RETENTION", _positive_duration, "7d", group=KEEPING,
        doc="how long succeeded deliveries and events are kept")
    dead_retention: float = setting("RELAY_DEAD_RETENTION", _positive_duration, "30d",
        group=KEEPING, doc="how long dead deliveries are kept")
    sweep_interval: float = setting("RELAY_SWEEP_INTERVAL", _positive_duration, "60s",
        group=KEEPING, doc="how often each worker runs the retention sweep")

    archive_url: str = setting("RELAY_ARCHIVE_URL", str, "", group=ARCHIVE,
        secret=redact_dsn, doc="PostgreSQL URL of the history archive (docs/operating/"
        "archive.md); unset: finished deliveries stay in Redis until their retention")
    archive_schema: str = setting("RELAY_ARCHIVE_SCHEMA", _identifier, "relay", group=ARCHIVE,
        doc="the PostgreSQL schema relay creates and migrates the archive's tables in")
    hot_retention: float = setting("RELAY_HOT_RETENTION", _positive_duration, "1h",
        group=ARCHIVE, doc="with the archive on, how long a finished delivery stays in Redis "
        "before it moves: an hour keeps what operators look at first (the last failures, the "
        "replays they just made) on the fast tier, and costs an hour of finished deliveries "
        "of RAM")
    archive_batch: int = setting("RELAY_ARCHIVE_BATCH", _positive_int, "500", group=ARCHIVE,
        doc="finished deliveries one worker moves per PostgreSQL transaction")
    archive_interval: float = setting("RELAY_ARCHIVE_INTERVAL", _positive_duration, "1s",
        group=ARCHIVE, doc="how often each worker looks for deliveries to move when the last "
        "look found none")
    archive_lease: float = setting("RELAY_ARCHIVE_LEASE", _positive_duration, "30s",
        group=ARCHIVE, doc="a worker's hold on a shard while it moves, renewed at each batch; "
        "another worker takes the shard over after a killed mover's hold runs out")
    archive_backlog_alert: int = setting("RELAY_ARCHIVE_BACKLOG_ALERT", _positive_int,
        "100000", group=ARCHIVE, doc="finished deliveries waiting to move past which relay "
        "publishes the operational event `archive.behind`")

    replay_outstanding: int = setting("RELAY_REPLAY_OUTSTANDING", _positive_int, "100",
        group=JOBS, doc="a replay job's replayed, unfinished deliveries per endpoint, at most")
    replay_lease: float = setting("RELAY_REPLAY_LEASE", _positive_duration, "15s", group=JOBS,
        doc="a worker's lease on the replay job it advances; another takes the job over after")

    ops_app: str = setting("RELAY_OPS_APP", _app_name, "relay-ops", group=OPS,
        doc="the reserved app relay publishes its operational events into (`POST /v1/events` "
        "to it is 422 `app_reserved`); subscribe endpoints of this app to receive them")
    ops_dead_window: float = setting("RELAY_OPS_DEAD_WINDOW", _positive_duration, "60s",
        group=OPS, doc="an endpoint's dead letters within this window (per shard) are summed "
        "into one `delivery.dead`")

    outbox_dsn: str = setting("RELAY_OUTBOX_DSN", str, "", group=OUTBOX, secret=redact_dsn,
        doc="PostgreSQL URL of the outbox (`relay outbox`); its password is redacted in logs")
    outbox_table: str = setting("RELAY_OUTBOX_TABLE", outbox_table, "relay_outbox",
        group=OUTBOX, doc="outbox table, `name` or `schema.name` (plain identifiers)")
    outbox_batch: int = setting("RELAY_OUTBOX_BATCH", _positive_int, "100", group=OUTBOX,
        doc="most rows one connector takes per transaction")
    outbox_poll_interval: float = setting("RELAY_OUTBOX_POLL_INTERVAL", _positive_duration,
        "2s", group=OUTBOX, doc="sweep even without a `NOTIFY` this often")

    event_loop: str = setting("RELAY_EVENT_LOOP", _event_loop, "uvloop", group=PROCESS,
        doc="`uvloop` or `asyncio`: the event loop of `relay api`, `worker`, `dev` and `outbox`")
    metrics_port: int = setting("RELAY_METRICS_PORT", _port, "0", group=PROCESS,
        doc="`relay worker` and `relay outbox` serve their own `/metrics` here (`0`: off)")
    log_format: str = setting("RELAY_LOG_FORMAT", _log_format, "json", group=PROCESS,
        doc="`json` or `console`")
    log_level: str = setting("RELAY_LOG_LEVEL", str.lower, "info", group=PROCESS,
        doc="`debug`, `info`, `warning` or `error`")
    worker_id: str = setting("RELAY_WORKER_ID", str, _worker_id, group=PROCESS,
        shown="`<hostname>-<pid>`", doc="worker name in attempt logs and leases")
    # fmt: on

    redis_url_given: bool = False  # RELAY_REDIS_URL or RELAY_REDIS_SENTINELS was set
    # where redis_url came from: "RELAY_REDIS_URL", "default", or the record `relay dev`
    # left (`.relay/redis-url`), so an error can say which Redis was tried and why
    redis_url_source: str = "default"
    api_burst: int = 200  # set with api_rate by RELAY_API_RATE
    # OpenTelemetry traces (relay.tracing), decided from the standard OTEL_* variables
    # (relay.domain.otelenv): the exporters to build, () when tracing is off, and the service
    # name. The SDK reads its own other OTEL_* variables (endpoint, headers, sampler, batching).
    tracing_exporters: tuple[str, ...] = ()
    tracing_service: str = "relay"

    def __repr__(self) -> str:
        return redacted_repr(self)

    @property
    def max_attempts(self) -> int:
        return max_attempts_for(self.retry_schedule)

    @property
    def redis_shown(self) -> str:
        """The Redis URL (password hidden) and where it came from, for messages."""
        shown = f"{redact_url(self.redis_url)} (from {self.redis_url_source})"
        if self.redis_sentinels:
            at = ",".join(f"{host}:{port}" for host, port in self.redis_sentinels)
            shown += f", primary {self.redis_sentinel_master!r} from Sentinel {at}"
        return shown

    @classmethod
    def for_operator(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        dev_dir: Path = DEV_DIR,
        **overrides: object,
    ) -> Settings:
        """The operator commands' settings: as :meth:`from_env`, except that when
        ``RELAY_REDIS_URL`` is unset and a ``relay dev`` recorded its Redis in
        ``dev_dir/redis-url``, that Redis is the one used."""
        settings = cls.from_env(env, **overrides)
        record = dev_dir / DEV_REDIS_RECORD
        if settings.redis_url_given or not record.is_file():
            return settings
        raw = record.read_text().strip()
        try:
            url = _redis_url(raw)
        except ValueError as exc:
            raise SettingsError(f"{record}: {exc}") from None
        return cls.from_env(env, **{"redis_url": url, "redis_url_source": str(record), **overrides})

    @classmethod
    def for_dev(
        cls, env: Mapping[str, str] | None = None, *, console: bool, **overrides: object
    ) -> Settings:
        """``relay dev``'s settings: endpoints on loopback and private networks allowed,
        and console logs on a terminal, unless the ``RELAY_*`` variables say otherwise."""
        dev = dict(os.environ if env is None else env)
        dev.setdefault("RELAY_ALLOW_PRIVATE_NETWORKS", "1")
        if console:
            dev.setdefault("RELAY_LOG_FORMAT", "console")
        return cls.from_env(dev, **overrides)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from ``RELAY_*`` variables; ``overrides`` (from CLI flags) win."""
        env = os.environ if env is None else env
        values = read_env(cls, env)
        # Sentinel names the Redis too: `relay dev` starts none
        values["redis_url_given"] = "redis_url" in values or "redis_sentinels" in values
        if "redis_url" in values:
            values["redis_url_source"] = "RELAY_REDIS_URL"
        if "redis_sentinels" in values:
            if values.get("redis_cluster"):
                raise SettingsError(
                    "RELAY_REDIS_SENTINELS and RELAY_REDIS_CLUSTER=1 exclude each other"
                )
            if str(values.get("redis_url", "")).startswith("unix:"):
                raise SettingsError(
                    "RELAY_REDIS_SENTINELS needs a redis:// or rediss:// RELAY_REDIS_URL"
                )
        try:  # the standard OTEL_* variables: is tracing on (relay.domain.otelenv)
            values["tracing_exporters"], values["tracing_service"] = otelenv.tracing(env)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


@dataclass(frozen=True, kw_only=True)
class TestHooks:
    """What the crash tests ask of the ``relay worker`` and ``relay outbox`` processes they
    start, through the environment; not configuration (the reference leaves them out)."""

    __test__ = False  # not a pytest test class

    # fmt: off
    crash_marker: str = setting("RELAY_TEST_CRASH_MARKER", str, "", group="Test hooks",
        doc="a worker about to send a body containing this marker kills its own process")
    outbox_crash_after: int = setting("RELAY_TEST_OUTBOX_CRASH_AFTER", int, "0",
        group="Test hooks", doc="`relay outbox` exits 86 right after its Nth event was "
        "acknowledged by Redis, before the row is removed (`0`: off)")
    # fmt: on

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TestHooks:
        return cls(**read_env(cls, os.environ if env is None else env))


REFERENCE_INTRO = """
# Settings

relay reads these environment variables once at start, into one frozen settings object;
a value it cannot use stops it with one line naming the variable. This page is generated
from their declaration in `relay/settings.py` (`python scripts/gen_settings_reference.py`).
"""

REFERENCE_OUTRO = """
## OpenTelemetry

The standard `OTEL_*` variables: traces are off unless `OTEL_TRACES_EXPORTER` or an OTLP
endpoint is set (see [Tracing](../guides/tracing.md)).

Durations take `ms`, `s`, `m`, `h`, `d` suffixes or bare seconds.
"""


def reference_markdown() -> str:
    """The configuration reference: a table per group of each setting's variable, default
    and doc, derived from the declaration."""
    return reference(Settings, REFERENCE_INTRO, REFERENCE_OUTRO)
