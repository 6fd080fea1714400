"""The key layout has one source, ``relay/queue/keys.py``, and everything is held to it.

* static: no Lua script names a key (``tests/helpers/lua_keys.py`` reads every redis.call: each
  key is ``KEYS[...]`` or an ARGV prefix from a ``ShardKeys.*_prefix`` builder plus an
  id), none counts its items from ``#KEYS``/``#ARGV``, and every script has exactly one
  typed caller in ``relay/queue/`` (the header names it);
* static: the keys.py docstring table lists exactly the keys its builders make, and the
  docs' key layout (docs/reference/redis-keys.md) lists exactly the docstring's;
* dynamic: a whole lifecycle runs through the Store on a private ``redis-server`` while a
  MONITOR connection records every command, from clients and from inside scripts; for
  each, ``COMMAND GETKEYS`` names its keys, and every key (and pub/sub channel) must be
  one a keys.py builder makes; every builder and every script must have been used.

What each catches, on a copy of the tree: with ``"dlv:"`` put into claim.lua
(``dlv_prefix .. "dlv:" .. id``) the static test names the literal and the
HMGET/HINCRBY/HSET keys that do not come from KEYS/ARGV, and the dynamic one the key
``...:{s0}:dlv:dlv:dlv_...`` that the script's HMGET touches; with hold's held index
swapped for ``sk.base + "parked"`` the dynamic test names ``...:{s0}:parked``; with the
docs' ``wake`` row dropped, or keys.py's ``held`` row, the table tests name it; with
a second ``scripts.claim`` call in relay/queue/base.py the one-caller test names both.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import inspect
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from relay.domain import ids, signing
from relay.domain.schema import endpoint_record
from relay.queue import keys as keys_module
from relay.queue.keys import EndpointKeys, Keys, ShardKeys, guard_key
from relay.queue.scripts import LUA_DIR, NAMES, PRELUDE, Scripts
from relay.queue.store import Outcome, Store, connect
from relay.redisproc import RedisServer
from tests.helpers import lua_keys, make_settings

ROOT = Path(__file__).resolve().parents[2]
S = "SENTINEL"  # stands for an id, app, key... in a builder's output


# ---------------------------------------------------------------------- the builders


def builders(keys: Keys) -> Iterator[tuple[str, str, str]]:
    """Every key builder of keys.py: (name, kind, key with S for each argument).

    Found by introspection, so a new builder is checked without editing this test.
    ``kind`` is "key", "channel" (pub/sub) or "prefix" (handed to scripts, not a key).
    """
    channels = {"wake", "endpoints_changed"}

    def call(obj: Any, name: str) -> Any:
        attr = getattr(obj, name)
        if not callable(attr):
            return attr
        return attr(*[S for _ in inspect.signature(attr).parameters])

    for sk in keys.all_shards():
        fields = {"shard", "base"}
        for name in dir(ShardKeys):
            if name.startswith("_") or name in fields:
                continue
            value = call(sk, name)
            kind = (
                "prefix" if name.endswith("_prefix") else "channel" if name in channels else "key"
            )
            yield f"ShardKeys.{name}", kind, value
        yield "guard_key(shard)", "key", guard_key(sk.due)
    for name in dir(Keys):
        if name.startswith("_") or name in {"prefix", "shards", "layout", "shard", "all_shards"}:
            continue
        value = call(keys, name)
        if isinstance(value, EndpointKeys):
            for f in dataclasses.fields(value):
                yield f"Keys.{name}.{f.name}", "key", getattr(value, f.name)
            yield "guard_key(endpoint)", "key", guard_key(value.breaker)
        else:
            yield f"Keys.{name}", "channel" if name in channels else "key", value
    yield "guard_key(cfg)", "key", guard_key(keys.endpoints)
    yield "guard_key(auth)", "key", guard_key(keys.api_keys)


def pattern(key: str) -> re.Pattern[str]:
    """A builder's output (S for each argument) as a regex for the keys of the lifecycle
    below, whose ids, apps and idempotency keys hold no ``:`` (so ``...:dlv:dlv:x`` is
    not taken for a delivery key)."""
    return re.compile(re.escape(key).replace(S, "[^:{}]+"))


def test_prefix_builders_are_the_keys_of_ids_without_the_id() -> None:
    sk = Keys("relay", 2).shard(1)
    prefixes = [n for n in dir(ShardKeys) if n.endswith("_prefix")]
    assert sorted(prefixes) == sorted(
        [
            "delivery_prefix",
            "log_prefix",
            "event_prefix",
            "endpoint_index_prefix",
            "held_prefix",
            "lane_prefix",
            "dead_tally_prefix",
        ]
    )
    for name in prefixes:
        per_id = getattr(sk, name.removesuffix("_prefix"))
        assert per_id("dlv_x") == getattr(sk, name) + "dlv_x", name


# ---------------------------------------------------------------------- the tables


def docstring_table() -> dict[str, str]:
    """keys.py's table: key -> type."""
    doc = keys_module.__doc__ or ""
    rows = re.findall(r"^``(\S+)``\s+(\S+)\s", doc, re.M)
    return dict(rows)


def docs_table() -> dict[str, str]:
    text = (ROOT / "docs" / "reference" / "redis-keys.md").read_text()
    section = text.split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([^`]+)` \| ([^|]+?) \|", section, re.M))


def _type(name: str) -> str:
    name = name.strip().lower().replace("/", "").replace(" ", "")
    return {"neverwritten": "none"}.get(name, name)


def row_pattern(row: str) -> re.Pattern[str]:
    """A table row (``relay:v3:{ep_X}:breaker``, ``...:dlv:<delivery_id>``) as a regex."""
    text = re.escape(row)
    for tag in (r"\{ep_X\}", r"\{tag\}"):
        text = text.replace(tag, r"\{[^{}]+\}")
    return re.compile(re.sub(r"<[^>]+>", ".+", text))


def test_docstring_table_lists_exactly_the_keys_the_builders_make() -> None:
    rows = {row: row_pattern(row) for row in docstring_table()}
    assert len(rows) >= 20
    made = {v.replace(S, "x") for _, kind, v in builders(Keys("relay", 1)) if kind != "prefix"}
    listed: dict[str, list[str]] = {row: [] for row in rows}
    for key in sorted(made):
        found = [row for row, p in rows.items() if p.fullmatch(key)]
        assert len(found) == 1, f"{key}: rows {found} (keys.py's table must list it once)"
        listed[found[0]].append(key)
    assert [row for row, keys in listed.items() if not keys] == [], "rows no builder makes"


def test_the_docs_key_table_is_the_docstring_table() -> None:
    doc = {k: _type(v) for k, v in docstring_table().items()}
    docs = {k: _type(v) for k, v in docs_table().items()}
    assert sorted(set(doc) - set(docs)) == [], "in keys.py, missing from the docs"
    assert sorted(set(docs) - set(doc)) == [], "in the docs, not in keys.py"
    assert docs == doc  # the types too


# ---------------------------------------------------------------------- the scripts


def lua_sources() -> list[tuple[str, str]]:
    """(name, source) of every script, without the prelude in front of it."""
    return [(p.stem, p.read_text()) for p in sorted(LUA_DIR.glob("*.lua")) if p.stem != PRELUDE]


def prelude() -> str:
    return (LUA_DIR / f"{PRELUDE}.lua").read_text()


def test_every_lua_file_is_a_registered_script_or_the_prelude() -> None:
    assert sorted(n for n, _ in lua_sources()) == sorted(NAMES)
    assert (LUA_DIR / f"{PRELUDE}.lua").is_file()


def test_no_script_names_a_key_or_counts_its_keys() -> None:
    assert lua_keys.problems(lua_sources(), prelude()) == []


def test_the_rule_follows_keys_into_the_prelude() -> None:
    """A prelude helper's key is whatever its callers pass: a literal passed from a script,
    or a key the prelude makes itself, is named."""
    record = dict(lua_sources())["record"]
    literal = record.replace(
        "tally_dead(tally_index, tally_prefix, ep, id, now_s)",
        'tally_dead(tally_index, "tally:", ep, id, now_s)',
    )
    assert literal != record
    found = lua_keys.problems([("record", literal)], prelude())
    assert any("record.lua:" in p and 'literal "tally:"' in p for p in found), found
    assert any("prelude.lua:" in p and "HINCRBY key 'tally'" in p for p in found), found
    counted = record.replace("zrem_all(KEYS[2], done)", "zrem_all(ARGV[1], done)")
    assert any(
        "prelude.lua:" in p and "ZREM key 'zset'" in p
        for p in lua_keys.problems([("record", counted)], prelude())
    )
    named = prelude().replace(
        "local tally = tally_prefix .. endpoint", 'local tally = "t:" .. endpoint'
    )
    assert any("prelude.lua:" in p for p in lua_keys.problems(lua_sources(), named))


def test_the_rule_catches_a_key_fragment() -> None:
    """The static rule, tried on what the scripts were: each of these is named."""
    claim = dict(lua_sources())["claim"]
    broken = claim.replace("local dkey = dlv_prefix .. id", 'local dkey = ARGV[1] .. "dlv:" .. id')
    assert broken != claim
    found = lua_keys.problems([("claim", broken)], prelude())
    assert any('literal "dlv:"' in p for p in found)
    assert any("HMGET key 'dkey'" in p for p in found)
    counted = claim.replace("local n = 0", "local n = #KEYS - 3")
    assert any("#KEYS" in p for p in lua_keys.problems([("claim", counted)], prelude()))


def script_callers() -> dict[str, list[tuple[str, str]]]:
    """Script name -> every (file, enclosing function) calling ``<x>.scripts.<name>(...)``
    or ``<x>.scripts.<name>.many(...)``."""
    found: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((ROOT / "relay").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "many"
                ):
                    node = ast.Call(node.func.value, [], [])  # its script's name
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Attribute)
                    and node.func.value.attr == "scripts"
                    and not hasattr(Scripts, node.func.attr)  # load(), not a script
                ):
                    rel = str(path.relative_to(ROOT))
                    found.setdefault(node.func.attr, []).append((rel, fn.name))
    return found


def test_every_script_has_exactly_one_typed_caller_in_the_queue_layer() -> None:
    callers = script_callers()
    assert sorted(callers) == sorted(NAMES), "a script nobody calls, or a call of no script"
    sources = dict(lua_sources())
    for name in NAMES:
        assert len(callers[name]) == 1, (name, callers[name])
        ((path, function),) = callers[name]
        assert path.startswith("relay/queue/"), (name, path)
        named = re.search(r"Called by Store\.(\w+)\s*(?:--\s*)?\(([\w/.]+)\)", sources[name])
        assert named is not None, f"{name}.lua: its header names no caller"
        assert (named.group(1), named.group(2)) == (function, path), name


# ---------------------------------------------------------------------- MONITOR


def _unrepr(raw: bytes) -> bytes:
    """Undo Redis's sdscatrepr quoting of one MONITOR argument."""
    out, i = bytearray(), 0
    simple = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("a"): b"\a", ord("b"): b"\b"}
    while i < len(raw):
        c = raw[i]
        if c == 0x5C:  # backslash
            nxt = raw[i + 1]
            if nxt == ord("x"):
                out += bytes([int(raw[i + 2 : i + 4], 16)])
                i += 4
                continue
            out += simple.get(nxt, bytes([nxt]))
            i += 2
            continue
        out.append(c)
        i += 1
    return bytes(out)


ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
LINE = re.compile(rb"^\+[\d.]+ \[\d+ ([^\]]+)\] (.*)$")


class Monitor:
    """Every command Redis runs, as argument lists, from clients and from scripts."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.commands: list[tuple[str, list[bytes]]] = []  # (source, args)
        self.marker = f"keys-end-{uuid.uuid4().hex}".encode()

    async def __aenter__(self) -> Monitor:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(b"MONITOR\r\n")
        await self.writer.drain()
        assert await self.reader.readline() == b"+OK\r\n"
        return self

    async def finish(self, store: Store) -> None:
        await store.redis.echo(self.marker.decode())
        while True:
            line = (await asyncio.wait_for(self.reader.readline(), 30)).rstrip(b"\r\n")
            m = LINE.match(line)
            assert m is not None, line
            args = [_unrepr(a) for a in ARG.findall(m.group(2))]
            if self.marker in args:
                return
            self.commands.append((m.group(1).decode(), args))

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()
        await self.writer.wait_closed()


async def lifecycle(store: Store) -> None:
    """Every script through its Store method, and the reads beside them."""
    sk = store.keys.shard(0)
    shop = endpoint_record(url="http://127.0.0.1:9/a", app="shop")
    shop.update(rate_limit=100, max_in_flight=5)
    other = endpoint_record(url="http://127.0.0.1:9/b", app="default")
    await store.put_endpoint(shop)  # endpoint_put
    await store.put_endpoint(other)
    assert await store.update_endpoint(other["id"], lambda e: {**e, "app": "moved"})  # CAS
    assert [e["id"] for e in await store.list_endpoints(app="shop")] == [shop["id"]]
    await store.list_endpoints()
    await store.get_endpoints([shop["id"], other["id"]])
    assert await store.endpoint_count_and_ids(10) == (2, sorted([shop["id"], other["id"]]))

    async def publish(n: int, idem: str | None = None, copy: bool = False) -> tuple[str, list[str]]:
        now = int(time.time() * 1000)
        event_id = ids.new_id("evt", 0, now)
        dlv = [ids.new_id("dlv", 0, now) for _ in range(n)]
        await store.publish(
            shard=0,
            event_id=event_id,
            event_type="order.paid",
            app="shop",
            body=signing.build_body(event_id, "order.paid", now, b'{"n":1}'),
            created_ms=now,
            deliveries=[(d, shop["id"]) for d in dlv],
            idempotency=(idem, b'{"first":1}') if idem else None,
            copy=copy,
        )
        return event_id, dlv

    event_id, _ = await publish(6, idem="order-1")
    await publish(6, idem="order-1")  # taken: nothing written
    await publish(0)  # no delivery: a TTL, not indexed
    # a two-step publish: the key's guard (reserve), then the event with its shard's copy
    assert await store.reserve(0, "shop", "order-2", '{"first":2}') is None
    assert await store.reserve(0, "shop", "order-2", '{"other":2}') == '{"first":2}'
    await store.replace_idempotency(0, "shop", "order-2", '{"first":2}')
    await publish(0, idem="order-2", copy=True)
    assert await store.placement_since() == 0  # the first endpoint put marked it

    def outcome(c: Any, kind: str, code: int | None = 200) -> Outcome:
        entry = orjson.dumps({"attempt": c.attempts, "at": 1, "status_code": code})
        return Outcome(c.id, c.token, kind, 0, code, "", entry)

    claimed = (
        await store.claim(sk, limit=10, lease_ms=60_000, token_prefix="k1", worker="w")
    ).items
    assert len(claimed) == 6
    a, b, c, d, e, f = claimed
    admitted = await store.admit(
        shop["id"],
        [x.token for x in claimed],
        rate=100,
        burst=10,
        max_in_flight=5,
        slot_hold_ms=5000,
        spread_ms=10,
    )
    assert len(admitted.waits) == 6
    await store.extend(sk, [(a.id, a.token), (b.id, b.token)], 60_000)
    assert await store.record(
        sk,
        [
            outcome(a, "succeeded"),
            outcome(b, "dead", 410),
            outcome(c, "retry", 500),
            outcome(d, "defer"),
        ],
    ) == [1, 1, 1, 1]
    await store.settle(
        shop["id"],
        [(a.token, "1"), (b.token, "0"), (c.token, "-")],
        threshold=5,
        cooldown_ms=1000,
        cooldown_max_ms=4000,
    )
    assert await store.release(sk, [(e.id, e.token)]) == [1]
    assert await store.hold(sk, shop["id"], [(f.id, f.token)]) == 1
    assert (await store.list_deliveries(status="held"))[0][0]["id"] == f.id
    assert await store.resume(shop["id"]) == 1
    again = await store.claim(sk, limit=10, lease_ms=1, token_prefix="k2", worker="w")
    assert len(again.items) == 4  # c, d, e, f: due now, with a lease that runs out at once
    await asyncio.sleep(0.02)
    back, dead, _ = await store.reclaim(sk)
    assert back + dead == 4
    assert await store.replay([a.id, b.id, c.id]) == {a.id: "ok", b.id: "ok", c.id: "pending"}
    # reconciliation replay jobs: the job record and the index walk
    assert (await store.replay_job("create", "rpl_k", fields={"params": "{}"})).ok
    assert (await store.replay_job("lease", "rpl_k", owner="o", lease_ms=5000)).ok
    saved = await store.replay_job("save", "rpl_k", owner="o", lease_ms=5000, fields={"m": 1})
    assert saved.ok
    assert (await store.replay_job("cancel", "rpl_k")).ok
    assert (await store.get_replay_job("rpl_k") or {})["state"] == "cancelled"
    await store.list_replay_jobs()
    await store.running_replay_jobs()
    rows, _ = await store.replay_scan(
        sk, endpoint_id=None, since=0, until=10**15, cursor=None, limit=3
    )
    for cursor in ((rows[-1].created, rows[-1].id), (rows[0].created, "dlv_0")):  # 2nd: gone
        await store.replay_scan(
            sk, endpoint_id=shop["id"], since=0, until=10**15, cursor=cursor, limit=3
        )
    assert (await store.delivery_statuses([a.id]))[a.id] == "pending"
    # finished ones again, for retention to take
    done = (await store.claim(sk, limit=10, lease_ms=60_000, token_prefix="k3", worker="w")).items
    await store.record(
        sk,
        [outcome(x, "succeeded") for x in done[:3]] + [outcome(x, "dead", 410) for x in done[3:]],
    )

    # reads
    await store.get_delivery(a.id)
    await store.get_event(event_id)
    await store.event_body_length(event_id)
    for status in ("pending", "queued", "held", "delivering", "succeeded", "dead", None):
        await store.list_deliveries(status=status)
    await store.list_deliveries(endpoint_id=shop["id"])
    await store.list_deliveries(event_id=event_id, event_type="order.*")
    await store.stats()
    await store.count_dead()
    await store.count_succeeded(int(time.time() * 1000))
    now = await store.now_ms()
    await store.minute_series(now, 3)
    await store.endpoint_health([shop["id"]], sample=10, processing_cap=10)
    await store.breaker_states([shop["id"]])
    await store.reset_failing(shop["id"])
    assert await store.ping()
    await store.check_writable()  # /readyz

    # API keys and portal sessions
    assert await store.create_api_key(
        key_id="key_k", app="shop", scopes=["read"], name="n", token_hash="h1"
    )
    assert (await store.authenticate("h1", 10, 5)).state == "ok"
    assert (await store.authenticate("h0", 10, 5)).state == "unknown"
    await store.create_portal_session(
        session_id="prt_k", app="shop", scopes=["read"], token_hash="h2", ttl_ms=60_000
    )  # the operator's
    await store.create_portal_session(
        session_id="prt_j", app="shop", scopes=["read"], token_hash="h3", ttl_ms=60_000,
        opened_by="key_k",
    )  # fmt: skip
    assert [k["id"] for k in await store.list_api_keys("shop")] == ["key_k"]
    assert await store.get_api_key("key_k")
    assert await store.app_of("endpoint", shop["id"]) == "shop"
    assert await store.app_of("event", event_id) == "shop"
    assert await store.app_of("delivery", a.id) == "shop"
    assert await store.revoke_api_key("key_k")
    assert (await store.authenticate("h3", 10, 5)).state == "unknown"  # ended with its key
    assert (await store.authenticate("h2", 10, 5)).state == "ok"
    assert await store.cursor_key() == await store.cursor_key(fresh=True)  # sealing cursors

    assert await store.archive_lease(sk, "tok", 30_000)  # the archive mover's, then released
    assert await store.archive_drop(sk, "tok", 0, []) == (0, 0)
    assert await store.archive_drop(sk, "tok", 0, []) is None  # released: not held any more
    held = (
        await store.finished_records(sk, [f.id for f in await store.finished_before(sk, 10**15, 1)])
    )[0]
    assert not await store.archive_restore(held, 0, None)  # Redis holds it: nothing written

    swept = await store.expire_shard(sk, succeeded_before=10**15, dead_before=10**15, limit=100)
    assert swept.deliveries == 6 and swept.events == 1  # the event went with its last one

    # an ordered lane: one lane for the endpoint (its id: no ":"), blocking
    now = int(time.time() * 1000)
    lane_event = ids.new_id("evt", 0, now)
    lane_ids = [ids.new_id("dlv", 0, now) for _ in range(3)]
    await store.publish(
        shard=0,
        event_id=lane_event,
        event_type="order.paid",
        app="shop",
        body=signing.build_body(lane_event, "order.paid", now, b'{"n":1}'),
        created_ms=now,
        deliveries=[(d, shop["id"]) for d in lane_ids],
        lanes=[(shop["id"], "block")] * 3,
    )
    head = (await store.claim(sk, limit=10, lease_ms=60_000, token_prefix="k4", worker="w")).items
    assert [x.id for x in head] == lane_ids[:1]
    assert await store.record(sk, [outcome(head[0], "dead", 410)]) == [1]
    assert await store.blocked_lanes(sk) == [(shop["id"], lane_ids[0])]
    assert (await store.get_delivery(lane_ids[1]))["status"] == "queued"  # type: ignore[index]
    await store.list_deliveries(status="queued")
    assert await store.replay([lane_ids[0]]) == {lane_ids[0]: "ok"}
    head = (await store.claim(sk, limit=10, lease_ms=1, token_prefix="k5", worker="w")).items
    assert [x.id for x in head] == lane_ids[:1]
    await asyncio.sleep(0.02)
    await store.reclaim(sk)  # its lease ran out: back to due, still the head
    head = (await store.claim(sk, limit=10, lease_ms=60_000, token_prefix="k6", worker="w")).items
    assert await store.record(sk, [outcome(head[0], "dead", 410)]) == [1]
    assert await store.discard([lane_ids[0]]) == {lane_ids[0]: "ok"}
    head = (await store.claim(sk, limit=10, lease_ms=60_000, token_prefix="k7", worker="w")).items
    assert [x.id for x in head] == lane_ids[1:2]
    assert await store.record(sk, [outcome(head[0], "succeeded")]) == [1]
    # operational events: the dead letters above were tallied; cut, drain
    assert await store.ops_cut(sk, 0) >= 1
    entries = await store.ops_peek(sk.ops, 10)
    assert entries and all('"delivery.dead"' in e for e in entries)
    await store.ops_remove(sk.ops, entries[0])
    await store.ops_lengths([sk.ops, store.keys.ops, store.keys.endpoint_state(shop["id"]).ops])
    assert await store.delete_endpoint(other)  # endpoint_delete
    await store.delete_endpoint_state(shop["id"])

    # the event type catalog
    paid = {"name": "order.paid", "description": "", "schema": None, "deprecated": False}
    assert await store.put_event_type(paid)  # event_type_put, create
    raw = await store.get_event_type_raw("order.paid")
    assert await store.put_event_type({**paid, "deprecated": True}, expected=raw)  # CAS
    assert (await store.get_event_type("order.paid") or {})["deprecated"]
    assert await store.event_type_names() == ["order.paid"]
    await store.list_event_types()
    assert await store.delete_event_type("order.paid")  # event_type_delete

    # the applications and idempotent requests of the Svix-compatible API
    shop_app = {"app": "shop", "uid": "shop", "name": "Shop", "created_at": 1, "updated_at": 1}
    assert await store.put_app(shop_app)  # app_put, create
    raw_app = await store.get_app_raw("shop")
    assert await store.put_app({**shop_app, "name": "S"}, expected=raw_app)  # CAS
    assert [a["name"] for a in await store.list_apps()] == ["S"]
    assert await store.delete_app("shop")
    assert await store.claim_request("admin", "k1", "h") is None
    await store.answer_request("admin", "k1", "h", 201, b"{}")
    assert (await store.claim_request("admin", "k1", "h") or {})["status"] == 201
    await store.drop_request("admin", "k1")


@pytest.mark.realredis
async def test_every_key_the_scripts_touch_is_built_by_keys_py(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    settings = make_settings(redis_url=server.url, key_prefix="k" + uuid.uuid4().hex[:8])
    store = Store(connect(settings), settings)
    try:
        await store.start()
        broke: Exception | None = None  # a lifecycle step that failed: after the key check
        async with Monitor(server.port or 0) as monitor:
            try:
                await lifecycle(store)
            except Exception as exc:
                broke = exc
            await monitor.finish(store)
        shas = {store.scripts._calls[n].sha: n for n in NAMES}
        ran = set()
        keys_seen: list[tuple[str, str]] = []  # (key, where it came from)
        channels: list[str] = []
        for source, args in monitor.commands:
            name = args[0].decode().upper()
            if name == "EVALSHA":
                ran.add(shas[args[1].decode()])
            if name == "PUBLISH":
                channels.append(args[1].decode())
            got = await _getkeys(store, args)
            where = f"{source}: {b' '.join(args)[:120]!r}"
            keys_seen += [(k, where) for k in got]
    finally:
        await store.close()
        server.stop()

    patterns = [(n, kind, pattern(v)) for n, kind, v in builders(store.keys) if kind != "prefix"]
    used: set[str] = set()

    def owner(value: str, kinds: set[str]) -> list[str]:
        return [n for n, kind, p in patterns if kind in kinds and p.fullmatch(value)]

    strays = []
    for key, where in keys_seen:
        found = owner(key, {"key"})
        if not found:
            strays.append((key, where))
        used.update(found)
    for channel in channels:
        found = owner(channel, {"channel"})
        if not found:
            strays.append((channel, "PUBLISH"))
        used.update(found)
    assert strays == [], "keys no keys.py builder makes"
    if broke is not None:
        raise broke
    assert sum(src == "lua" for src, _ in monitor.commands) > 100  # MONITOR shows scripts' own
    assert ran == set(NAMES), f"scripts not run: {set(NAMES) - ran}"
    unused = sorted({n for n, _, _ in patterns} - used)
    assert unused == [], "builders the lifecycle never used"


async def _getkeys(store: Store, args: list[bytes]) -> list[str]:
    """``COMMAND GETKEYS`` of one command; [] for a command without keys."""
    from redis.exceptions import ResponseError

    if len(args) == 1:  # PING, TIME, HELLO, EXEC...: nothing to ask about, and no keys
        return []
    try:
        got = await store.redis.command_getkeys(*args)
    except ResponseError as exc:
        if "no key arguments" in str(exc):
            return []
        if args[0].upper() == b"CLIENT":  # CLIENT SETINFO: unknown to GETKEYS before 7.2
            return []
        raise
    return [k.decode() if isinstance(k, bytes) else str(k) for k in got]
