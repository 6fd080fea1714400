"""relay.queue.subscription.keep_subscribed, on a scripted pub/sub (no Redis needed), and
its cancellation on a real ``redis-server``."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from relay.queue import subscription


class ScriptedPubSub:
    """Hands out its messages, then raises its error (or times out for ever)."""

    def __init__(self, events: list[str], messages: list[dict[str, Any]], error: Exception | None):
        self.events, self.messages, self.error = events, messages, error
        self.closed = False
        self.subscribed = False

    async def subscribe(self, *channels: str) -> None:
        self.events.append("subscribe " + ",".join(channels))
        self.subscribed = True

    async def get_message(self, timeout: float) -> dict[str, Any] | None:  # noqa: ASYNC109
        if self.messages:
            return self.messages.pop(0)
        if self.error is not None:
            raise self.error
        await asyncio.sleep(timeout)
        return None

    async def aclose(self) -> None:
        self.closed = True


class ScriptedStore:
    def __init__(self, events: list[str], scripts: list[ScriptedPubSub]) -> None:
        self.events, self.scripts = events, scripts

    def wake_pubsub(self, attempt: int = 0) -> ScriptedPubSub:
        self.events.append(f"connect {attempt}")
        return self.scripts[attempt]


def _scripts(events: list[str]) -> ScriptedStore:
    subscribed = {"type": "subscribe", "channel": "c", "data": 1}
    first = ScriptedPubSub(
        events, [subscribed, {"type": "message", "data": "a"}], ConnectionError("gone")
    )
    second = ScriptedPubSub(events, [subscribed, {"type": "message", "data": "b"}], None)
    return ScriptedStore(events, [first, second])


def _subscribe(store: ScriptedStore, events: list[str]) -> asyncio.Task[None]:
    return asyncio.create_task(
        subscription.keep_subscribed(
            store,  # type: ignore[arg-type]
            ["c"],
            lambda msg: events.append("message " + msg["data"]),
            on_subscribed=lambda: events.append("subscribed"),
            on_lost=lambda: events.append("lost"),
        )
    )


async def _until(events: list[str], event: str) -> None:
    async def seen() -> None:
        while event not in events:  # noqa: ASYNC110
            await asyncio.sleep(0.01)

    await asyncio.wait_for(seen(), 5.0)


async def test_reconnects_with_the_next_attempt_and_closes_what_it_leaves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(subscription, "RECONNECT_AFTER", 0.01)
    events: list[str] = []
    store = _scripts(events)
    task = _subscribe(store, events)
    await _until(events, "message b")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == [
        "connect 0",
        "subscribe c",
        "subscribed",
        "message a",
        "lost",
        "connect 1",
        "subscribe c",
        "subscribed",
        "message b",
        "lost",  # cancelled: the subscription is gone too
    ]
    assert all(p.closed for p in store.scripts)


async def test_the_loss_is_reported_before_the_back_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subscriber (the endpoint cache) must stop trusting what it has at once, not
    after the back-off: with an hour's back-off, "lost" still comes right away."""
    monkeypatch.setattr(subscription, "RECONNECT_AFTER", 3600.0)
    events: list[str] = []
    store = _scripts(events)
    task = _subscribe(store, events)
    await _until(events, "lost")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert events == ["connect 0", "subscribe c", "subscribed", "message a", "lost"]
    assert store.scripts[0].closed


async def test_a_cancel_while_subscribing_ends_the_task(make_store: Any) -> None:
    """A worker stopped within milliseconds of starting must exit (else ``relay worker``
    logs shutdown.begin and waits for ever on its wake listener).

    redis-py 8.1 swallows a cancellation that lands while it subscribes; the task then
    goes on listening. Fails with ``async for ... in pubsub.listen()`` and no look at
    ``Task.cancelling()``: some of these cancels never end."""
    store = await make_store()
    rng = random.Random(17)
    stuck = 0
    for _ in range(150):
        task = asyncio.create_task(
            subscription.keep_subscribed(store, ["a", "b"], lambda _msg: None, name="t")
        )
        await asyncio.sleep(rng.uniform(0, 0.004))
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=3 * subscription.LOOK_UP_EVERY)
        if not done:
            stuck += 1
            task.cancel()  # a second request gets through: clean up for the next round
            await asyncio.wait([task], timeout=5)
    assert stuck == 0
