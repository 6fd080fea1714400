"""The NATS JetStream destination against a ``nats-server -js`` of its own (free port,
temp dir): the destination contract of tests/helpers/destinations.py.

The crash test fails with the ``Nats-Msg-Id`` header left out of the publish
(relay/delivery/destinations/nats.py): the stream then keeps the re-sends."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import destinations as contract
from tests.helpers.brokers import NATS_SERVER, NatsKit
from tests.helpers.traced import trace_carried

pytestmark = pytest.mark.realredis


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsKit]:
    if not Path(NATS_SERVER).exists():
        pytest.fail(f"{NATS_SERVER} is missing: apt-get install nats-server", pytrace=False)
    kit = NatsKit(tmp_path_factory.mktemp("nats"))
    kit.start()
    try:
        yield kit
    finally:
        kit.stop()


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Any, Any]:
    store = await make_store(**contract.FAST)
    return store, await make_api(store)


async def test_events_arrive_once_with_verifiable_signatures(kit: NatsKit, env: Any) -> None:
    await contract.exactly_once(kit, *env, count=200)


async def test_a_stopped_broker_means_retries_and_no_loss(kit: NatsKit, env: Any) -> None:
    await contract.outage(kit, *env, count=40, seconds=10)


async def test_an_ordered_endpoint_keeps_each_keys_order(kit: NatsKit, env: Any) -> None:
    await contract.ordered(kit, *env, count=100, keys=4)


async def test_an_unreachable_destination_goes_dead(make_store: Any, make_api: Any) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1), http_timeout=2.0)
    kit = NatsKit(Path("/nonexistent"))  # only its urls: nothing listens on the port
    await contract.unreachable(kit, store, await make_api(store))


async def test_a_misconfigured_destination_goes_dead_with_the_error(
    kit: NatsKit, make_store: Any, make_api: Any
) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1))
    detail = await contract.misconfigured(kit, store, await make_api(store))
    assert "no JetStream stream takes subject" in detail


async def test_credentials_never_show(kit: NatsKit, env: Any) -> None:
    await contract.credentials_hidden(kit, *env)


async def test_a_worker_killed_after_the_confirm_makes_at_most_one_duplicate(
    kit: NatsKit, make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store()
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    result = await contract.crash(kit, store, port, tmp_path, count=200, dedupes=True)
    assert result["unrecorded"] > 0, result  # the kill fell between confirm and record


async def test_a_message_carries_the_attempts_trace_context(kit: NatsKit) -> None:
    """Fails with the broker kinds left out of the attempt's trace headers."""
    await trace_carried(kit, contract.unique())
