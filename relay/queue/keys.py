"""Every Redis key relay writes, built in one place.

Layout (prefix ``relay`` by default, ``v1`` is the layout version). Each queue shard
lives under its own hash tag ``{sN}``, so every script touches one hash slot and the
same code runs on a single Redis and on Redis Cluster. Endpoint configuration lives
under the tag ``{cfg}``; each endpoint's shared health and pacing state (breaker, rate
limit, in-flight slots) under its own tag ``{ep_X}``, settled by one script for all
workers together.

=========================================  ======  =============================================
key                                        type    holds
=========================================  ======  =============================================
``relay:v1:{s0}:due``                      zset    pending delivery ids, score = next attempt (ms)
``relay:v1:{s0}:processing``               zset    claimed delivery ids, score = lease expiry (ms)
``relay:v1:{s0}:succeeded``                zset    succeeded delivery ids, score = finish time
``relay:v1:{s0}:dead``                     zset    dead delivery ids, score = time of death
``relay:v1:{s0}:deliveries``               zset    every delivery id, score = created (ms)
``relay:v1:{s0}:events``                   zset    events with deliveries, score = created (ms)
``relay:v1:{s0}:ep:<endpoint_id>``         zset    that endpoint's delivery ids, score = created
``relay:v1:{s0}:dlv:<delivery_id>``        hash    the delivery record (status, attempts, claim)
``relay:v1:{s0}:log:<delivery_id>``        list    attempt log, one JSON entry per request
``relay:v1:{s0}:evt:<event_id>``           hash    event: type, app, body (bytes sent), live count
``relay:v1:{s0}:idem:<app>:<key>``         string  idempotency record: body hash + first answer
``relay:v1:{s0}:stats``                    hash    shard counters (reclaimed)
``relay:v1:{s0}:wake``                     pubsub  "work became due earlier than you thought"
``relay:v1:{s0}:held:<endpoint_id>``       zset    deliveries held while their endpoint is disabled
``relay:v1:{ep_X}:breaker``                hash    circuit breaker of ep_X (state, failures)
``relay:v1:{ep_X}:rate``                   string  rate limit: GCRA theoretical arrival time (ms)
``relay:v1:{ep_X}:inflight``               zset    in-flight slots (claim token -> slot expiry ms)
``relay:v1:{cfg}:endpoints``               hash    endpoint id -> endpoint JSON
``relay:v1:{cfg}:changed``                 pubsub  an endpoint was written (drop caches)
``relay:v1:{cfg}:app:<app>``               set     endpoint ids of one app
=========================================  ======  =============================================
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ShardKeys:
    """Keys of one queue shard."""

    shard: int
    base: str  # "relay:v1:{s0}:" -- also handed to scripts that build per-id keys

    @property
    def due(self) -> str:
        return self.base + "due"

    @property
    def processing(self) -> str:
        return self.base + "processing"

    @property
    def succeeded(self) -> str:
        return self.base + "succeeded"

    @property
    def dead(self) -> str:
        return self.base + "dead"

    @property
    def deliveries(self) -> str:
        return self.base + "deliveries"

    @property
    def events(self) -> str:
        return self.base + "events"

    @property
    def stats(self) -> str:
        return self.base + "stats"

    @property
    def wake(self) -> str:
        return self.base + "wake"

    def delivery(self, delivery_id: str) -> str:
        return f"{self.base}dlv:{delivery_id}"

    def log(self, delivery_id: str) -> str:
        return f"{self.base}log:{delivery_id}"

    def event(self, event_id: str) -> str:
        return f"{self.base}evt:{event_id}"

    def endpoint_index(self, endpoint_id: str) -> str:
        return f"{self.base}ep:{endpoint_id}"

    def idempotency(self, app: str, key: str) -> str:
        return f"{self.base}idem:{app}:{key}"

    def held(self, endpoint_id: str) -> str:
        return f"{self.base}held:{endpoint_id}"


@dataclass(frozen=True)
class EndpointKeys:
    """Shared health and pacing state of one endpoint, under its own hash tag."""

    breaker: str
    rate: str
    inflight: str


@dataclass(frozen=True)
class Keys:
    """All of relay's keys under one prefix."""

    prefix: str = "relay"
    shards: int = 1

    def shard(self, n: int) -> ShardKeys:
        if not 0 <= n < self.shards:
            raise ValueError(f"shard {n} is outside 0..{self.shards - 1}")
        return ShardKeys(n, f"{self.prefix}:v1:{{s{n}}}:")

    def all_shards(self) -> list[ShardKeys]:
        return [self.shard(n) for n in range(self.shards)]

    @property
    def endpoints(self) -> str:
        return f"{self.prefix}:v1:{{cfg}}:endpoints"

    @property
    def endpoints_changed(self) -> str:
        """Pub/sub channel: an endpoint was written (API replicas drop their cache)."""
        return f"{self.prefix}:v1:{{cfg}}:changed"

    def app(self, app: str) -> str:
        return f"{self.prefix}:v1:{{cfg}}:app:{app}"

    def endpoint_state(self, endpoint_id: str) -> EndpointKeys:
        base = f"{self.prefix}:v1:{{{endpoint_id}}}:"
        return EndpointKeys(base + "breaker", base + "rate", base + "inflight")
