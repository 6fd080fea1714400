"""Settings from RELAY_* variables (parsing, errors, redaction) and id/shard round trips."""

from __future__ import annotations

import asyncio

import pytest

from relay.domain import ids
from relay.runner import run_loop
from relay.settings import Settings, SettingsError


def test_defaults_match_the_contract() -> None:
    s = Settings.from_env({})
    assert s.redis_url == "redis://127.0.0.1:6379/0" and s.key_prefix == "relay"
    assert s.shards == 1 and (s.host, s.port) == ("127.0.0.1", 8080)
    assert s.api_tokens == () and s.auth_disabled is False
    assert s.retry_schedule == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert s.max_attempts == 8
    assert s.retry_jitter == 0.2 and s.http_timeout == 10 and s.lease_seconds == 30
    assert s.worker_concurrency == 64 and s.allow_private_networks is False
    assert s.max_payload_bytes == 262144 and s.retention == 7 * 86400
    assert s.log_format == "json"
    assert s.header_timeout == 75 and s.body_timeout == 60
    assert s.max_connections_per_client == 256


def test_from_env_parses_every_kind() -> None:
    s = Settings.from_env(
        {
            "RELAY_REDIS_URL": "redis://127.0.0.1:7000/2",
            "RELAY_REDIS_CLUSTER": "yes",
            "RELAY_KEY_PREFIX": "acme",
            "RELAY_SHARDS": "4",
            "RELAY_HOST": "0.0.0.0",
            "RELAY_PORT": "9000",
            "RELAY_API_TOKENS": " a , b,, c ",
            "RELAY_AUTH_DISABLED": "0",
            "RELAY_RETRY_SCHEDULE": "500ms, 5s,5m,2h",
            "RELAY_RETRY_JITTER": "0",
            "RELAY_HTTP_TIMEOUT": "1.5",
            "RELAY_LEASE_SECONDS": "2m",
            "RELAY_WORKER_CONCURRENCY": "16",
            "RELAY_ALLOW_PRIVATE_NETWORKS": "1",
            "RELAY_MAX_PAYLOAD_BYTES": "1000",
            "RELAY_RETENTION": "3d",
            "RELAY_LOG_FORMAT": "console",
            "RELAY_LOG_LEVEL": "WARNING",
            "RELAY_WORKER_ID": "w-7",
            "RELAY_SHUTDOWN_GRACE": "0",
            "RELAY_HEADER_TIMEOUT": "30s",
            "RELAY_BODY_TIMEOUT": "2m",
            "RELAY_MAX_CONNECTIONS_PER_CLIENT": "0",
            "UNRELATED": "x",
        }
    )
    assert s.redis_url == "redis://127.0.0.1:7000/2" and s.redis_cluster is True
    assert s.key_prefix == "acme" and s.shards == 4 and (s.host, s.port) == ("0.0.0.0", 9000)
    assert s.api_tokens == ("a", "b", "c") and s.auth_disabled is False
    assert s.retry_schedule == (0.5, 5, 300, 7200) and s.max_attempts == 5
    assert s.retry_jitter == 0 and s.http_timeout == 1.5 and s.lease_seconds == 120
    assert s.worker_concurrency == 16 and s.allow_private_networks is True
    assert s.max_payload_bytes == 1000 and s.retention == 3 * 86400
    assert s.log_format == "console" and s.log_level == "warning"
    assert s.worker_id == "w-7" and s.shutdown_grace == 0
    assert s.header_timeout == 30 and s.body_timeout == 120
    assert s.max_connections_per_client == 0


def test_blank_values_mean_default_and_overrides_win() -> None:
    s = Settings.from_env({"RELAY_PORT": "  ", "RELAY_SHARDS": "2"}, shards=3, host=None)
    assert s.port == 8080 and s.shards == 3 and s.host == "127.0.0.1"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("RELAY_SHARDS", "0"),
        ("RELAY_SHARDS", "two"),
        ("RELAY_PORT", "70000"),
        ("RELAY_PORT", "http"),
        ("RELAY_REDIS_CLUSTER", "maybe"),
        ("RELAY_KEY_PREFIX", "a{b}"),
        ("RELAY_KEY_PREFIX", "a:b"),
        ("RELAY_RETRY_SCHEDULE", "5s,,5m"),
        ("RELAY_RETRY_SCHEDULE", "5 fortnights"),
        ("RELAY_RETRY_SCHEDULE", ","),
        ("RELAY_RETRY_JITTER", "1.5"),
        ("RELAY_RETRY_JITTER", "lots"),
        ("RELAY_HTTP_TIMEOUT", "0"),
        ("RELAY_HTTP_TIMEOUT", "-1"),
        ("RELAY_LEASE_SECONDS", "soon"),
        ("RELAY_WORKER_CONCURRENCY", "-4"),
        ("RELAY_MAX_PAYLOAD_BYTES", "1e6"),
        ("RELAY_RETENTION", "0s"),
        ("RELAY_LOG_FORMAT", "xml"),
        ("RELAY_EVENT_LOOP", "trio"),
        ("RELAY_ALLOW_PRIVATE_NETWORKS", "2"),
        ("RELAY_HEADER_TIMEOUT", "0"),
        ("RELAY_BODY_TIMEOUT", "-5s"),
        ("RELAY_MAX_CONNECTIONS_PER_CLIENT", "-1"),
        ("RELAY_MAX_CONNECTIONS_PER_CLIENT", "many"),
    ],
)
def test_bad_values_name_the_variable(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as err:
        Settings.from_env({name: value})
    assert str(err.value).startswith(f"{name}=")
    assert repr(value) in str(err.value)


def test_bad_api_tokens_error_does_not_echo_tokens() -> None:
    # tokens have no invalid form; what matters is they never show up in a repr
    s = Settings.from_env({"RELAY_API_TOKENS": "s3cret-one,s3cret-two"})
    assert s.api_tokens == ("s3cret-one", "s3cret-two")
    assert "s3cret" not in repr(s) and "s3cret" not in str(s)
    assert "<2 token(s)>" in repr(s)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:hunter2@10.0.0.5:6380/1", "redis://:***@10.0.0.5:6380/1"),
        ("rediss://relay:hunter2@cache.internal/0", "rediss://relay:***@cache.internal/0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:hunter2@[::1]:6379/0", "redis://:***@[::1]:6379/0"),
        (
            "redis://127.0.0.1/0?password=hunter2&ssl_cert_reqs=none",
            "redis://127.0.0.1/0?password=***&ssl_cert_reqs=none",
        ),
        ("redis://u:hunter2@h/0?PASSWORD=hunter2", "redis://u:***@h/0?PASSWORD=***"),
    ],
)
def test_repr_hides_redis_password(url: str, shown: str) -> None:
    s = Settings(redis_url=url, api_tokens=("tok-abc",))
    assert "hunter2" not in repr(s) and "tok-abc" not in repr(s)
    assert f"redis_url={shown!r}" in repr(s)


def test_settings_are_frozen() -> None:
    s = Settings()
    with pytest.raises(AttributeError):
        s.shards = 2  # type: ignore[misc]


@pytest.mark.parametrize("prefix", ["evt", "dlv"])
def test_new_id_shard_round_trip(prefix: str) -> None:
    for shard in range(ids.MAX_SHARDS):
        ident = ids.new_id(prefix, shard)
        assert ident.startswith(prefix + "_") and len(ident) == len(prefix) + 27
        assert ids.shard_of(ident) == shard
        assert ids.looks_like(ident, prefix)


def test_ids_sort_by_time_and_are_unique() -> None:
    made = [ids.new_id("evt", 3, 1_700_000_000_000 + n) for n in range(200)]
    assert made == sorted(made)
    assert len({ids.new_id("dlv") for _ in range(5000)}) == 5000


@pytest.mark.parametrize("shard", [-1, ids.MAX_SHARDS, 5000])
def test_new_id_refuses_out_of_range_shard(shard: int) -> None:
    with pytest.raises(ValueError):
        ids.new_id("evt", shard)


@pytest.mark.parametrize(
    "ident",
    ["", "evt", "evt_", "evt_short", "nounderscore" * 3, "evt_" + "!" * 26, "evt_" + "A" * 27],
)
def test_shard_of_rejects_foreign_ids(ident: str) -> None:
    assert ids.shard_of(ident) is None
    assert not ids.looks_like(ident, "evt")


@pytest.mark.parametrize(
    ("env", "module"), [({}, "uvloop"), ({"RELAY_EVENT_LOOP": "asyncio"}, "asyncio")]
)
def test_event_loop_setting_picks_the_loop(env: dict[str, str], module: str) -> None:
    async def which() -> str:
        return type(asyncio.get_running_loop()).__module__.partition(".")[0]

    assert run_loop(Settings.from_env(env), which()) == module
