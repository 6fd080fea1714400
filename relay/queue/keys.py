"""Every Redis key relay writes, built in one place.

Layout (prefix ``relay`` by default, ``v3`` is the layout version). Each queue shard
lives under its own hash tag ``{sN}``, so every script touches one hash slot and the
same code runs on a single Redis and on Redis Cluster. Endpoint configuration lives
under the tag ``{cfg}``; API keys and portal sessions under ``{auth}``; each endpoint's
shared health and pacing state (breaker, rate limit, in-flight slots) under its own tag
``{ep_X}``, settled by one script for all workers together.

The Lua scripts (``relay/queue/lua/``) name no key themselves: they get whole keys in
KEYS, and for keys of ids only known inside a script (a claim's due ids, a sweep's
finished ids) the key prefix in ARGV, built here (``ShardKeys.delivery_prefix`` and
the like), to which they append the id. ``tests/redis/test_keys.py`` holds this table, the
docs' copy of it (docs/reference/redis-keys.md) and every key the scripts touch to these
builders.

=========================================  ======  =============================================
key                                        type    holds
=========================================  ======  =============================================
``relay:v3:{s0}:due``                      zset    pending delivery ids, score = next attempt (ms)
``relay:v3:{s0}:processing``               zset    claimed delivery ids, score = lease expiry (ms)
``relay:v3:{s0}:succeeded``                zset    succeeded delivery ids, score = finish time
``relay:v3:{s0}:dead``                     zset    dead delivery ids, score = time of death
``relay:v3:{s0}:held``                     zset    held delivery ids, score = when held
``relay:v3:{s0}:scheduled``                zset    scheduled delivery ids, score = deliver_at (ms)
``relay:v3:{s0}:events``                   zset    every event id with deliveries, score = created
``relay:v3:{s0}:ep:<endpoint_id>``         zset    that endpoint's delivery ids, score = created
``relay:v3:{s0}:held:<endpoint_id>``       zset    held delivery ids of that endpoint (for resume)
``relay:v3:{s0}:lane:<lane>``              list    an ordered lane's delivery ids, head first
``relay:v3:{s0}:queued``                   zset    ids behind their lane's head, score = created
``relay:v3:{s0}:blocked``                  zset    lanes held by a dead head, score = when blocked
``relay:v3:{s0}:dlv:<delivery_id>``        hash    the delivery from its first claim (status, a1)
``relay:v3:{s0}:log:<delivery_id>``        list    attempt log, one JSON entry per request but a1
``relay:v3:{s0}:evt:<event_id>``           string  event: header line (JSON), body (maybe zlib)
``relay:v3:{s0}:idem:<app>:<key>``         string  idempotency record: body hash + first answer
``relay:v3:{s0}:ik:<key>``                 zset    events published with that Idempotency-Key
``relay:v3:{s0}:pub:<app>:<key>``          string  that key's event is written (its shard's copy)
``relay:v3:{s0}:stats``                    hash    shard counters (reclaimed)
``relay:v3:{s0}:archiving``                string  the archive mover's lease on the shard (token)
``relay:v3:{s0}:wake``                     pubsub  "work became due earlier than you thought"
``relay:v3:{s0}:ops``                      list    ops outbox: delivery.dead summaries
``relay:v3:{s0}:opsdead``                  zset    endpoints with a dead tally, score = window start
``relay:v3:{s0}:opsdead:<endpoint_id>``    hash    its tally: n, first/last id and time
``relay:v3:{ep_X}:breaker``                hash    circuit breaker of ep_X (state, failures)
``relay:v3:{ep_X}:rate``                   string  rate limit: GCRA theoretical arrival time (ms)
``relay:v3:{ep_X}:inflight``               zset    in-flight slots (claim token -> slot expiry ms)
``relay:v3:{ep_X}:opsbox``                 list    ops outbox: breaker opened / closed events
``relay:v3:{ep_X}:deleted``                string  tombstone of a deleted ep_X (expires)
``relay:v3:{ep_X}:stats:<hour>``           hash    ep_X's attempt counters of one hour, by minute
``relay:v3:{cfg}:endpoints``               hash    endpoint id -> endpoint JSON
``relay:v3:{cfg}:app:<app>``               set     endpoint ids of one app
``relay:v3:{cfg}:event_types``             hash    event type name -> event type JSON (catalog)
``relay:v3:{cfg}:apps``                    hash    app name -> application JSON (the /api/v1 API's)
``relay:v3:{cfg}:changed``                 pubsub  an endpoint or event type was written
``relay:v3:{cfg}:ready``                   string  /readyz's probe: SET PX, then DEL
``relay:v3:{cfg}:placement``               string  when key placement began (ms; 0: new)
``relay:v3:{rpl}:job:<replay_id>``         hash    a replay job: params, state, cursor, lease
``relay:v3:{rpl}:jobs``                    zset    every replay job id, score = created (ms)
``relay:v3:{rpl}:running``                 set     replay job ids a worker should advance
``relay:v3:{auth}:key:<key_id>``           hash    API key: app, scopes, name, created, token hash
``relay:v3:{auth}:keys``                   zset    every API key id, score = created (ms)
``relay:v3:{auth}:cred:<token_sha256>``    string  credential of a token hash: kind, id, app, scopes
``relay:v3:{auth}:sessions:<key_id>``      set     portal sessions that key opened (token hashes)
``relay:v3:{auth}:brand:<token_sha256>``   string  a portal session's branding (JSON), its TTL
``relay:v3:{auth}:rate:<token_sha256>``    string  API rate limit of a credential: GCRA TAT (ms)
``relay:v3:{auth}:cursor_key``             string  the key sealing list cursors (hex, random)
``relay:v3:{auth}:req:<caller>:<key>``     string  an /api/v1 POST's idempotency-key: hash, answer
``relay:v3:{cfg}:ops``                     list    ops outbox: endpoint disabled / enabled events
``relay:v3:{tag}:guard``                   none    never written: every script call declares it
=========================================  ======  =============================================
"""

from __future__ import annotations

from dataclasses import dataclass

# The layout version, in every key. In v3 an event is one string, a header line and its
# body, compressed (relay/domain/eventrecord.py); a delivery's id derives from its
# event's (relay/domain/ids.py), so a delivery has no hash until its first claim, and the
# hash keeps only what no id, index score or event header holds; the index of everything
# lists events (``events``). ``relay migrate`` moves a Redis written by an older layout
# (v1, v2) to v3 (relay/queue/migrate.py).
LAYOUT = "v3"


@dataclass(frozen=True)
class ShardKeys:
    """Keys of one queue shard."""

    shard: int
    base: str  # "relay:v3:{s0}:"

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
    def held_index(self) -> str:
        """Every held delivery of the shard (status ``held``), score = when it was held."""
        return self.base + "held"

    @property
    def scheduled(self) -> str:
        """Deliveries published with a ``deliver_at`` ahead, score = that time (ms): the
        ones scored past now are status ``scheduled`` (each is in ``due`` at that score)."""
        return self.base + "scheduled"

    @property
    def events(self) -> str:
        """Every event with deliveries, score = created (ms): the listing of every
        delivery (an event's are in its header), one entry however many endpoints."""
        return self.base + "events"

    @property
    def stats(self) -> str:
        return self.base + "stats"

    @property
    def archiving(self) -> str:
        """The lease of the one worker moving this shard's finished deliveries to the
        archive (relay/archive/mover.py): its token, with a TTL."""
        return self.base + "archiving"

    @property
    def wake(self) -> str:
        return self.base + "wake"

    # Per-id keys: a prefix (handed to the scripts that only learn the ids inside) and
    # the key of one id, which is that prefix and the id.

    @property
    def delivery_prefix(self) -> str:
        return self.base + "dlv:"

    def delivery(self, delivery_id: str) -> str:
        return self.delivery_prefix + delivery_id

    @property
    def log_prefix(self) -> str:
        return self.base + "log:"

    def log(self, delivery_id: str) -> str:
        return self.log_prefix + delivery_id

    @property
    def event_prefix(self) -> str:
        return self.base + "evt:"

    def event(self, event_id: str) -> str:
        return self.event_prefix + event_id

    @property
    def endpoint_index_prefix(self) -> str:
        return self.base + "ep:"

    def endpoint_index(self, endpoint_id: str) -> str:
        return self.endpoint_index_prefix + endpoint_id

    @property
    def held_prefix(self) -> str:
        return self.base + "held:"

    def held(self, endpoint_id: str) -> str:
        """One endpoint's held deliveries (``resume.lua`` moves them back)."""
        return self.held_prefix + endpoint_id

    # Ordered lanes (relay.domain.ordering): ``<lane>`` is ``<endpoint_id>`` (one lane for
    # the endpoint) or ``<endpoint_id>:<ordering_key>``; a delivery hash keeps its lane.

    @property
    def queued(self) -> str:
        """Deliveries of a lane behind its head (status ``queued``), score = created."""
        return self.base + "queued"

    @property
    def blocked(self) -> str:
        """Lanes whose dead head holds them (``ordering_on_dead: block``), score = when."""
        return self.base + "blocked"

    @property
    def lane_prefix(self) -> str:
        return self.base + "lane:"

    def lane(self, lane: str) -> str:
        """One lane: its delivery ids in publish order, the head (the one due or in
        flight, or the dead one blocking it) first."""
        return self.lane_prefix + lane

    def idempotency(self, app: str, key: str) -> str:
        return f"{self.base}idem:{app}:{key}"

    def idempotency_index(self, key: str) -> str:
        """Events published with the ``Idempotency-Key`` ``key`` (any app), score = created
        (ms): the lookup by key. It expires ``RELAY_RETENTION`` after its last event, and
        outlives the idempotency record (``RELAY_IDEMPOTENCY_TTL``)."""
        return f"{self.base}ik:{key}"

    def published(self, app: str, key: str) -> str:
        """On the shard of an event whose Idempotency-Key's guard is on another shard:
        the guard's record again, written with the event, so that event is written once
        however many requests finish the two-step publish (relay.idempotency)."""
        return f"{self.base}pub:{app}:{key}"

    # Operational events (relay.connectors.opsevents): an outbox per hash tag, written
    # by the script that makes the transition, and the shard's dead-letter tallies.

    @property
    def ops(self) -> str:
        """The shard's ops outbox: ``delivery.dead`` summaries cut from the tallies."""
        return self.base + "ops"

    @property
    def dead_tally_index(self) -> str:
        """Endpoints with a dead-letter tally open, score = when its window began (ms)."""
        return self.base + "opsdead"

    @property
    def dead_tally_prefix(self) -> str:
        return self.base + "opsdead:"

    def dead_tally(self, endpoint_id: str) -> str:
        return self.dead_tally_prefix + endpoint_id


@dataclass(frozen=True)
class EndpointKeys:
    """Shared health and pacing state of one endpoint, under its own hash tag."""

    breaker: str
    rate: str
    inflight: str
    ops: str  # its ops outbox: endpoint.failing / endpoint.recovered, written by settle.lua
    deleted: str  # tombstone: the endpoint was deleted, late settles write nothing


@dataclass(frozen=True)
class Keys:
    """All of relay's keys under one prefix."""

    prefix: str = "relay"
    shards: int = 1
    layout: str = LAYOUT  # an older one only to read (and migrate) what it wrote

    @property
    def _root(self) -> str:
        """``relay:v3:``: the start of every key."""
        return f"{self.prefix}:{self.layout}:"

    def shard(self, n: int) -> ShardKeys:
        if not 0 <= n < self.shards:
            raise ValueError(f"shard {n} is outside 0..{self.shards - 1}")
        return ShardKeys(n, f"{self._root}{{s{n}}}:")

    def all_shards(self) -> list[ShardKeys]:
        return [self.shard(n) for n in range(self.shards)]

    @property
    def endpoints(self) -> str:
        return f"{self._root}{{cfg}}:endpoints"

    @property
    def event_types(self) -> str:
        """The event type catalog: name -> JSON (description, schema, deprecated)."""
        return f"{self._root}{{cfg}}:event_types"

    @property
    def endpoints_changed(self) -> str:
        """Pub/sub channel: an endpoint or an event type was written (API replicas drop
        their endpoint cache and their compiled event type validators)."""
        return f"{self._root}{{cfg}}:changed"

    @property
    def ready(self) -> str:
        """``/readyz`` writes here (with a TTL): Redis accepts writes, not only PING."""
        return f"{self._root}{{cfg}}:ready"

    @property
    def placement(self) -> str:
        """When placement by key began (ms since the epoch): written once, by the first
        process of this layout to start on a Redis with endpoints, else ``0`` by the
        first endpoint written (nothing was placed by app). Until two idempotency TTLs
        after it, keys are also claimed on their app's shard (relay.idempotency)."""
        return f"{self._root}{{cfg}}:placement"

    @property
    def ops(self) -> str:
        """The ops outbox of endpoint writes (``endpoint_put.lua``): disabled, enabled."""
        return f"{self._root}{{cfg}}:ops"

    def app(self, app: str) -> str:
        return f"{self._root}{{cfg}}:app:{app}"

    @property
    def apps(self) -> str:
        """The applications of the Svix-compatible API: app name -> JSON (relay.queue.apps)."""
        return f"{self._root}{{cfg}}:apps"

    # Reconciliation replay jobs (relay/ops/replays.py), under their own tag {rpl}.

    def replay_job(self, replay_id: str) -> str:
        return f"{self._root}{{rpl}}:job:{replay_id}"

    @property
    def replay_jobs(self) -> str:
        return f"{self._root}{{rpl}}:jobs"

    @property
    def replays_running(self) -> str:
        return f"{self._root}{{rpl}}:running"

    # API keys and portal sessions (relay/queue/auth.py), under their own tag {auth}.
    # Tokens are never stored: a credential is found by the SHA-256 of its token.

    def api_key(self, key_id: str) -> str:
        return f"{self._root}{{auth}}:key:{key_id}"

    @property
    def api_keys(self) -> str:
        return f"{self._root}{{auth}}:keys"

    def credential(self, token_hash: str) -> str:
        """A key's or portal session's record; a portal session's has a TTL."""
        return f"{self._root}{{auth}}:cred:{token_hash}"

    def key_sessions(self, key_id: str) -> str:
        """Token hashes of the portal sessions an API key opened (they end with it)."""
        return f"{self._root}{{auth}}:sessions:{key_id}"

    def portal_branding(self, token_hash: str) -> str:
        """A portal session's branding (name, logo, accent colour), apart from its
        credential so that authenticating a request does not read a logo."""
        return f"{self._root}{{auth}}:brand:{token_hash}"

    def api_rate(self, token_hash: str) -> str:
        return f"{self._root}{{auth}}:rate:{token_hash}"

    @property
    def cursor_key(self) -> str:
        """The key every API replica seals list cursors with (relay.domain.cursors)."""
        return f"{self._root}{{auth}}:cursor_key"

    def endpoint_stats(self, endpoint_id: str, hour: str) -> str:
        """An endpoint's attempt counters of one hour (``hour``: ms since the epoch //
        3,600,000), written by ``settle.lua`` (relay/domain/endpointstats.py)."""
        return f"{self._root}{{{endpoint_id}}}:stats:{hour}"

    def request(self, caller: str, key: str) -> str:
        """An ``/api/v1`` POST's ``idempotency-key`` of one caller (relay.queue.requests)."""
        return f"{self._root}{{auth}}:req:{caller}:{key}"

    def endpoint_state(self, endpoint_id: str) -> EndpointKeys:
        base = f"{self._root}{{{endpoint_id}}}:"
        return EndpointKeys(
            base + "breaker", base + "rate", base + "inflight", base + "opsbox", base + "deleted"
        )


def guard_key(key: str) -> str:
    """The never-written key under the hash tag of ``key`` (``relay:v3:{s0}:guard``).

    Every script call declares it after its own keys (:mod:`relay.queue.scripts`), so
    Redis Cluster refuses the call while that slot is being migrated.
    """
    end = key.find("}", key.find("{") + 1)
    if key.find("{") < 0 or end < 0:
        raise ValueError(f"{key!r} has no hash tag")
    return key[: end + 1] + ":guard"
