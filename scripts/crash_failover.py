"""Crash injection with Sentinel failover (``make crash``, after the single-Redis rounds).

Per round, everything on 127.0.0.1 and in a temporary directory: the topology of
``tests/helpers/sentinel.py`` (1 primary, 2 replicas, 3 Sentinels, every node ``appendonly yes``
with ``appendfsync always``), an API process and ``--workers`` worker processes given
``RELAY_REDIS_SENTINELS`` (so they find the primary through Sentinel), a recording
receiver; the events are published as in ``scripts/crash.py`` (a publish without a
200/201 is retried with its Idempotency-Key) while workers are SIGKILLed and replaced,
and the **primary** is SIGKILLed ``--kills`` times per round (spread over the publish;
a kill still due when publishing is over happens during the drain). Each time Sentinel
promotes a replica, relay follows with no restart, and the killed node comes back as a
replica of the new primary before the next kill.

The report is ``scripts/crash.py``'s (``crash_report.analyze``), with the outage window
of each kill running from the SIGKILL to the moment every Sentinel names the new
primary and it takes writes. One rule is added for a failover: a claim written to the
old primary but not yet replicated is gone on the new one, so the delivery is claimed
again under the same claim number. A second copy under the same ``x-relay-attempt`` is
explained by the failover when the first copy arrived between 1 s before a kill and the
end of that failover; those copies are counted in ``explained_by_failover``. With
``RELAY_ACK_REPLICAS=0`` a delivery the new primary never had may also have been sent
more than once before the kill (a timed-out request and its retry, all on the old
primary): those extra copies are part of the loss the round shows, counted in
``explained_by_loss`` (with ``1`` such a delivery is missing and fails the round).

The Sentinels judge a primary down after ``--down-after-ms`` (2 s; the tests' topology
uses 1 s): at 1 s, on a loaded 2-core VM, they twice failed over from a primary that had
just been promoted and was alive (their new links to it had no answer within the
second), while it went on taking writes confirmed by a replica that was then resynced
from the new primary. That split brain loses acknowledged writes whatever
``RELAY_ACK_REPLICAS`` says (docs/operating/sentinel.md); these rounds are about the kills
they make.

Rounds alternate ``RELAY_ACK_REPLICAS=1`` and ``0`` (``--ack``). With ``1`` (each
acknowledged write waited for by one replica) a lost event fails the round; with ``0``
an acknowledged write can be lost when the primary dies before replicating it, and the
round reports that loss (``lost``) without failing on it. When the tree has no
``RELAY_ACK_REPLICAS`` setting, ``ack_replicas_supported`` is false in the report.

On loopback replicas are a fraction of a millisecond behind and workers deliver within
milliseconds, so a bare SIGKILL rarely catches an acknowledged event that exists only
on the primary and has not been sent yet. Before each kill the round therefore opens the
window that a lagging replica link and a backlog open in production, for ``--lag``
seconds (default 0.3): the worker processes are stopped (SIGSTOP), so what is
published meanwhile waits in the primary's queue, then every replica is given
credentials the primary refuses (``CONFIG SET masteruser/masterauth``) and its link is
cut (``CLIENT KILL TYPE replica``), so no replica can resync; publishing goes on. Then the
primary is SIGKILLed, the replicas get their credentials back and the workers go on (SIGCONT).
With ``RELAY_ACK_REPLICAS=0`` the publishes answered 201 in that window exist only on the
primary and are lost with it (``acked_in_cut`` counts the answers in the window, ``lost``
the events never delivered); with ``1`` none of them is answered 201 (WAIT finds no
replica, 503, and the client's retry lands on the new primary). ``--lag 0`` kills with the
links intact and the workers running.

    python scripts/crash_failover.py --rounds 2 --events 1500 --kills 3 --ack 1,0

``--cluster`` runs the same rounds on a 3-master Redis Cluster with a replica per
master, killing masters instead of a Sentinel primary (scripts/crash_cluster.py); not
part of ``make crash``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]

from crash import Config, Round  # noqa: E402
from crash_report import print_table  # noqa: E402

from relay.redisproc import HOST  # noqa: E402
from relay.settings import Settings  # noqa: E402
from tests.helpers.sentinel import SentinelTopology  # noqa: E402

ACK_SUPPORTED = "ack_replicas" in Settings.__dataclass_fields__
BEFORE_KILL = 1.0  # seconds: a copy this long before a kill may rest on an unreplicated claim


class _Topology:
    """What ``crash.Round`` asks of ``self.redis``, for a Sentinel topology."""

    def __init__(self, topo: SentinelTopology) -> None:
        self.topo = topo

    @property
    def url(self) -> str:  # host and port are ignored beside RELAY_REDIS_SENTINELS
        return self.topo.nodes[0].url

    @property
    def port(self) -> int | None:
        return self.topo.nodes[0].port

    def start(self, timeout: float = 30.0) -> None:
        self.topo.start()

    def stop(self) -> None:
        self.topo.stop()


async def _credentials(replica: Any, user: str) -> None:
    """Give a replica the user (and password) it resyncs with; a node that is down (killed
    in a failover the Sentinels made on their own) is left as it is: it resyncs nothing,
    and comes back with its own configuration."""
    try:
        await replica.config_set("masteruser", user)
        await replica.config_set("masterauth", user)
    except (aioredis.ConnectionError, OSError):
        pass


class FailoverRound(Round):
    def __init__(
        self,
        number: int,
        cfg: Config,
        kills: int,
        ack: int,
        rng: random.Random,
        lag: float,
        down_after_ms: int,
    ):
        super().__init__(number, cfg, False, rng)
        self.lag = lag
        self.acked_in_cut = 0
        self._cut_from = 0
        self.topo = SentinelTopology(self.dir / "redis", down_after_ms=down_after_ms)
        self.redis = _Topology(self.topo)  # type: ignore[assignment]
        self.kills_wanted = kills
        self.ack = ack
        self.at = sorted(int(cfg.events * (i + 1) / (kills + 1)) for i in range(kills))

    def _env(self, **extra: str) -> dict[str, str]:
        env = super()._env(**extra)
        env["RELAY_REDIS_SENTINELS"] = self.topo.sentinels_env
        env["RELAY_ACK_REPLICAS"] = str(self.ack)
        return env

    def _primary(self) -> Any:
        return aioredis.Redis(port=self.topo.primary_port(), decode_responses=True)

    async def _kill_redis(self) -> None:
        for threshold in self.at:
            while len(self.st.acked) < threshold and not self.st.publish_done.is_set():  # noqa: ASYNC110 (polled state)
                await asyncio.sleep(0.02)
            cut = await self._cut_replication()
            killed = time.time()
            try:
                old = await asyncio.to_thread(self.topo.kill_primary)
            finally:
                await self._restore(cut)
            assert old.port is not None
            await asyncio.to_thread(self.topo.wait_failover, old.port)
            self.st.outages.append({"killed_at": killed, "ready_at": time.time()})
            await asyncio.to_thread(self.topo.revive, old)

    async def _cut_replication(self) -> list[Any]:
        """Open the window of the module docstring; returns the replicas cut off (give
        them to :meth:`_restore`)."""
        if self.lag <= 0:
            return []
        port = self.topo.primary_port()
        assert port is not None
        replicas = [n.port for n in self.topo.nodes if n.port not in (None, port)]
        return await self._cut(port, replicas)

    async def _cut(self, primary_port: int, replica_ports: list[Any]) -> list[Any]:
        """Cut the replicas on ``replica_ports`` off the primary on ``primary_port`` for
        ``lag`` seconds; returns them, for :meth:`_restore`."""
        # The workers stop first: stopped after the cut, they ran a few ms inside the
        # window and could claim (and, once continued, send) an event that exists only
        # on the primary and whose publish was never acknowledged (received_unacknowledged
        # 1 in a make test run of 2026-12-03)
        for w in self.workers():
            if w.popen.poll() is None:
                os.kill(w.popen.pid, signal.SIGSTOP)
        replicas = [aioredis.Redis(host=HOST, port=p) for p in replica_ports]
        try:
            for r in replicas:  # a user the primary does not know: every resync is refused
                await _credentials(r, "relay-crash-cut")
            primary = aioredis.Redis(host=HOST, port=primary_port)
            try:
                await primary.execute_command("CLIENT", "KILL", "TYPE", "replica")
            finally:
                await primary.aclose()
        except BaseException:
            self._cut_from = len(self.st.acked)
            await self._restore(replicas)  # never leave the workers stopped
            raise
        # answers from here on: a write confirmed before the cut may still be answered
        # (with RELAY_ACK_REPLICAS=1 it was on a replica); every other one is on the
        # primary alone
        self._cut_from = len(self.st.acked)
        await asyncio.sleep(self.lag)
        return replicas

    async def _restore(self, replicas: list[Any]) -> None:
        """After the kill: count what was answered from the cut on, and undo the cut. The
        workers go on whatever the replicas do: a worker left stopped stalled a round
        once, every acknowledged event after it undelivered."""
        if replicas:
            self.acked_in_cut += len(self.st.acked) - self._cut_from
        try:
            for r in replicas:
                try:
                    await _credentials(r, "")
                finally:
                    await r.aclose()
        finally:
            if replicas:
                for w in self.workers():
                    if w.popen.poll() is None:
                        os.kill(w.popen.pid, signal.SIGCONT)

    async def _drain(self, client: Any) -> bool:
        # every kill happens before the end (unless the kills failed: reported)
        while len(self.st.outages) < self.kills_wanted and not self._killer.done():  # noqa: ASYNC110 (polled state)
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
        primary = self._primary()
        try:
            return await super()._drain(primary)
        finally:
            await primary.aclose()

    async def _collect(self, client: Any) -> dict[int, dict[str, Any]]:
        primary = self._primary()
        try:
            return await super()._collect(primary)
        finally:
            await primary.aclose()

    async def run(self) -> dict[str, Any]:
        self._killer = asyncio.create_task(self._kill_after_start())
        try:
            report = await super().run()
        finally:
            self._killer.cancel()
        report["redis_killed"] = True
        report["failovers"] = len(self.st.outages)
        report["ack_replicas"] = self.ack
        report["replication_cut_s"] = self.lag
        report["acked_in_cut"] = self.acked_in_cut
        report["ack_replicas_supported"] = ACK_SUPPORTED
        if len(self.st.outages) != self.kills_wanted:
            report["ok"] = False
        return report

    async def _kill_after_start(self) -> None:
        # crash.Round.run starts _kill_redis only when kill_redis is set; this round
        # keeps it False (one outage per round is what crash_report checks) and starts
        # the kills itself once the API is up.
        while self.topo.sentinels == [] or not any(p.name == "api" for p in self.st.procs):  # noqa: ASYNC110 (polled state)
            await asyncio.sleep(0.05)
        while not self.st.acked:  # noqa: ASYNC110 (polled state)
            await asyncio.sleep(0.02)
        await self._kill_redis()


def failover_explained(records: list[dict[str, Any]], outages: list[dict[str, float]]) -> int:
    """Drop from ``records`` the repeated-claim copies a failover explains; how many."""
    seen: dict[tuple[str, int], float] = {}
    keep, dropped = [], 0
    for r in sorted(records, key=lambda r: r["at"]):
        key = (r["id"], r["attempt"])
        first = seen.get(key)
        if first is not None and any(
            o["killed_at"] - BEFORE_KILL <= first <= o["ready_at"] for o in outages
        ):
            dropped += 1
            continue
        seen.setdefault(key, r["at"])
        keep.append(r)
    records[:] = keep
    return dropped


def loss_explained(rows: dict[int, dict[str, Any]], records: list[dict[str, Any]]) -> int:
    """``RELAY_ACK_REPLICAS=0`` only: drop from ``records`` the extra copies of deliveries
    the new primary never had (their record went with the old one, which may have sent
    them more than once before it died, e.g. a timed-out first request and its retry);
    how many. That loss is what the round shows; with 1 such a row fails it."""
    gone = {r["event"] for r in rows.values() if not r["row"]}
    seen: set[str] = set()
    keep, dropped = [], 0
    for r in sorted(records, key=lambda r: r["at"]):
        if r["id"] in gone and r["id"] in seen:
            dropped += 1
            continue
        seen.add(r["id"])
        keep.append(r)
    records[:] = keep
    return dropped


def _patch_analyze() -> None:
    """crash.Round.run calls crash.analyze; apply the failover rule first."""
    import crash

    plain = crash.analyze

    def analyze(rnd: Any, rows: Any, records: list[dict[str, Any]], drained: bool) -> Any:
        by_failover = failover_explained(records, rnd.st.outages)
        by_loss = loss_explained(rows, records) if rnd.ack == 0 else 0
        report = plain(rnd, rows, records, drained)
        report["duplicate_sends"] += by_failover + by_loss
        report["explained"] += by_failover + by_loss
        report["explained_by_failover"] = by_failover
        report["explained_by_loss"] = by_loss
        if rnd.ack == 0 and report["lost"]:
            # The loss this choice can show, reported without failing the round: every
            # lost event must be one the new primary never had (not one it kept and
            # failed to deliver), and all else must hold.
            rest = {**report, "lost": 0, "missing_in_redis": 0}
            report["ok"] = report["lost"] == report["missing_in_redis"] and crash_ok(rest, rnd)
        return report

    crash.analyze = analyze


def crash_ok(report: dict[str, Any], rnd: Any) -> bool:
    return bool(
        report["drained"]
        and report["missing_in_redis"] == 0
        and report["unexplained"] == 0
        and report["unacknowledged"] == 0
        and not report["unexpected_exits"]
    )


async def run_rounds(args: argparse.Namespace, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    cfg = Config(events=args.events, workers=args.workers, lease=args.lease, min_kills=1)
    results = []
    for n in range(1, args.rounds + 1):
        ack = args.ack[(n - 1) % len(args.ack)]
        print(
            f"failover round {n}/{args.rounds}: {cfg.events} events, {args.kills} "
            f"{'master' if args.cluster else 'primary'} "
            f"kills, RELAY_ACK_REPLICAS={ack}",
            file=sys.stderr,
            flush=True,
        )
        rnd: FailoverRound
        if args.cluster:
            from crash_cluster import ClusterFailoverRound

            rnd = ClusterFailoverRound(n, cfg, args.kills, ack, rng, args.lag)
        else:
            rnd = FailoverRound(n, cfg, args.kills, ack, rng, args.lag, args.down_after_ms)
        rnd.keep = args.keep
        results.append(await rnd.run())
    return results


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--events", type=int, default=1500)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--kills", type=int, default=3, help="primary SIGKILLs per round")
    p.add_argument("--ack", default="1,0", help="RELAY_ACK_REPLICAS per round, in turn")
    p.add_argument("--lease", type=float, default=1.5)
    p.add_argument(
        "--down-after-ms",
        type=int,
        default=2000,
        help="the Sentinels' down-after-milliseconds (2000; why not 1000: the docstring)",
    )
    p.add_argument(
        "--lag", type=float, default=0.3, help="seconds of cut replica links before each kill"
    )
    p.add_argument(
        "--cluster",
        action="store_true",
        help="kill masters of a 3-master cluster with replicas instead (scripts/crash_cluster.py)",
    )
    p.add_argument("--seed", type=int)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / "crash-failover.json"))
    args = p.parse_args(argv)
    args.ack = [int(x) for x in str(args.ack).split(",")]
    return args


def main() -> None:
    args = parse()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    _patch_analyze()
    results = asyncio.run(run_rounds(args, seed))
    ok = all(r["ok"] for r in results)
    out = {
        "command": " ".join(["scripts/crash_failover.py", *sys.argv[1:]]),
        "seed": seed,
        "config": vars(args),
        "ack_replicas_supported": ACK_SUPPORTED,
        "rounds": results,
        "ok": ok,
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(out, option=orjson.OPT_INDENT_2))
    print_table(results)
    for r in results:
        outages = r["redis_outages"]
        print(
            f"round {r['round']}: RELAY_ACK_REPLICAS={r['ack_replicas']}, {r['failovers']} "
            f"failovers (down/publish resumed/delivery resumed s: "
            + ", ".join(
                f"{o['down_s']}/{o['publish_resumed_s']}/{o['delivery_resumed_s']}" for o in outages
            )
            + f"); lost {r['lost']} of {r['acknowledged']} ({r['acked_in_cut']} answered while "
            f"the replica links were cut); {r['duplicate_sends']} duplicates, "
            f"{r['explained_by_failover']} by a repeated claim after a failover, "
            f"{r.get('explained_by_loss', 0)} by the loss of an unacknowledged primary, "
            f"{r['unexplained']} unexplained; received unacknowledged "
            f"{r['received_unacknowledged']}"
        )
    print(f"seed {seed}; {path}; ok: {ok}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
