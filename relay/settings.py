"""One frozen settings object, built once from defaults and ``RELAY_*`` variables.

Nothing else in relay reads the environment: the object is passed in explicitly.
Secrets (API tokens, a password inside the Redis URL) are redacted in its ``repr``.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from relay.domain import access, otelenv
from relay.domain.retry import max_attempts_for, parse_duration, parse_schedule
from relay.domain.settingvalues import (
    _ack_timeout,
    _app_name,
    _event_loop,
    _flag,
    _fraction,
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
)

DEFAULT_SCHEDULE = "5s,5m,30m,2h,5h,10h,10h"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEV_DIR = Path(".relay")  # `relay dev`'s data folder: api-token, redis-url, redis/
DEV_REDIS_RECORD = "redis-url"  # in it: the Redis a running `relay dev` uses


class SettingsError(ValueError):
    """A ``RELAY_*`` variable has a value relay cannot use."""


def _redact_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is not None:
        # keep the host exactly as written (an IPv6 literal keeps its brackets)
        netloc = f"{parts.username or ''}:***@{parts.netloc.rpartition('@')[2]}"
        parts = parts._replace(netloc=netloc)
    if parts.query:  # redis-py also takes ?password=...
        query = "&".join(
            f"{k}=***" if k.lower() == "password" else f"{k}{sep}{v}"
            for k, sep, v in (p.partition("=") for p in parts.query.split("&"))
        )
        parts = parts._replace(query=query)
    return urlunsplit(parts)


def _redact_dsn(dsn: str) -> str:
    """A PostgreSQL URL or ``key=value`` conninfo with its password hidden."""
    if "://" in dsn:
        return _redact_url(dsn)
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn, flags=re.I)


@dataclass(frozen=True, kw_only=True)
class Settings:
    redis_url: str = DEFAULT_REDIS_URL
    redis_url_given: bool = False  # RELAY_REDIS_URL was set (else `relay dev` may start one)
    # where redis_url came from: "RELAY_REDIS_URL", "default", or the record `relay dev`
    # left (`.relay/redis-url`), so an error can say which Redis was tried and why
    redis_url_source: str = "default"
    dev_private_redis: bool = False  # `relay dev` starts its own redis-server regardless
    redis_cluster: bool = False
    # Redis Sentinel: with sentinels set, they name the primary's host and port (the URL
    # still gives db, username, password and options); see relay.queue.base.connect
    redis_sentinels: tuple[tuple[str, int], ...] = ()
    redis_sentinel_master: str = "relay"
    redis_sentinel_password: str = field(default="", repr=False)
    # Replica-acknowledged writes: every write answered to a client waits (WAIT) until
    # this many replicas have it, at most ack_timeout seconds (else 503
    # replication_timeout). 0: no WAIT is sent.
    ack_replicas: int = 0
    ack_timeout: float = 1.0
    key_prefix: str = "relay"
    shards: int = 1
    host: str = "127.0.0.1"
    port: int = 8080
    # The API's connections (relay/api/server.py): a request head must arrive within
    # header_timeout of the connection's opening or of its previous answer (an idle
    # keep-alive connection is closed by it too), a body within body_timeout; one client
    # address holds at most max_connections_per_client connections (0: no cap)
    header_timeout: float = 75.0
    body_timeout: float = 60.0
    max_connections_per_client: int = 256
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    auth_disabled: bool = False
    # Tenancy (relay/api/access.py): app-scoped API keys and portal sessions
    api_rate: float = 100.0  # requests/s per API key or portal session (0: no limit)
    api_burst: int = 200  # requests a key may make at once before the rate applies
    portal_ttl: float = 3600.0  # a portal session's lifetime
    portal_frame_ancestors: str = ""  # CSP frame-ancestors of /portal/ ("": 'none')
    public_url: str = ""  # base of portal URLs ("": the request's own)
    retry_schedule: tuple[float, ...] = parse_schedule(DEFAULT_SCHEDULE)
    retry_jitter: float = 0.2
    retry_after_cap: float = 3600.0
    http_timeout: float = 10.0
    lease_seconds: float = 30.0
    worker_concurrency: int = 64
    claim_batch: int = 64
    # the event loop of `relay api`, `worker`, `dev` and `outbox`: uvloop (libuv; 8% fewer
    # instructions per delivery in the worker, bench/instructions.py) or asyncio's own
    event_loop: str = "uvloop"
    allow_private_networks: bool = False
    max_payload_bytes: int = 262144
    retention: float = 7 * 86400.0
    dead_retention: float = 30 * 86400.0
    idempotency_ttl: float = 86400.0
    sweep_interval: float = 60.0  # how often each worker runs the retention sweep
    metrics_port: int = 0  # `relay worker` serves /metrics here when not 0
    shutdown_grace: float = 20.0
    breaker_threshold: int = 5
    breaker_cooldown: float = 30.0
    breaker_cooldown_max: float = 3600.0
    disable_after: float = 5 * 86400.0
    slow_send_after: float = 1.0
    # Reconciliation replay jobs (relay/ops/replays.py), advanced by the workers
    replay_outstanding: int = 100  # a job's replayed, unfinished deliveries per endpoint
    replay_lease: float = 15.0  # a worker's lease on a job; another takes over after it
    # The event type catalog: 1 refuses events (and endpoint subscriptions) of unknown types
    event_types_strict: bool = False
    # Operational events (relay/connectors/opsevents.py): the reserved app they are
    # published into, and the window over which an endpoint's dead letters are summed
    # into one delivery.dead
    ops_app: str = "relay-ops"
    ops_dead_window: float = 60.0
    # The Postgres outbox connector (`relay outbox`, relay/connectors/)
    outbox_dsn: str = ""
    outbox_table: str = "relay_outbox"
    outbox_batch: int = 100
    outbox_poll_interval: float = 2.0
    log_format: str = "json"
    log_level: str = "info"
    # OpenTelemetry traces (relay.tracing), decided from the standard OTEL_* variables
    # (relay.domain.otelenv): the exporters to build, () when tracing is off, and the service name.
    # The SDK reads its own other OTEL_* variables (endpoint, headers, sampler, batching).
    tracing_exporters: tuple[str, ...] = ()
    tracing_service: str = "relay"
    # Test hook (crash-injection and poison-message tests): the worker of a `relay worker`
    # process about to send a body containing this marker kills its own process first
    # (relay.runner.crash_hook, given to the Worker as its before_send hook).
    test_crash_marker: str = ""
    # Test hook (outbox crash tests): a `relay outbox` process exits 86 right after its
    # Nth event was acknowledged by Redis, before the row is removed (0: off).
    test_outbox_crash_after: int = 0
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "api_tokens":
                value = f"<{len(value)} token(s)>"
            elif f.name == "redis_url":
                value = _redact_url(value)
            elif f.name == "redis_sentinel_password":
                value = "***" if value else ""
            elif f.name == "outbox_dsn":
                value = _redact_dsn(value)
            shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"

    @property
    def max_attempts(self) -> int:
        return max_attempts_for(self.retry_schedule)

    @property
    def redis_shown(self) -> str:
        """The Redis URL (password hidden) and where it came from, for messages."""
        shown = f"{_redact_url(self.redis_url)} (from {self.redis_url_source})"
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
        values: dict[str, object] = {}

        def get(name: str) -> str | None:
            raw = env.get(f"RELAY_{name}")
            return raw.strip() if raw is not None and raw.strip() != "" else None

        def convert(name: str, attr: str, fn) -> None:  # type: ignore[no-untyped-def]
            raw = get(name)
            if raw is None:
                return
            try:
                values[attr] = fn(raw)
            except ValueError as exc:
                raise SettingsError(f"RELAY_{name}={raw!r}: {exc}") from None

        flag = _flag
        convert("REDIS_URL", "redis_url", _redis_url)
        values["redis_url_given"] = "redis_url" in values
        if values["redis_url_given"]:
            values["redis_url_source"] = "RELAY_REDIS_URL"
        convert("DEV_PRIVATE_REDIS", "dev_private_redis", flag)
        convert("REDIS_CLUSTER", "redis_cluster", flag)
        convert("REDIS_SENTINELS", "redis_sentinels", _sentinels)
        convert("REDIS_SENTINEL_MASTER", "redis_sentinel_master", str)
        convert("REDIS_SENTINEL_PASSWORD", "redis_sentinel_password", str)
        if "redis_sentinels" in values:  # Sentinel names the Redis: `relay dev` starts none
            values["redis_url_given"] = True
            if values.get("redis_cluster"):
                raise SettingsError(
                    "RELAY_REDIS_SENTINELS and RELAY_REDIS_CLUSTER=1 exclude each other"
                )
            if str(values.get("redis_url", "")).startswith("unix:"):
                raise SettingsError(
                    "RELAY_REDIS_SENTINELS needs a redis:// or rediss:// RELAY_REDIS_URL"
                )
        convert("ACK_REPLICAS", "ack_replicas", _non_negative_int)
        convert("ACK_TIMEOUT", "ack_timeout", _ack_timeout)
        convert("KEY_PREFIX", "key_prefix", _prefix)
        convert("SHARDS", "shards", _positive_int)
        convert("HOST", "host", str)
        convert("PORT", "port", _port)
        convert("HEADER_TIMEOUT", "header_timeout", _positive_duration)
        convert("BODY_TIMEOUT", "body_timeout", _positive_duration)
        convert("MAX_CONNECTIONS_PER_CLIENT", "max_connections_per_client", _non_negative_int)
        convert("API_TOKENS", "api_tokens", _tokens)
        convert("AUTH_DISABLED", "auth_disabled", flag)
        convert("API_RATE", "api_rate", access.parse_api_rate)
        if "api_rate" in values:  # (rate, burst)
            values["api_rate"], values["api_burst"] = values["api_rate"]  # type: ignore[misc]
        convert("PORTAL_TTL", "portal_ttl", _positive_duration)
        convert("PORTAL_FRAME_ANCESTORS", "portal_frame_ancestors", access.parse_frame_ancestors)
        convert("PUBLIC_URL", "public_url", access.parse_public_url)
        convert("RETRY_SCHEDULE", "retry_schedule", parse_schedule)
        convert("RETRY_JITTER", "retry_jitter", _fraction)
        convert("RETRY_AFTER_CAP", "retry_after_cap", parse_duration)
        convert("HTTP_TIMEOUT", "http_timeout", _positive_duration)
        convert("LEASE_SECONDS", "lease_seconds", _positive_duration)
        convert("WORKER_CONCURRENCY", "worker_concurrency", _positive_int)
        convert("CLAIM_BATCH", "claim_batch", _positive_int)
        convert("EVENT_LOOP", "event_loop", _event_loop)
        convert("ALLOW_PRIVATE_NETWORKS", "allow_private_networks", flag)
        convert("MAX_PAYLOAD_BYTES", "max_payload_bytes", _positive_int)
        convert("RETENTION", "retention", _positive_duration)
        convert("DEAD_RETENTION", "dead_retention", _positive_duration)
        convert("IDEMPOTENCY_TTL", "idempotency_ttl", _positive_duration)
        convert("SWEEP_INTERVAL", "sweep_interval", _positive_duration)
        convert("METRICS_PORT", "metrics_port", _port)
        convert("SHUTDOWN_GRACE", "shutdown_grace", parse_duration)
        convert("BREAKER_THRESHOLD", "breaker_threshold", _positive_int)
        convert("BREAKER_COOLDOWN", "breaker_cooldown", _positive_duration)
        convert("BREAKER_COOLDOWN_MAX", "breaker_cooldown_max", _positive_duration)
        convert("DISABLE_AFTER", "disable_after", _positive_duration)
        convert("SLOW_SEND_AFTER", "slow_send_after", _positive_duration)
        convert("REPLAY_OUTSTANDING", "replay_outstanding", _positive_int)
        convert("REPLAY_LEASE", "replay_lease", _positive_duration)
        convert("EVENT_TYPES_STRICT", "event_types_strict", flag)
        convert("OPS_APP", "ops_app", _app_name)
        convert("OPS_DEAD_WINDOW", "ops_dead_window", _positive_duration)
        convert("LOG_FORMAT", "log_format", _log_format)
        convert("LOG_LEVEL", "log_level", str.lower)
        convert("WORKER_ID", "worker_id", str)
        convert("TEST_CRASH_MARKER", "test_crash_marker", str)
        convert("OUTBOX_DSN", "outbox_dsn", str)
        convert("OUTBOX_TABLE", "outbox_table", outbox_table)
        convert("OUTBOX_BATCH", "outbox_batch", _positive_int)
        convert("OUTBOX_POLL_INTERVAL", "outbox_poll_interval", _positive_duration)
        convert("TEST_OUTBOX_CRASH_AFTER", "test_outbox_crash_after", int)
        try:  # the standard OTEL_* variables: is tracing on (relay.domain.otelenv)
            values["tracing_exporters"], values["tracing_service"] = otelenv.tracing(env)
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        values.update({k: v for k, v in overrides.items() if v is not None})
        if values.get("ack_replicas") and values.get("redis_cluster"):
            # WAIT is keyless: a cluster pipeline cannot send it beside the script.
            raise SettingsError(
                "RELAY_ACK_REPLICAS > 0 is not supported with RELAY_REDIS_CLUSTER=1 yet"
            )
        return cls(**values)  # type: ignore[arg-type]


# The docs' settings reference (docs/reference/settings.md): variable -> (field, meaning).
REFERENCE: dict[str, tuple[str, str]] = {
    "REDIS_URL": ("redis_url", "Redis URL: redis://, rediss:// or unix://"),
    "DEV_PRIVATE_REDIS": ("dev_private_redis", "1: `relay dev` starts its own redis-server"),
    "KEY_PREFIX": ("key_prefix", "prefix of every key"),
    "SHARDS": ("shards", "queue shards, each under its own hash tag"),
    "HOST": ("host", "API bind address"),
    "PORT": ("port", "API bind port"),
    "HEADER_TIMEOUT": (
        "header_timeout",
        "an API connection must send a complete request head within this of opening, or "
        "of its previous answer, else it is closed (idle keep-alive connections too)",
    ),
    "BODY_TIMEOUT": (
        "body_timeout",
        "a request body must arrive within this, else 408 `request_timeout`",
    ),
    "MAX_CONNECTIONS_PER_CLIENT": (
        "max_connections_per_client",
        "connections one client address may hold open to the API (`0`: no cap)",
    ),
    "API_TOKENS": ("api_tokens", "comma-separated bearer tokens of the operator"),
    "AUTH_DISABLED": ("auth_disabled", "1 runs the API without auth"),
    "API_RATE": ("api_rate", "requests per API key or portal session: RATE[/s, /m or /h][,BURST]"),
    "PORTAL_TTL": ("portal_ttl", "lifetime of a portal session"),
    "PORTAL_FRAME_ANCESTORS": ("portal_frame_ancestors", "who may frame /portal/ (CSP)"),
    "PUBLIC_URL": (
        "public_url",
        "the API's public base URL, for portal session URLs; unset, only a loopback Host "
        "builds one",
    ),
    "RETRY_SCHEDULE": ("retry_schedule", "delays between attempts; attempts = entries + 1"),
    "RETRY_JITTER": ("retry_jitter", "fraction of each delay drawn at random (±)"),
    "RETRY_AFTER_CAP": ("retry_after_cap", "longest Retry-After honoured"),
    "HTTP_TIMEOUT": ("http_timeout", "one delivery request, connect to last byte"),
    "LEASE_SECONDS": ("lease_seconds", "claim lease, extended while a send is in flight"),
    "WORKER_CONCURRENCY": ("worker_concurrency", "sends in flight per worker process"),
    "CLAIM_BATCH": ("claim_batch", "most deliveries taken by one claim"),
    "EVENT_LOOP": ("event_loop", "uvloop or asyncio"),
    "SHUTDOWN_GRACE": ("shutdown_grace", "on SIGTERM, how long in-flight sends may finish"),
    "BREAKER_THRESHOLD": ("breaker_threshold", "consecutive failures that open a breaker"),
    "BREAKER_COOLDOWN": ("breaker_cooldown", "first open period of a breaker"),
    "BREAKER_COOLDOWN_MAX": ("breaker_cooldown_max", "longest open period of a breaker"),
    "DISABLE_AFTER": ("disable_after", "failing this long without a success disables it"),
    "OPS_APP": ("ops_app", "the reserved app of relay's operational events"),
    "OPS_DEAD_WINDOW": ("ops_dead_window", "dead letters in this window: one delivery.dead"),
    "SLOW_SEND_AFTER": ("slow_send_after", "a send this slow stops counting against concurrency"),
    "REPLAY_OUTSTANDING": ("replay_outstanding", "a replay job's unfinished per endpoint"),
    "REPLAY_LEASE": ("replay_lease", "a worker's lease on the replay job it advances"),
    "ALLOW_PRIVATE_NETWORKS": ("allow_private_networks", "1: endpoints may be private"),
    "EVENT_TYPES_STRICT": ("event_types_strict", "1: only event types of the catalog"),
    "MAX_PAYLOAD_BYTES": ("max_payload_bytes", "largest event payload (serialized)"),
    "IDEMPOTENCY_TTL": ("idempotency_ttl", "how long an Idempotency-Key is remembered"),
    "RETENTION": ("retention", "how long succeeded deliveries and events are kept"),
    "DEAD_RETENTION": ("dead_retention", "how long dead deliveries are kept"),
    "SWEEP_INTERVAL": ("sweep_interval", "how often each worker runs the retention sweep"),
    "METRICS_PORT": ("metrics_port", "`relay worker` serves /metrics here (0: off)"),
    "REDIS_CLUSTER": ("redis_cluster", "1: RELAY_REDIS_URL is a seed node of a Redis Cluster"),
    "ACK_REPLICAS": ("ack_replicas", "replicas that confirm (WAIT) every acknowledged write"),
    "ACK_TIMEOUT": ("ack_timeout", "how long that confirmation may take"),
    "REDIS_SENTINELS": ("redis_sentinels", "Redis Sentinel addresses, host:port,host:port"),
    "REDIS_SENTINEL_MASTER": ("redis_sentinel_master", "the name Sentinel knows the primary by"),
    "REDIS_SENTINEL_PASSWORD": ("redis_sentinel_password", "password of the Sentinels"),
    "LOG_FORMAT": ("log_format", "json or console"),
    "LOG_LEVEL": ("log_level", "debug, info, warning or error"),
    "WORKER_ID": ("worker_id", "worker name in attempt logs and leases (hostname-pid)"),
    "OUTBOX_DSN": ("outbox_dsn", "PostgreSQL URL of the outbox (`relay outbox`)"),
    "OUTBOX_TABLE": ("outbox_table", "outbox table, name or schema.name"),
    "OUTBOX_BATCH": ("outbox_batch", "most rows one connector takes per transaction"),
    "OUTBOX_POLL_INTERVAL": ("outbox_poll_interval", "sweep even without a NOTIFY this often"),
}


def reference_markdown() -> str:
    """The settings reference as markdown: a table of every ``RELAY_*`` variable."""
    defaults = {f.name: f.default for f in fields(Settings)}
    rows = []
    for name, (attr, doc) in REFERENCE.items():
        default = defaults[attr]
        shown = "" if isinstance(default, type(MISSING)) or default in ("", ()) else default
        if isinstance(shown, bool):
            shown = int(shown)
        elif isinstance(shown, tuple):
            shown = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in shown)
        rows.append(f"| `RELAY_{name}` | {doc} | {f'`{shown}`' if shown != '' else ''} |")
    return (
        "Environment variables, read once at start into one frozen settings object. "
        "Durations take `ms`, `s`, `m`, `h`, `d` suffixes or bare seconds (defaults here "
        "are in seconds).\n\n| variable | meaning | default |\n| --- | --- | --- |\n"
        + "\n".join(rows)
        + "\n\nTracing is configured by the standard `OTEL_*` variables (off when none is set).\n"
    )
