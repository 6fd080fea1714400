"""A delivery's first request, when it succeeded, is kept in its hash ("a1") instead of
an attempt-log list of its own; readers show the same log either way.

On fakeredis and a real Redis (the ``st`` fixture of tests/helpers/store.py); the encoding check
needs a real server. Fails with record.lua pushing every entry to the list: the log key
exists and ``a1`` does not.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest

from relay.delivery.attempt import outcome as make_outcome
from relay.domain import attemptlog, eventrecord
from relay.queue.store import Store
from tests.helpers.store import add_endpoint, claim, outcome, publish

pytestmark = pytest.mark.realredis


def _ok(c: Any, detail: str = "", worker: str = "w1") -> Any:
    return make_outcome(
        c, "succeeded", 0, 200, "", detail, worker=worker, at_ms=1_700_000_000_123, duration=0.0123
    )


def _entry(detail: str = "", worker: str = "w1") -> Any:
    """The log entry the worker would make of ``_ok``'s attempt: an outcome with a short
    form goes without it, and the script makes it from ``a1``."""
    return attemptlog.fields(1, 1_700_000_000_123, 12.3, 200, "", detail, "succeeded", worker)


async def _one_sent(st: Store, detail: str = "", worker: str = "w1") -> tuple[Any, Any]:
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    c = (await claim(st)).items[0]
    done = _ok(c, detail, worker)
    assert await st.record(st.keys.shard(0), [done]) == [1]
    return c, done


async def test_a_first_request_that_succeeded_stays_in_the_hash(st: Store) -> None:
    c, done = await _one_sent(st, detail="ok")
    sk = st.keys.shard(0)
    assert not await st.redis.exists(sk.log(c.id))
    raw = await st.redis.hgetall(sk.delivery(c.id))
    assert raw["a1"] == done.inline and raw["log_n"] == "1"
    rec = await st.get_delivery(c.id)
    assert rec is not None and "a1" not in rec
    # the same entry the list would have held, field for field
    assert done.entry == b""  # went as its short form only
    assert rec["attempt_log"] == [{"n": 1, **_entry("ok")}]


async def test_its_hash_keeps_only_what_a1_and_the_indexes_do_not_say(st: Store) -> None:
    """Layout v3: a delivery sent once with success keeps endpoint, status, attempts,
    updated_at, claim (the token whose outcome is written), worker, a1 and log_n; the API
    still shows when it was sent, its status code, its worker and when it finished (a1 and
    its succeeded score), and its app and type (its event's header)."""
    c, _ = await _one_sent(st, worker="w7")
    sk = st.keys.shard(0)
    raw = await st.redis.hgetall(sk.delivery(c.id))
    assert set(raw) == {
        "endpoint_id",
        "status",
        "attempts",
        "updated_at",
        "claim",
        "worker",
        "a1",
        "log_n",
    }
    rec = await st.get_delivery(c.id, with_log=False)
    assert rec is not None
    assert (rec["last_status_code"], rec["last_attempt_at"], rec["worker"]) == (
        200,
        1_700_000_000_123,
        "w7",
    )
    finished = await st.redis.zscore(sk.succeeded, c.id)
    assert rec["finished_at"] == finished == int(raw["updated_at"])
    assert rec["id"] == c.id and rec["event_id"] == c.event_id and rec["last_error"] is None
    header = eventrecord.header_of(await st.redis.get(sk.event(c.event_id)))
    assert (rec["app"], rec["type"]) == (header["app"], header["type"])


async def test_later_requests_go_to_the_list_after_it(st: Store) -> None:
    c, _ = await _one_sent(st)
    sk = st.keys.shard(0)
    assert await st.replay([c.id]) == {c.id: "ok"}
    again = (await claim(st)).items[0]
    assert await st.record(sk, [_ok(again)]) == [1]
    assert await st.redis.llen(sk.log(c.id)) == 1  # the replayed request: number 2
    # sent as its short form alone: its status code is read from a1 (record.lua code_of;
    # fails with code_of answering "")
    raw = await st.redis.hgetall(sk.delivery(c.id))
    assert (raw["last_status_code"], raw["status"]) == ("200", "succeeded")
    rec = await st.get_delivery(c.id)
    assert rec is not None and [e["n"] for e in rec["attempt_log"]] == [1, 2]


@pytest.mark.parametrize("detail", ["", "accepted", 'say "hi" / \\ é\ttab'])
async def test_an_entry_sent_as_its_short_form_is_logged_whole(st: Store, detail: str) -> None:
    """An outcome with a short form goes to Redis without its entry; a request that is
    not its delivery's first in the log (a replay's, a fenced one's) gets the entry the
    script makes from the short form: the worker's, field for field. Fails with the
    script's entry_of leaving out the detail."""
    c, _ = await _one_sent(st)
    sk = st.keys.shard(0)
    assert await st.replay([c.id]) == {c.id: "ok"}
    again = (await claim(st)).items[0]
    done = _ok(again, detail)
    assert done.inline and again.attempts == 1
    assert await st.record(sk, [done]) == [1]
    late = dataclasses.replace(done, token="c:stale:1")
    assert await st.record(sk, [late]) == [0]
    rec = await st.get_delivery(c.id)
    assert rec is not None
    whole = _entry(detail)
    assert rec["attempt_log"][1:] == [{"n": 2, **whole}, {"n": 3, "fenced": True, **whole}]


@pytest.mark.parametrize(("detail", "worker"), [("x" * 40, "w1"), ("", "pod name with spaces")])
async def test_what_has_no_short_form_goes_to_the_list(st: Store, detail: str, worker: str) -> None:
    c, done = await _one_sent(st, detail=detail, worker=worker)
    assert done.inline == ""
    sk = st.keys.shard(0)
    assert "a1" not in await st.redis.hgetall(sk.delivery(c.id))
    rec = await st.get_delivery(c.id)
    assert rec is not None and rec["attempt_log"] == [{"n": 1, **orjson.loads(done.entry)}]


async def test_the_hash_stays_a_listpack(make_store: Any) -> None:
    store = await make_store()
    c, _ = await _one_sent(store)
    assert await store.redis.object("encoding", store.keys.shard(0).delivery(c.id)) == "listpack"


def test_inline_round_trip_and_limits() -> None:
    text = attemptlog.inline(1, 5, 13.64, 204, "vm-1", "accepted: yes")
    assert attemptlog.expand(text) == {
        "n": 1,
        "attempt": 1,
        "at": 5,
        "duration_ms": 13.64,
        "status_code": 204,
        "error": None,
        "detail": "accepted: yes",
        "outcome": "succeeded",
        "worker": "vm-1",
    }
    assert attemptlog.inline(2, 5, 1.0, 200, "w", "") == ""  # not the first attempt
    assert attemptlog.inline(1, 5, 1.0, 200, "two words", "") == ""  # a worker with a space
    assert attemptlog.inline(1, 5, 1.0, 200, "w", "é" * 40) == ""  # bytes, not characters


def test_a_request_without_a_status_code_has_a_short_form_too() -> None:
    """A broker's answer has no status code: its a1 says "-", read back as None."""
    text = attemptlog.inline(1, 5, 0.8, None, "vm-1", "stream orders seq 7")
    assert text == "5 0.8 - vm-1 stream orders seq 7"
    assert attemptlog.expand(text)["status_code"] is None
    assert attemptlog.expand(text)["detail"] == "stream orders seq 7"


async def test_a_broker_success_stays_in_the_hash_and_reads_without_a_status(st: Store) -> None:
    """A first publish a broker confirmed (no status code) is kept as a1, as an HTTP
    success is; the log shows ``status_code`` null, from the hash and from the entry
    record.lua makes of it for a late (fenced) write. Fails with the short form refused
    to a request without a status code: the log key exists and a1 does not."""
    ep = await add_endpoint(st)
    await publish(st, [ep["id"]])
    c = (await claim(st)).items[0]
    done = make_outcome(
        c, "succeeded", 0, None, "", "stream orders seq 7", worker="w1", at_ms=9, duration=0.002
    )
    assert done.inline and done.entry == b""
    sk = st.keys.shard(0)
    assert await st.record(sk, [done]) == [1]
    assert not await st.redis.exists(sk.log(c.id))
    expected = {
        "n": 1,
        **attemptlog.fields(1, 9, 2.0, None, "", "stream orders seq 7", "succeeded", "w1"),
    }
    rec = await st.get_delivery(c.id)
    assert rec is not None and rec["attempt_log"] == [expected]
    assert rec["last_status_code"] is None and rec["status"] == "succeeded"
    # the same outcome under a claim token that is no longer the delivery's: logged fenced
    late = dataclasses.replace(done, token="c:old:1")
    await st.redis.hset(sk.delivery(c.id), "status", "delivering")
    assert await st.record(sk, [late]) == [0]
    fenced = orjson.loads((await st.redis.lrange(sk.log(c.id), 0, -1))[0])
    assert fenced["status_code"] is None and fenced["fenced"] is True


async def test_short_and_full_outcomes_of_one_batch_answer_in_its_order(st: Store) -> None:
    """A first request that succeeded goes to record.lua as its short form alone, after
    the full items, and the replies are put back in the batch's order. Fails with the
    replies taken in the script's order ([0, 1, 1]: the fenced full item first)."""
    ep = await add_endpoint(st)
    for _ in range(3):
        await publish(st, [ep["id"]])
    first, second, third = (await claim(st)).items
    sk = st.keys.shard(0)
    stale = dataclasses.replace(outcome(second, "retry", 0, 500), token="c:old:1")
    batch = [_ok(first, "ok"), stale, _ok(third)]
    assert batch[0].inline and batch[2].inline and not batch[1].inline
    assert await st.record(sk, batch) == [1, 0, 1]
    for c, status in ((first, "succeeded"), (second, "delivering"), (third, "succeeded")):
        rec = await st.get_delivery(c.id)
        assert rec is not None and rec["status"] == status, (c.id, rec)
    one = await st.get_delivery(first.id)
    assert one is not None and one["attempt_log"] == [{"n": 1, **_entry("ok")}]
    fenced = await st.get_delivery(second.id)
    assert fenced is not None and fenced["attempt_log"][0]["fenced"] is True
    # a retried write of the short ones (its reply lost) finds them written: 1, no change
    before = await st.redis.hgetall(sk.delivery(first.id))
    assert await st.record(sk, [batch[2], batch[0]]) == [1, 1]
    assert await st.redis.hgetall(sk.delivery(first.id)) == before
