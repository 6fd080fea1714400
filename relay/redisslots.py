"""Hash slots of a started :class:`relay.redisproc.RedisCluster`, by hand: where a tag
lives, moving slots (a tag per master, tags balanced over the masters), and the work
each master did. For tests and benchmarks, like :mod:`relay.redisproc`."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import suppress

import redis

from relay.redisproc import HOST, RedisCluster

_POLL = 0.02  # seconds between checks that the nodes agree


class SlotControl:
    """Place and move hash slots of a started ``RedisCluster``, by hand.

    The steps ``redis-cli --cluster reshard`` takes for one slot, kept apart so a test
    can hold a slot half-moved: ``begin_move`` (IMPORTING on the target, MIGRATING on
    the source), ``migrate_keys`` (MIGRATE in batches), ``finish_move`` (SETSLOT NODE on
    the target, the source, then the others, and wait until every node agrees).
    ``spread(tags)`` puts each hash tag's slot on its own node, as relay wants its queue
    shards (docs/cluster.md). Synchronous clients, one per node; ``close()`` them.
    """

    def __init__(self, cluster: RedisCluster) -> None:
        self.cluster = cluster
        self.ports = [n.port for n in cluster.nodes if n.port is not None]
        self.clients = {p: redis.Redis(HOST, p, decode_responses=True) for p in self.ports}
        self.ids = {p: c.cluster("MYID") for p, c in self.clients.items()}

    def slot(self, key: str) -> int:
        return int(self.clients[self.ports[0]].cluster("KEYSLOT", key))

    def owner(self, slot: int, seen_by: int | None = None) -> int:
        """Port of the node serving ``slot``, as node ``seen_by`` (default: the first) sees it."""
        view = self.clients[seen_by or self.ports[0]].execute_command("CLUSTER", "SLOTS")
        for start, end, master, *_ in view:
            if int(start) <= slot <= int(end):
                return int(master[1])
        raise RuntimeError(f"slot {slot} is not served")

    def keys_in_slot(self, port: int, slot: int) -> list[str]:
        return list(self.clients[port].cluster("GETKEYSINSLOT", slot, 1_000_000))

    def begin_move(self, slot: int, to: int) -> int:
        """Mark ``slot`` as moving to node ``to``; returns the source node's port."""
        src = self.owner(slot)
        self.clients[to].cluster("SETSLOT", slot, "IMPORTING", self.ids[src])
        self.clients[src].cluster("SETSLOT", slot, "MIGRATING", self.ids[to])
        return src

    def migrate_keys(self, src: int, to: int, keys: list[str], batch: int = 500) -> None:
        for i in range(0, len(keys), batch):
            self.clients[src].execute_command(
                "MIGRATE", HOST, to, "", 0, 10_000, "KEYS", *keys[i : i + batch]
            )

    def finish_move(self, slot: int, src: int, to: int) -> None:
        for port in [to, src, *(p for p in self.masters() if p not in (to, src))]:
            self.clients[port].cluster("SETSLOT", slot, "NODE", self.ids[to])
        self.wait_agreed(slot, to)

    def move_slot(self, slot: int, to: int) -> None:
        """Move ``slot`` and its keys to node ``to`` (nothing to do if it is there)."""
        src = self.owner(slot)
        if src == to:
            return
        self.begin_move(slot, to)
        self.migrate_keys(src, to, self.keys_in_slot(src, slot))
        self.finish_move(slot, src, to)

    def wait_agreed(self, slot: int, port: int, timeout: float = 5.0) -> None:
        """Until every node names ``port`` as the owner of ``slot``."""
        deadline = time.monotonic() + timeout
        while not all(self.owner(slot, seen_by=p) == port for p in self.ports):
            if time.monotonic() >= deadline:
                raise RuntimeError(f"nodes disagree on the owner of slot {slot}")
            time.sleep(_POLL)

    def spread(self, tags: Sequence[str]) -> None:
        """Move slots so the given hash tags (e.g. ``{s0}``) are served by different nodes."""
        taken: set[int] = set()
        crowded = []
        for tag in tags:
            owner = self.owner(self.slot(tag))
            if owner in taken:
                crowded.append(tag)
            taken.add(owner)
        free = [p for p in self.ports if p not in taken]
        for tag, port in zip(crowded, free, strict=False):
            self.move_slot(self.slot(tag), port)

    def masters(self) -> list[int]:
        """Ports of the nodes that are masters now (a failover changes them)."""
        alive = []
        for port, client in self.clients.items():
            with suppress(redis.RedisError):
                if client.info("replication")["role"] == "master":
                    alive.append(port)
        return alive

    def balance(self, tags: Sequence[str]) -> None:
        """Move slots so the masters serve the given hash tags evenly (``{s0}`` ...
        ``{s11}`` on 3 masters: 4 each), leaving a tag where it is while its master has
        fewer than its share."""
        masters = self.masters()
        share = -(-len(tags) // len(masters))
        count = dict.fromkeys(masters, 0)
        crowded = []
        for tag in tags:
            owner = self.owner(self.slot(tag))
            if count[owner] < share:
                count[owner] += 1
            else:
                crowded.append(tag)
        for tag in crowded:
            port = min(masters, key=lambda p: count[p])
            self.move_slot(self.slot(tag), port)
            count[port] += 1

    def work(self, prefix: str) -> dict[int, tuple[int, int]]:
        """Per master port: (keys under ``prefix``, Lua calls so far: ``EVALSHA`` and
        ``EVAL`` from ``INFO commandstats``). Lua calls count every client's."""
        out = {}
        for port in self.masters():
            client = self.clients[port]
            keys = sum(1 for _ in client.scan_iter(match=f"{prefix}:*", count=1000))
            stats = client.info("commandstats")
            calls = sum(
                int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval")
            )
            out[port] = (keys, calls)
        return out

    def close(self) -> None:
        for c in self.clients.values():
            c.close()
