"""Operator commands that look: ``inspect`` (a delivery or an event), ``endpoints``."""

from __future__ import annotations

from typing import Any

import click
import orjson

from relay.archive.history import History
from relay.cli.output import cut, emit, iso, json_option, print_rows, with_history, with_store
from relay.domain import ids
from relay.endpoints.health import Health
from relay.queue.store import Store


async def _inspect(history: History, ident: str) -> dict[str, Any] | None:
    store = history.store
    if ids.looks_like(ident, "evt"):
        event = await history.get_event(ident)
        sk = store.shard_keys_for(ident)
        if event is None or sk is None:
            return None
        rows = [await history.get_delivery(d["id"], with_log=False) for d in event["deliveries"]]
        found = {r["id"]: r for r in rows if r is not None}
        for d in event["deliveries"]:
            row = found.get(d["id"])
            d["status"] = row["status"] if row else "expired"
            d["attempts"] = row["attempts"] if row else None
        return {"kind": "event", **event}
    delivery = await history.get_delivery(ident)
    if delivery is None:
        return None
    await Health(store).explain_waits([delivery])
    return {"kind": "delivery", **delivery}


def waiting_text(w: dict[str, Any] | None) -> str:
    """``breaker_open until 2026-...Z``; empty when the delivery is not waiting."""
    if not w:
        return ""
    return w["reason"] + (f" until {iso(w['until'])}" if w.get("until") else "")


def _show_delivery(d: dict[str, Any]) -> None:
    print_rows(
        [
            ["delivery", d["id"]],
            ["status", d["status"]],
            ["event", d["event_id"]],
            ["endpoint", d["endpoint_id"]],
            ["type", d.get("type")],
            ["attempts", f"{d['attempts']} of {d['max_attempts']}"],
            ["created", iso(d.get("created_at"))],
            *([["deliver at", iso(d["deliver_at"])]] if d.get("deliver_at") else []),
            ["next attempt", iso(d.get("next_attempt_at"))],
            ["waiting", waiting_text(d.get("waiting"))],
            ["finished", iso(d.get("finished_at"))],
            ["last status", d.get("last_status_code")],
            ["last error", cut(d.get("last_error"), 100)],
            ["worker", d.get("worker")],
            *(  # an ordered delivery: its lane, and what holds it
                [
                    ["lane", d["lane"]],
                    ["lane head", d.get("lane_head")],
                    ["lane blocked", "yes" if d.get("lane_blocked") else "no"],
                ]
                if d.get("lane")
                else []
            ),
        ],
        ["field", "value"],
    )
    click.echo()
    print_rows(
        [
            [
                e.get("n"),
                iso(e.get("at")),
                e.get("attempt"),
                e.get("duration_ms"),
                e.get("status_code"),
                cut(e.get("error") or "", 30) + (" (fenced)" if e.get("fenced") else ""),
                e.get("outcome"),
                e.get("worker"),
            ]
            for e in d.get("attempt_log", [])
        ],
        ["n", "at", "attempt", "ms", "status", "error", "outcome", "worker"],
    )


def _show_event(e: dict[str, Any]) -> None:
    print_rows(
        [
            ["event", e["id"]],
            ["type", e["type"]],
            ["app", e["app"]],
            ["created", iso(e["created_at"])],
            *([["deliver at", iso(e["deliver_at"])]] if e.get("deliver_at") else []),
            ["payload", cut(orjson.dumps(e["payload"]).decode(), 100)],
        ],
        ["field", "value"],
    )
    click.echo()
    print_rows(
        [[d["id"], d["endpoint_id"], d["status"], d["attempts"]] for d in e["deliveries"]],
        ["delivery", "endpoint", "status", "attempts"],
    )


@click.command(short_help="Show a delivery with its attempt log, or an event.")
@click.argument("ident", metavar="ID")
@json_option
def inspect(ident: str, as_json: bool) -> None:
    """Show a delivery (dlv_...) with its attempt log, or an event (evt_...) with its
    deliveries. Exits 1 when ID is not found.

    \b
    Example:
      relay inspect dlv_01J...
    """
    data = with_history(lambda h: _inspect(h, ident))
    if data is None:
        raise click.ClickException(f"{ident} not found")
    if as_json:
        emit(data, True, lambda _: None)
    elif data["kind"] == "event":
        _show_event(data)
    else:
        _show_delivery(data)


async def _endpoints(store: Store, app: str | None) -> list[dict[str, Any]]:
    return await Health(store).endpoint_views(await store.list_endpoints(app))


@click.command(short_help="List endpoints with their breaker state.")
@click.option("--app", help="Only this app's endpoints.")
@json_option
def endpoints(app: str | None, as_json: bool) -> None:
    """List endpoints with their breaker state (secrets are never shown).

    \b
    Example:
      relay endpoints --app shop
    """
    rows = with_store(lambda s: _endpoints(s, app))
    emit(
        rows,
        as_json,
        lambda rs: print_rows(
            [
                [
                    r["id"],
                    r["app"],
                    cut(r["url"], 50),
                    ",".join(r["event_types"]),
                    "yes" if r["enabled"] else "no",
                    r["breaker"]["state"],
                    r.get("rate_limit") or "-",
                    r.get("max_in_flight") or "-",
                    cut(r.get("filter") or "-", 40),
                ]
                for r in rs
            ],
            [
                "endpoint",
                "app",
                "url",
                "event_types",
                "enabled",
                "breaker",
                "rate/s",
                "max_in_flight",
                "filter",
            ],
        ),
    )


COMMANDS = (inspect, endpoints)
