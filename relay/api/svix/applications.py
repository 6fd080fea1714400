"""``/api/v1/app``: applications, which are relay apps.

An application's ``id`` is its relay app name: its ``uid`` when it has one, else one
relay makes (``app_...``). So ``get(app.id)`` and ``get(uid)`` name the same app, and an
app's API key (``rk_...``, app ``shop``) works on ``/api/v1/app/shop/...``. The record
(name, metadata) lives in ``Keys.apps``; endpoints and events carry the app name as on
``/v1``. An existing ``/v1`` app becomes an application by ``get_or_create`` with its
name as ``uid``.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from relay.api.access import pinned_app, principal, scoped_app
from relay.api.common import STORE, ApiError, body, json, route
from relay.api.svix.base import (
    IDEMPOTENCY_DOC,
    IDEMPOTENCY_HEADER,
    OrderedQuery,
    app_record,
    by_key,
    idempotent,
    page,
    query,
    refuse_set,
    when,
)
from relay.api.svix.models import (
    SvixApplicationIn,
    SvixApplicationOut,
    SvixApplicationPatch,
    listing,
)
from relay.domain import ids
from relay.domain.schema import Strict
from relay.endpoints.lifecycle import Lifecycle

TAG = "Svix-compatible API"
POST_HEADERS = {IDEMPOTENCY_HEADER: IDEMPOTENCY_DOC}
UNSUPPORTED = {"throttle_rate": "throttleRate is per endpoint in relay (endpoint throttleRate)"}


def application_out(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": record["app"],
        "uid": record.get("uid"),
        "name": record["name"],
        "throttleRate": None,
        "metadata": record.get("metadata") or {},
        "createdAt": when(record["created_at"]),
        "updatedAt": when(record["updated_at"]),
    }


class CreateQuery(Strict):
    get_if_exists: bool = False


async def ensure(request: web.Request, data: SvixApplicationIn) -> tuple[dict[str, Any], bool]:
    """The application ``data`` names (by ``uid``), created when new: (record, created).
    An app's key may create only its own app."""
    refuse_set(data, UNSUPPORTED)
    given = data.uid is not None
    name = pinned_app(request, data.uid or "", given, ApiError)
    if not name:  # the operator, no uid: a new app of relay's naming
        name = ids.new_id("app")
    now = int(time.time() * 1000)
    record = {
        "app": name,
        "uid": name if given or scoped_app(request) else None,
        "name": data.name,
        "metadata": data.metadata or {},
        "created_at": now,
        "updated_at": now,
    }
    store = request.app[STORE]
    if await store.put_app(record):
        return record, True
    raw = await store.get_app_raw(name)
    if raw is None:  # deleted in between: the create goes on
        return await ensure(request, data)
    return orjson.loads(raw), False


async def app_or_create(request: web.Request, given: SvixApplicationIn | None) -> str:
    """The path's application; when it does not exist and ``given`` (a message's or a
    portal request's ``application``) is there, created from it first."""
    name = request.match_info["app_id"]
    try:
        return str((await app_record(request, name))["app"])
    except ApiError:
        if given is None or principal(request).app not in (None, name):
            raise
    record, _ = await ensure(request, given.model_copy(update={"uid": name}))
    return str(record["app"])


@route(
    "POST",
    "/api/v1/app",
    summary="Create an application (get_if_exists: or answer the one of that uid)",
    operation_id="svixCreateApplication",
    tag=TAG,
    body=SvixApplicationIn,
    examples={
        "shop": ("An application whose id is the relay app shop", {"name": "Shop", "uid": "shop"})
    },
    query=CreateQuery,
    headers=POST_HEADERS,
    responses={201: SvixApplicationOut, 200: SvixApplicationOut},
    errors={409: ("conflict", "idempotency_key_reused"), 422: ("unsupported",)},
)
@idempotent
async def create(request: web.Request) -> web.Response:
    """A relay app with a name and metadata; its id is its ``uid`` (relay's app name), or
    one relay makes. An existing ``uid`` is 409, or with ``get_if_exists=true`` that
    application (200). An app's key may create its own app only."""
    q = query(request, CreateQuery)
    data, _ = await body(request, SvixApplicationIn)
    record, created = await ensure(request, data)
    if not created and not q.get_if_exists:
        raise ApiError(409, "conflict", f"application {record['app']} already exists")
    return json(application_out(record), status=201 if created else 200)


@route(
    "GET",
    "/api/v1/app",
    summary="List applications",
    operation_id="svixListApplications",
    tag=TAG,
    query=OrderedQuery,
    responses={200: listing(SvixApplicationOut)},
)
async def list_(request: web.Request) -> web.Response:
    """Every application, by id (an app's key sees its own only)."""
    q = query(request, OrderedQuery)
    own = scoped_app(request)
    apps = [a for a in await request.app[STORE].list_apps() if own in (None, a["app"])]
    apps, iterator = by_key(apps, "app", q)
    return page([application_out(a) for a in apps], iterator)


@route(
    "GET",
    "/api/v1/app/{app_id}",
    summary="Read an application",
    operation_id="svixGetApplication",
    tag=TAG,
    responses={200: SvixApplicationOut},
)
async def read(request: web.Request) -> web.Response:
    """The application (by its id, which is its uid when it has one)."""
    return json(application_out(await app_record(request, request.match_info["app_id"])))


async def _change(request: web.Request, changes: dict[str, Any]) -> dict[str, Any]:
    store = request.app[STORE]
    name = request.match_info["app_id"]
    for _ in range(20):
        before = await app_record(request, name)
        record = {**before, **changes, "updated_at": int(time.time() * 1000)}
        if await store.put_app(record, expected=orjson.dumps(before).decode()):
            return record
    raise ApiError(409, "conflict", f"application {name} kept changing; retry")


def _renamed(data: SvixApplicationIn | SvixApplicationPatch, app: str) -> None:
    if data.uid is not None and data.uid != app:
        raise ApiError(
            422, "unsupported", "an application's uid is its relay app: it cannot change"
        )


@route(
    "PUT",
    "/api/v1/app/{app_id}",
    summary="Create or replace an application",
    operation_id="svixUpsertApplication",
    tag=TAG,
    body=SvixApplicationIn,
    examples={"rename": ("Its name and metadata", {"name": "Shop", "metadata": {"tier": "gold"}})},
    responses={200: SvixApplicationOut, 201: SvixApplicationOut},
    errors={422: ("unsupported",)},
)
async def upsert(request: web.Request) -> web.Response:
    """The application of this id with this name and metadata, created when new."""
    data, _ = await body(request, SvixApplicationIn)
    refuse_set(data, UNSUPPORTED)
    name = request.match_info["app_id"]
    if scoped_app(request) not in (None, name):  # another app's: as a missing one
        raise ApiError(404, "not_found", f"application {name} does not exist")
    _renamed(data, name)
    record, created = await ensure(request, data.model_copy(update={"uid": name}))
    if created:
        return json(application_out(record), status=201)
    changes = {"name": data.name, "metadata": data.metadata or {}}
    return json(application_out(await _change(request, changes)))


@route(
    "PATCH",
    "/api/v1/app/{app_id}",
    summary="Change an application",
    operation_id="svixPatchApplication",
    tag=TAG,
    body=SvixApplicationPatch,
    examples={"metadata": ("New metadata", {"metadata": {"tier": "gold"}})},
    responses={200: SvixApplicationOut},
    errors={422: ("unsupported",)},
)
async def patch(request: web.Request) -> web.Response:
    """Change the name or the metadata given; the rest stays."""
    data, _ = await body(request, SvixApplicationPatch)
    refuse_set(data, UNSUPPORTED)
    _renamed(data, request.match_info["app_id"])
    changes = data.model_dump(include={"name", "metadata"}, exclude_none=True)
    return json(application_out(await _change(request, changes)))


@route(
    "DELETE",
    "/api/v1/app/{app_id}",
    summary="Delete an application and its endpoints",
    operation_id="svixDeleteApplication",
    tag=TAG,
    responses={204: None},
)
async def delete(request: web.Request) -> web.Response:
    """The application's endpoints are deleted as ``DELETE /v1/endpoints/{id}`` deletes
    them (their waiting deliveries become dead), then its record; its events stay in
    relay's history until retention removes them."""
    record = await app_record(request, request.match_info["app_id"])
    store = request.app[STORE]
    for endpoint in await store.list_endpoints(record["app"]):
        await Lifecycle(store).delete(endpoint)
    await store.delete_app(record["app"])
    return web.Response(status=204)
