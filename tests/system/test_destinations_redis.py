"""The Redis Streams destination against a customer ``redis-server`` of its own (not
relay's Redis): the destination contract of tests/helpers/destinations.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import destinations as contract
from tests.helpers.brokers import RedisKit

pytestmark = pytest.mark.realredis


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisKit]:
    kit = RedisKit(tmp_path_factory.mktemp("customer-redis"))
    kit.start()
    try:
        yield kit
    finally:
        kit.stop()


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Any, Any]:
    store = await make_store(**contract.FAST)
    return store, await make_api(store)


async def test_events_arrive_once_with_verifiable_signatures(kit: RedisKit, env: Any) -> None:
    await contract.exactly_once(kit, *env, count=200)


async def test_a_stopped_broker_means_retries_and_no_loss(kit: RedisKit, env: Any) -> None:
    await contract.outage(kit, *env, count=40, seconds=10)


async def test_an_ordered_endpoint_keeps_each_keys_order(kit: RedisKit, env: Any) -> None:
    await contract.ordered(kit, *env, count=100, keys=4)


async def test_an_unreachable_destination_goes_dead(make_store: Any, make_api: Any) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1), http_timeout=2.0)
    kit = RedisKit(Path("/nonexistent"))  # only its urls: nothing listens on the port
    await contract.unreachable(kit, store, await make_api(store))


async def test_a_misconfigured_destination_goes_dead_with_the_error(
    kit: RedisKit, make_store: Any, make_api: Any
) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1))
    detail = await contract.misconfigured(kit, store, await make_api(store))
    assert "WRONGTYPE" in detail


async def test_credentials_never_show(kit: RedisKit, env: Any) -> None:
    await contract.credentials_hidden(kit, *env)


async def test_a_worker_killed_after_the_confirm_makes_at_most_one_duplicate(
    kit: RedisKit, make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store()
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    result = await contract.crash(kit, store, port, tmp_path, count=200, dedupes=False)
    assert result["unrecorded"] > 0, result  # the kill fell between confirm and record


async def test_relays_own_redis_is_refused(
    kit: RedisKit, make_store: Any, make_api: Any, redis_server: Any
) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1))
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    url = kit.url(contract.unique(), port=port)
    detail = await contract.goes_dead(kit, store, await make_api(store), url, {"refused"})
    assert "relay's own Redis" in detail
