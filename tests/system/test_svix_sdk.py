"""The official Svix SDKs, unpatched, against a ``relay api`` and a ``relay worker``
process: the Python one (``svix``, pinned in the test extra) and the JavaScript one (the
``svix`` npm package tools/package.json pins, driven by tests/data/svix_flow.mjs). Every
call of the core flow, every delivery checked with the SDK's own webhook verifier, and an
app's key held to its app."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from svix.api import (
    ApplicationIn,
    AppPortalAccessIn,
    EndpointCreateOptions,
    EndpointHeadersPatchIn,
    EndpointIn,
    EventTypeIn,
    MessageAttemptListByMsgOptions,
    MessageCreateOptions,
    MessageGetOptions,
    MessageIn,
    MessageListOptions,
    RecoverIn,
    SvixAsync,
    SvixOptions,
)
from svix.exceptions import HttpError, HTTPValidationError
from svix.models import ApplicationPatch, EndpointSecretRotateIn, EventTypePatch
from svix.webhooks import Webhook, WebhookVerificationError

from tests.helpers import Receiver
from tests.helpers.svix import ADMIN, app_key, running_relay
from tests.helpers.worker import until

pytestmark = pytest.mark.realredis


def client(url: str, token: str) -> SvixAsync:
    return SvixAsync(token, SvixOptions(server_url=url, retry_schedule=[]))


async def relay_get(url: str, path: str) -> tuple[int, Any]:
    """A read of relay's own API, as the operator."""
    async with aiohttp.ClientSession() as http:
        async with http.get(url + path, headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
            return resp.status, await resp.json()


def verified(secret: str, request: Any) -> dict[str, Any]:
    """The delivery's body, after the Svix verifier accepted its signature."""
    Webhook(secret).verify(request.body, request.headers)
    data: dict[str, Any] = json.loads(request.body)
    return data


async def test_the_python_sdk_runs_the_core_flow(
    redis_server: Any, receiver: Receiver, tmp_path: Path
) -> None:
    async with running_relay(redis_server.url, tmp_path) as url:
        svix = client(url, ADMIN)

        # applications: the uid is the relay app, and the id
        app = await svix.application.create(ApplicationIn(name="Shop", uid="shop"))
        assert (app.id, app.uid, app.name, app.metadata) == ("shop", "shop", "Shop", {})
        again = await svix.application.get_or_create(ApplicationIn(name="Other", uid="shop"))
        assert (again.id, again.name) == ("shop", "Shop")
        with pytest.raises(HttpError) as taken:
            await svix.application.create(ApplicationIn(name="Shop", uid="shop"))
        assert (taken.value.status_code, taken.value.code) == (409, "conflict")
        patched = await svix.application.patch("shop", ApplicationPatch(metadata={"tier": "1"}))
        assert (patched.name, patched.metadata) == ("Shop", {"tier": "1"})
        made = await svix.application.create(ApplicationIn(name="No uid"))
        assert made.id.startswith("app_") and made.uid is None
        listed = await svix.application.list()
        assert {a.id for a in listed.data} == {"shop", made.id} and listed.done
        await svix.application.delete(made.id)
        with pytest.raises(HttpError) as gone:
            await svix.application.get(made.id)
        assert (gone.value.status_code, gone.value.code) == (404, "not_found")

        # endpoints: one idempotency key, one endpoint
        spec = EndpointIn(url=receiver.url + "/hook", event_types=["order.paid"])
        once = EndpointCreateOptions(idempotency_key="create-hook")
        ep = await svix.endpoint.create("shop", spec, once)
        assert (await svix.endpoint.create("shop", spec, once)).id == ep.id
        assert [e.id for e in (await svix.endpoint.list("shop")).data] == [ep.id]
        assert (ep.event_types, ep.disabled, ep.metadata) == (["order.paid"], False, {})
        secret = (await svix.endpoint.get_secret("shop", ep.id)).key
        assert secret.startswith("whsec_")
        await svix.endpoint.patch_headers(
            "shop", ep.id, EndpointHeadersPatchIn(headers={"x-team": "billing"})
        )
        assert (await svix.endpoint.get_headers("shop", ep.id)).headers == {"x-team": "billing"}

        # messages: eventId is the idempotency key
        msg = await svix.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 1}, event_id="o-1")
        )
        assert msg.id.startswith("evt_") and msg.event_id == "o-1"
        repeat = await svix.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 1}, event_id="o-1")
        )
        assert repeat.id == msg.id
        keyed = MessageCreateOptions(idempotency_key="send-2")
        second = await svix.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 2}), keyed
        )
        assert (await svix.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 2}), keyed
        )).id == second.id  # fmt: skip
        await receiver.wait_for(2, path="/hook")
        got = sorted(verified(secret, r)["data"]["order"] for r in receiver.for_path("/hook"))
        assert got == [1, 2]
        first = next(r for r in receiver.for_path("/hook") if r.headers["webhook-id"] == msg.id)
        assert first.headers["x-team"] == "billing"
        with pytest.raises(WebhookVerificationError):
            Webhook("whsec_" + "A" * 32).verify(first.body, first.headers)

        content = MessageGetOptions(with_content=True)
        assert (await svix.message.get("shop", msg.id, content)).payload == {"order": 1}
        assert (await svix.message.get("shop", msg.id)).payload == {}  # the SDK's default
        assert (await svix.message.get("shop", "o-1")).id == msg.id
        assert (await svix.message.get("shop", msg.id)).event_id == "o-1"
        page = await svix.message.list("shop", MessageListOptions(limit=1))
        assert [(m.id, m.event_id) for m in page.data] == [(second.id, "send-2")]
        assert not page.done
        rest = await svix.message.list("shop", MessageListOptions(limit=1, iterator=page.iterator))
        assert [(m.id, m.event_id) for m in rest.data] == [(msg.id, "o-1")]
        plain = await svix.message.create("shop", MessageIn(event_type="order.none", payload={}))
        assert plain.event_id is None  # the SDK's auto_ key is no eventId
        assert (await svix.message.get("shop", plain.id)).event_id is None
        typed = await svix.message.list("shop", MessageListOptions(event_types=["order.none"]))
        assert typed.data == [] and typed.done

        # attempts
        async def attempts() -> list[Any]:
            found = await svix.message_attempt.list_by_msg("shop", msg.id)
            return found.data

        tried = await until(attempts)
        assert (tried[0].status, tried[0].response_status_code, tried[0].endpoint_id) == (
            0,
            200,
            ep.id,
        )
        assert (await svix.message_attempt.get("shop", msg.id, tried[0].id)).id == tried[0].id
        by_ep = await svix.message_attempt.list_by_endpoint("shop", ep.id)
        assert {a.msg_id for a in by_ep.data} == {msg.id, second.id}
        dest = await svix.message_attempt.list_attempted_destinations("shop", msg.id)
        assert [(d.id, d.status) for d in dest.data] == [(ep.id, 0)]
        sent = await svix.message_attempt.list_attempted_messages("shop", ep.id)
        assert {m.id for m in sent.data} == {msg.id, second.id}

        # resend: the same message, signed again
        await svix.message_attempt.resend("shop", msg.id, ep.id)
        await receiver.wait_for(3, path="/hook")
        assert verified(secret, receiver.for_path("/hook")[-1])["id"] == msg.id

        # rotate: the new secret verifies what follows (the old one signs beside it)
        await svix.endpoint.rotate_secret("shop", ep.id, EndpointSecretRotateIn())
        fresh = (await svix.endpoint.get_secret("shop", ep.id)).key
        assert fresh != secret
        third = await svix.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 3})
        )
        await receiver.wait_for(4, path="/hook")
        last = receiver.for_path("/hook")[-1]
        assert last.headers["webhook-id"] == third.id
        assert verified(fresh, last)["data"] == {"order": 3}
        assert verified(secret, last)["data"] == {"order": 3}

        # recover: what died at a failing endpoint goes again once it answers
        failing = True

        def flaky(request: web.Request) -> web.Response:
            return web.Response(status=500 if failing else 200)

        receiver.responses["/flaky"] = flaky
        start = datetime.now(UTC) - timedelta(seconds=5)
        bad = await svix.endpoint.create(
            "shop", EndpointIn(url=receiver.url + "/flaky", event_types=["refund.made"])
        )
        dead = await svix.message.create(
            "shop", MessageIn(event_type="refund.made", payload={"refund": 1})
        )

        async def failed() -> bool:
            found = await svix.message_attempt.list_by_msg(
                "shop", dead.id, MessageAttemptListByMsgOptions(status=2)
            )
            return len(found.data) == 2  # both attempts made: the delivery is dead

        await until(failed)
        failing = False
        task = await svix.endpoint.recover("shop", bad.id, RecoverIn(since=start))
        assert (task.status, task.task) == ("finished", "endpoint.recover")
        await receiver.wait_for(3, path="/flaky")
        bad_secret = (await svix.endpoint.get_secret("shop", bad.id)).key
        assert verified(bad_secret, receiver.for_path("/flaky")[-1])["id"] == dead.id

        # event types: relay's catalog, the schema as version "1"
        schema = {"type": "object", "required": ["order"]}
        et = await svix.event_type.create(
            EventTypeIn(name="order.paid", description="paid", schemas={"1": schema})
        )
        assert (et.name, et.schemas, et.deprecated) == ("order.paid", {"1": schema}, False)
        with pytest.raises(HTTPValidationError) as invalid:
            await svix.message.create("shop", MessageIn(event_type="order.paid", payload={}))
        assert invalid.value.status_code == 422
        assert invalid.value.to_dict()["code"] == "payload_invalid"
        et = await svix.event_type.patch("order.paid", EventTypePatch(deprecated=True))
        assert et.deprecated
        assert [t.name for t in (await svix.event_type.list()).data] == ["order.paid"]

        # deliverAt: relay's scheduled delivery; nothing is attempted before it
        later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
        scheduled = await svix.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 8}, deliver_at=later)
        )
        assert scheduled.deliver_at == later
        assert (await svix.message.get("shop", scheduled.id)).deliver_at == later
        status, row = await relay_get(url, f"/v1/events/{scheduled.id}?expand=deliveries")
        assert status == 200 and [d["status"] for d in row["deliveries"]] == ["scheduled"]

        # what relay does not have: a clear 422, nothing sent
        for refused in (MessageIn(event_type="order.paid", payload={"order": 9}, channels=["eu"]),):
            with pytest.raises(HTTPValidationError) as no:
                await svix.message.create("shop", refused)
            assert no.value.status_code == 422
            assert no.value.to_dict()["code"] == "unsupported"

        # portal access: relay's portal, its token a bearer token of the app
        access = await svix.authentication.app_portal_access("shop", AppPortalAccessIn())
        assert access.url.startswith(url + "/portal/#token=rp_")
        assert access.url.endswith(access.token)
        portal = client(url, access.token)
        assert {e.id for e in (await portal.endpoint.list("shop")).data} == {ep.id, bad.id}

        # an app's key: its app only, through the SDK as through /v1
        await svix.application.create(ApplicationIn(name="Rival", uid="rival"))
        rival = await svix.endpoint.create("rival", EndpointIn(url=receiver.url + "/rival"))
        key = client(url, await app_key(url, "shop", ["publish", "manage"]))
        assert [a.id for a in (await key.application.list()).data] == ["shop"]
        assert (await key.message.create(
            "shop", MessageIn(event_type="order.paid", payload={"order": 4})
        )).id.startswith("evt_")  # fmt: skip
        for call in (
            key.application.get("rival"),
            key.endpoint.list("rival"),
            key.endpoint.get("rival", rival.id),
            key.endpoint.get("shop", rival.id),
            key.endpoint.get_secret("rival", rival.id),
            key.message.create("rival", MessageIn(event_type="order.paid", payload={})),
            key.message.get("rival", msg.id),
            key.authentication.app_portal_access("rival", AppPortalAccessIn()),
        ):
            with pytest.raises(HttpError) as hidden:
                await call
            assert (hidden.value.status_code, hidden.value.code) == (404, "not_found")
        assert receiver.for_path("/rival") == []


ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "tools" / "node_modules" / "svix" / "dist" / "index.mjs"


async def test_the_javascript_sdk_runs_the_core_flow(redis_server: Any, tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed: the JavaScript SDK cannot run")
    assert SDK.exists(), "the svix npm package is not installed: `make setup` runs npm ci"
    async with running_relay(redis_server.url, tmp_path) as url:
        env = {
            **os.environ,
            "RELAY_URL": url,
            "RELAY_TOKEN": ADMIN,
            "KEY_TOKEN": await app_key(url, "shop", ["publish", "manage"]),
            "SVIX_MODULE": str(SDK),
        }
        proc = await asyncio.create_subprocess_exec(
            "node",
            str(ROOT / "tests" / "data" / "svix_flow.mjs"),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert out.decode().strip() == "ok"
