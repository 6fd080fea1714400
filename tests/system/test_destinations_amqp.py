"""The RabbitMQ destination against a ``rabbitmq-server`` node of its own (free ports,
its own epmd, files in a temp dir): the destination contract of
tests/helpers/destinations.py."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import destinations as contract
from tests.helpers.brokers import RABBITMQ_SERVER, RabbitKit
from tests.helpers.traced import trace_carried

pytestmark = pytest.mark.realredis


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitKit]:
    if not Path(RABBITMQ_SERVER).exists():
        pytest.fail(f"{RABBITMQ_SERVER} is missing: apt-get install rabbitmq-server", pytrace=False)
    # in /tmp itself: run as root, Debian's scripts start the node as user rabbitmq, who
    # cannot enter pytest's private temp dirs
    data = Path(tempfile.mkdtemp(prefix="relay-rabbitmq-"))
    kit = RabbitKit(data)
    try:
        kit.start()
        yield kit
    finally:
        kit.close()
        shutil.rmtree(data, ignore_errors=True)


@pytest.fixture
async def env(make_store: Any, make_api: Any) -> tuple[Any, Any]:
    store = await make_store(**contract.FAST)
    return store, await make_api(store)


async def test_events_arrive_once_with_verifiable_signatures(kit: RabbitKit, env: Any) -> None:
    await contract.exactly_once(kit, *env, count=200)


async def test_a_stopped_broker_means_retries_and_no_loss(kit: RabbitKit, env: Any) -> None:
    await contract.outage(kit, *env, count=40, seconds=10)


async def test_an_ordered_endpoint_keeps_each_keys_order(kit: RabbitKit, env: Any) -> None:
    await contract.ordered(kit, *env, count=100, keys=4)


async def test_an_unreachable_destination_goes_dead(make_store: Any, make_api: Any) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1), http_timeout=2.0)
    kit = RabbitKit(Path("/nonexistent"))  # only its urls: nothing listens on the port
    await contract.unreachable(kit, store, await make_api(store))


async def test_a_misconfigured_destination_goes_dead_with_the_error(
    kit: RabbitKit, make_store: Any, make_api: Any
) -> None:
    store = await make_store(retry_schedule=(0.05, 0.1))
    detail = await contract.misconfigured(kit, store, await make_api(store))
    assert "NO_ROUTE" in detail and "no queue bound" in detail


async def test_credentials_never_show(kit: RabbitKit, env: Any) -> None:
    await contract.credentials_hidden(kit, *env)


async def test_a_worker_killed_after_the_confirm_makes_at_most_one_duplicate(
    kit: RabbitKit, make_store: Any, redis_server: Any, tmp_path: Path
) -> None:
    store = await make_store()
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    result = await contract.crash(kit, store, port, tmp_path, count=200, dedupes=False)
    assert result["unrecorded"] > 0, result  # the kill fell between confirm and record


async def test_a_message_carries_the_attempts_trace_context(kit: RabbitKit) -> None:
    """Fails with the broker kinds left out of the attempt's trace headers."""
    await trace_carried(kit, contract.unique())
