"""The OpenAPI document: a valid description that tools accept, and true of the API.

* the document itself: valid OpenAPI (openapi-spec-validator), every operation named,
  tagged, summarised and described, its path parameters declared, its errors listed with
  their codes and the error schema, examples for every request body; no static file and
  no trailing-slash path; Redocly's recommended rules find no error; openapi-python-client
  generates one function per operation without a warning;
* against the running API: every route is documented, every documented answer is
  produced by a real request and matches its schema, and every error code an answer
  carries is one the document lists for that status.

The schemas are checked with jsonschema (OpenAPI 3.1 schemas are JSON Schema 2020-12),
strictly: an object schema that does not say otherwise gets ``additionalProperties:
false``, so a field the route returns but the model does not document fails too.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec

from relay.api import create_app
from relay.api.common import PAGES
from relay.api.ops import openapi_document
from relay.delivery.worker import Worker
from relay.domain import access, ids
from relay.queue.store import Store, connect
from relay.redisproc import RedisServer, free_port
from tests.helpers import make_settings
from tests.helpers.openapi_svix import concrete, svix_answers

ROOT = Path(__file__).resolve().parents[2]
UNKNOWN_DLV = "dlv_01M8NRGJEW00N08E236MWQ75WB"
UNKNOWN_EVT = "evt_01M8NRGJEW00N08E236MWQ75WB"
UNKNOWN_EP = "ep_01M8NRGJEW00N08E236MWQ75WB"


# ---------------------------------------------------------------------- the document


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(m.upper(), p, op) for p, ops in doc["paths"].items() for m, op in ops.items()]


def error_key(path: str) -> str:
    """The field of an error answer holding its code: Svix's ``code`` on /api/v1."""
    return "code" if path.startswith("/api/v1/") else "error"


def test_the_document_is_valid_openapi() -> None:
    validate_spec(openapi_document())


def test_every_operation_is_named_tagged_summarised_and_described() -> None:
    doc = openapi_document()
    declared = {t["name"]: t.get("description") for t in doc.get("tags", [])}
    assert all(declared.values()), f"tags without a description: {declared}"
    ids = [op.get("operationId") for _, _, op in operations(doc)]
    assert len(ids) == len(set(ids)), f"operationIds used twice: {sorted(ids)}"
    wrong = []
    for method, path, op in operations(doc):
        where = f"{method} {path}"
        if not re.fullmatch(r"[a-z][A-Za-z0-9]+", op.get("operationId") or ""):
            wrong.append(f"{where}: operationId {op.get('operationId')!r}")
        tags = op.get("tags") or []
        if len(tags) != 1 or tags[0] not in declared:
            wrong.append(f"{where}: tags {tags} (one, declared in the document's tags)")
        for field in ("summary", "description"):
            if not (op.get(field) or "").strip():
                wrong.append(f"{where}: no {field}")
    assert wrong == []
    used = {op["tags"][0] for _, _, op in operations(doc)}
    assert used == set(declared), "tags declared and never used, or the reverse"


def test_no_static_file_and_no_trailing_slash() -> None:
    paths = list(openapi_document()["paths"])
    assert [p for p in paths if p != "/" and p.endswith("/")] == []
    statics = [p for p in paths if re.search(r"\.(js|css|html|png|svg|ico)$", p)]
    pages = [p for p in paths if p in ("/ui", "/portal") or p.startswith(("/ui/", "/portal/"))]
    assert statics == [] and pages == [], "the dashboard's and portal's files are no operations"


def test_every_path_parameter_is_declared() -> None:
    wrong = []
    for method, path, op in operations(openapi_document()):
        names = re.findall(r"\{([^}]+)\}", path)
        params = {p["name"]: p for p in op.get("parameters", []) if p["in"] == "path"}
        if sorted(params) != sorted(names):
            wrong.append(f"{method} {path}: path parameters {sorted(params)}, path has {names}")
        for name, p in params.items():
            if not (p.get("required") and p.get("description") and p.get("schema")):
                wrong.append(f"{method} {path}: {name} not required, described and typed")
    assert wrong == []


def error_codes(response: dict[str, Any]) -> list[str]:
    """The error codes a documented error answer lists: one example per code."""
    examples = response.get("content", {}).get("application/json", {}).get("examples", {})
    return [e["value"].get("error", e["value"].get("code")) for e in examples.values()]


def test_every_error_answer_lists_its_codes_with_the_error_schema() -> None:
    doc = openapi_document()
    wrong = []
    for method, path, op in operations(doc):
        model = "SvixErrorOut" if path.startswith("/api/v1/") else "ErrorOut"
        error = {"$ref": f"#/components/schemas/{model}"}
        for status, response in op["responses"].items():
            if int(status) < 400 or path == "/readyz":  # /readyz's 503 is its own answer
                continue
            where = f"{method} {path} {status}"
            content = response.get("content", {}).get("application/json", {})
            if content.get("schema") != error:
                wrong.append(f"{where}: schema {content.get('schema')}")
            codes = error_codes(response)
            if not codes or any(f"`{c}`" not in response["description"] for c in codes):
                wrong.append(f"{where}: codes {codes} not listed in {response['description']!r}")
            for example in content.get("examples", {}).values():
                schema = {**error, "components": doc["components"]}
                if not Draft202012Validator(schema).is_valid(example["value"]):
                    wrong.append(f"{where}: example {example['value']} is not an ErrorOut")
        if op.get("security"):
            for status in ("401", "403", "429", "503"):
                if status not in op["responses"]:
                    wrong.append(f"{method} {path}: an authenticated route without {status}")
    assert wrong == []


def test_bearer_security_and_servers_are_declared() -> None:
    doc = openapi_document()
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    assert doc["servers"] and all(s["url"] for s in doc["servers"])
    for method, path, op in operations(doc):
        expected = [{"bearer": []}] if path.startswith(("/v1/", "/api/v1/")) else []
        assert op.get("security") == expected, f"{method} {path}: security {op.get('security')}"


def test_every_request_body_has_examples_that_match_its_schema() -> None:
    doc = openapi_document()
    wrong = []
    for method, path, op in operations(doc):
        if "requestBody" not in op:
            continue
        content = op["requestBody"]["content"]["application/json"]
        examples = content.get("examples") or {}
        if not examples:
            wrong.append(f"{method} {path}: no example")
        schema = {**content["schema"], "components": doc["components"]}
        for name, example in examples.items():
            if not (example.get("summary") and "value" in example):
                wrong.append(f"{method} {path} {name}: a summary and a value")
            elif not Draft202012Validator(schema).is_valid(example["value"]):
                wrong.append(f"{method} {path} {name}: does not match the schema")
    assert wrong == []


# ---------------------------------------------------------------------- tools accept it

TOOLS = ROOT / "tools"
REDOCLY = TOOLS / "node_modules" / ".bin" / "redocly"


def test_redocly_recommended_rules_find_no_error(tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: Redocly's linter cannot run")
    assert REDOCLY.exists(), "Redocly is not installed: `make setup` runs npm ci in tools/"
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(openapi_document()))
    env = {**os.environ, "REDOCLY_TELEMETRY": "off", "REDOCLY_SUPPRESS_UPDATE_NOTICE": "true"}
    run = subprocess.run(
        [str(REDOCLY), "lint", "--extends=recommended", "--format=json", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    report = json.loads(run.stdout)
    problems = [
        f"{p['severity']} {p['ruleId']}: {p['message']} at {p['location'][0]['pointer']}"
        for p in report["problems"]
    ]
    assert report["totals"]["errors"] == 0, "\n".join(problems)
    warned = {(p["ruleId"], p["location"][0]["pointer"]) for p in report["problems"]}
    assert warned <= ACCEPTED_WARNINGS, "\n".join(problems)


# Warnings of the recommended rules that stay, each for a reason: the open probes and
# documents have no 4xx answer to describe.
ACCEPTED_WARNINGS = {
    ("operation-4xx-response", f"#/paths/~1{path}/get/responses")
    for path in ("healthz", "readyz", "metrics", "openapi.json")
}


def snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_a_generated_python_client_has_one_function_per_operation(tmp_path: Path) -> None:
    doc = openapi_document()
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(doc))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    started = time.monotonic()
    run = subprocess.run(
        [str(bin_dir / "openapi-python-client"), "generate", "--path", str(spec)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert "warning" not in output.lower(), output
    assert time.monotonic() - started < 120, "not stalled"
    (package,) = [p for p in (tmp_path / "relay-client").iterdir() if p.name.endswith("client")]
    modules = {m.stem for m in (package / "api").rglob("*.py") if m.name != "__init__.py"}
    expected = {snake(op["operationId"]) for _, _, op in operations(doc)}
    assert modules == expected
    for module in (package / "api").rglob("*.py"):
        if module.name != "__init__.py":
            text = module.read_text()
            assert "def sync(" in text or "def sync_detailed(" in text, module
            assert "async def asyncio_detailed(" in text, module


def strict(doc: dict[str, Any]) -> dict[str, Any]:
    """The components, with additionalProperties: false wherever a schema is silent."""
    components = copy.deepcopy(doc["components"])

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(components["schemas"])
    return components


class Checker:
    """Makes requests, checks each answer against the document, records what it saw."""

    def __init__(self, base: str, doc: dict[str, Any], session: aiohttp.ClientSession) -> None:
        self.base = base
        self.doc = doc
        self.session = session
        self.components = strict(doc)
        self.seen: set[tuple[str, str, int]] = set()
        self.mismatches: list[str] = []  # collected, so one run shows all of them

    async def __call__(
        self, method: str, template: str, status: int, path: str | None = None, **kw: Any
    ) -> Any:
        session = kw.pop("session", self.session)
        async with session.request(method, self.base + (path or template), **kw) as resp:
            raw = await resp.read()
            ctype = resp.headers.get("Content-Type", "")
            got = resp.status
        where = f"{method} {path or template}"
        assert got == status, f"{where}: {got} {raw[:300]!r}"
        op = self.doc["paths"][template][method.lower()]
        documented = op["responses"].get(str(status))
        assert documented is not None, f"{where}: status {status} is not documented"
        self.seen.add((method, template, status))
        content = documented.get("content")
        if content is None:
            return raw
        if "application/json" not in content:  # /metrics
            assert any(ctype.startswith(media) for media in content), f"{where}: {ctype}"
            return raw
        assert ctype.startswith("application/json"), f"{where}: {ctype}"
        data = orjson.loads(raw)
        code = data.get(error_key(template)) if status >= 400 else None
        if status >= 400 and template != "/readyz" and code not in error_codes(documented):
            self.mismatches.append(f"{where} -> {status}: code {code} is not documented")
        schema = {**content["application/json"]["schema"], "components": self.components}
        for e in sorted(Draft202012Validator(schema).iter_errors(data), key=str):
            self.mismatches.append(
                f"{where} -> {status}: {'/'.join(map(str, e.absolute_path))}: {e.message}"
            )
        return data


@pytest.fixture
async def setup(make_store: Any, make_api: Any, receiver: Any) -> Any:
    store = await make_store(max_payload_bytes=1024)
    api = await make_api(store)
    async with aiohttp.ClientSession() as anon, api.session.get(api.url + "/openapi.json") as r:
        doc = await r.json()
        yield store, api, doc, Checker(api.url, doc, api.session), anon


def documented(doc: dict[str, Any]) -> set[tuple[str, str, int]]:
    return {
        (method.upper(), path, int(status))
        for path, ops in doc["paths"].items()
        for method, op in ops.items()
        for status in op["responses"]
    }


@pytest.mark.realredis
async def test_every_route_is_in_the_document(setup: Any) -> None:
    store, _, doc, _, _ = setup
    app = create_app(store.settings, store)
    pages = {page.handler for page in PAGES}  # the dashboard's, the portal's, the docs' files
    routes = {
        (r.method, r.resource.canonical)
        for r in app.router.routes()
        if r.resource is not None and r.method != "HEAD" and r.handler not in pages
    }
    assert routes
    for method, path in routes:
        assert method.lower() in doc["paths"].get(path, {}), f"{method} {path} not documented"
    listed = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert listed == routes  # and nothing documented that does not exist


@pytest.mark.realredis
async def test_every_documented_answer_matches(
    setup: Any, receiver: Any, make_store: Any, make_api: Any, monkeypatch: Any
) -> None:
    store, _, doc, check, anon = setup
    receiver.responses["/gone"] = lambda request: web.Response(status=410)
    big = b'{"url": "' + b"x" * 70_000 + b'"}'  # beyond the server's request size limit

    # -- endpoints
    ok = await check("POST", "/v1/endpoints", 201, json={"url": receiver.url + "/ok"})
    gone = await check("POST", "/v1/endpoints", 201, json={"url": receiver.url + "/gone"})
    doomed = await check("POST", "/v1/endpoints", 201, json={"url": receiver.url + "/x"})
    await check("POST", "/v1/endpoints", 400, data=b"{", headers=json_type())
    await check("POST", "/v1/endpoints", 413, data=big, headers=json_type())
    await check("POST", "/v1/endpoints", 422, json={"url": "ftp://x"})
    await check("POST", "/v1/endpoints", 401, json={"url": "http://x"}, session=anon)
    await check("GET", "/v1/endpoints", 200)
    await check("GET", "/v1/endpoints", 422, path="/v1/endpoints?app=%20bad")
    await check("GET", "/v1/endpoints", 401, session=anon)
    one = "/v1/endpoints/{id}"
    await check("GET", one, 200, path=f"/v1/endpoints/{ok['id']}")
    await check("GET", one, 404, path=f"/v1/endpoints/{UNKNOWN_EP}")
    await check("GET", one, 401, path=f"/v1/endpoints/{ok['id']}", session=anon)
    await check("PATCH", one, 200, path=f"/v1/endpoints/{ok['id']}", json={"description": "d"})
    await check("PATCH", one, 404, path=f"/v1/endpoints/{UNKNOWN_EP}", json={})
    await check("PATCH", one, 400, path=f"/v1/endpoints/{ok['id']}", data=b"[", headers=json_type())
    await check("PATCH", one, 413, path=f"/v1/endpoints/{ok['id']}", data=big, headers=json_type())
    await check("PATCH", one, 422, path=f"/v1/endpoints/{ok['id']}", json={"url": None})
    await check("PATCH", one, 401, path=f"/v1/endpoints/{ok['id']}", json={}, session=anon)
    await check("DELETE", one, 204, path=f"/v1/endpoints/{doomed['id']}")
    await check("DELETE", one, 404, path=f"/v1/endpoints/{doomed['id']}")
    await check("DELETE", one, 401, path=f"/v1/endpoints/{ok['id']}", session=anon)
    for sub, method in (
        ("secret", "GET"),
        ("headers", "GET"),
        ("url", "GET"),
        ("rotate-secret", "POST"),
    ):
        template = "/v1/endpoints/{id}/" + sub
        await check(method, template, 200, path=f"/v1/endpoints/{ok['id']}/{sub}")
        await check(method, template, 404, path=f"/v1/endpoints/{UNKNOWN_EP}/{sub}")
        await check(method, template, 401, path=f"/v1/endpoints/{ok['id']}/{sub}", session=anon)
    # a second rotation within the minute (rotation is rate-limited)
    rotate = "/v1/endpoints/{id}/rotate-secret"
    await check("POST", rotate, 429, path=f"/v1/endpoints/{ok['id']}/rotate-secret")

    # -- events; then a worker makes one delivery succeeded and one dead
    event = {"type": "order.paid", "payload": {"n": 1}, "endpoint_ids": [ok["id"], gone["id"]]}
    key = {"Idempotency-Key": "k1"}
    first = await check("POST", "/v1/events", 201, json=event, headers=key)
    await check("POST", "/v1/events", 200, json=event, headers=key)
    await check("POST", "/v1/events", 409, json={**event, "payload": 2}, headers=key)
    await check("POST", "/v1/events", 413, json={"type": "t", "payload": "x" * 2000})
    await check("POST", "/v1/events", 400, data=b"nope", headers=json_type())
    await check("POST", "/v1/events", 422, json={"payload": 1})
    await check("POST", "/v1/events", 401, json=event, session=anon)
    batch = "/v1/events/batch"
    items = [{**event, "idempotency_key": "k1"}, {"payload": 1, "idempotency_key": "k2"}]
    answers = await check("POST", batch, 200, json={"events": items})
    assert [r["status"] for r in answers["results"]] == [200, 422], answers
    await check("POST", batch, 400, data=b"nope", headers=json_type())
    await check("POST", batch, 413, data=big, headers=json_type())
    await check("POST", batch, 422, json={"events": []})
    await check("POST", batch, 401, json={"events": items}, session=anon)
    await Worker(store, store.settings).run(asyncio.Event(), burst=True)
    by_ep = {d["endpoint_id"]: d["id"] for d in first["deliveries"]}
    succeeded, dead = by_ep[ok["id"]], by_ep[gone["id"]]
    later = await check("POST", "/v1/events", 201, json={**event, "endpoint_ids": [ok["id"]]})
    pending = later["deliveries"][0]["id"]
    assert (await store.get_delivery(dead) or {})["status"] == "dead"
    assert (await store.get_delivery(succeeded) or {})["status"] == "succeeded"

    evt = "/v1/events/{id}"
    await check("GET", evt, 200, path=f"/v1/events/{first['id']}")
    await check("GET", evt, 404, path=f"/v1/events/{UNKNOWN_EVT}")
    await check("GET", evt, 401, path=f"/v1/events/{first['id']}", session=anon)
    page = await check("GET", evt, 200, path=f"/v1/events/{first['id']}?expand=deliveries")
    assert {d["status"] for d in page["deliveries"]} == {"succeeded", "dead"}
    await check("GET", evt, 422, path=f"/v1/events/{first['id']}?expand=everything")
    events = "/v1/events"
    listed = await check("GET", events, 200, path=events + "?limit=1")
    assert listed["next_cursor"]
    await check("GET", events, 200, path=events + "?idempotency_key=k1&status=dead")
    await check("GET", events, 422, path=events + "?since=5&until=5")
    await check("GET", events, 400, path=events + "?cursor=WzEuMCwiZXZ0X3giXQ")
    await check("GET", events, 401, session=anon)
    stats = "/v1/endpoints/{id}/stats"
    await check("GET", stats, 200, path=f"/v1/endpoints/{gone['id']}/stats?window=24h")
    await check("GET", stats, 422, path=f"/v1/endpoints/{gone['id']}/stats?window=2d")
    await check("GET", stats, 404, path=f"/v1/endpoints/{UNKNOWN_EP}/stats")
    await check("GET", stats, 401, path=f"/v1/endpoints/{gone['id']}/stats", session=anon)

    # -- deliveries
    page = await check("GET", "/v1/deliveries", 200, path="/v1/deliveries?limit=2")
    assert page["next_cursor"]
    await check(
        "GET", "/v1/deliveries", 200, path=f"/v1/deliveries?status=dead&endpoint_id={gone['id']}"
    )
    await check("GET", "/v1/deliveries", 422, path="/v1/deliveries?status=lost")
    await check("GET", "/v1/deliveries", 400, path="/v1/deliveries?cursor=WzEuMCwiZGx2X3giXQ")
    await check("GET", "/v1/deliveries", 401, session=anon)
    search = "/v1/archive/deliveries"  # no archive here: an empty page
    await check("GET", search, 200, path=search + "?status=dead&status_code=500")
    await check("GET", search, 400, path=search + "?payload=%5B1%5D")
    await check("GET", search, 400, path=search + "?cursor=WzEuMCwiZGx2X3giXQ")
    await check("GET", search, 422, path=search + "?status=pending")
    await check("GET", search, 401, session=anon)
    dlv = "/v1/deliveries/{id}"
    for d in (succeeded, dead, pending):
        await check("GET", dlv, 200, path=f"/v1/deliveries/{d}")
    await check("GET", dlv, 404, path=f"/v1/deliveries/{UNKNOWN_DLV}")
    await check("GET", dlv, 401, path=f"/v1/deliveries/{dead}", session=anon)
    rep = "/v1/deliveries/{id}/replay"
    await check("POST", rep, 409, path=f"/v1/deliveries/{pending}/replay")
    await check("POST", rep, 404, path=f"/v1/deliveries/{UNKNOWN_DLV}/replay")
    await check("POST", rep, 401, path=f"/v1/deliveries/{dead}/replay", session=anon)
    await check("POST", rep, 202, path=f"/v1/deliveries/{succeeded}/replay")
    dis = "/v1/deliveries/{id}/discard"  # a dead one is marked, anything else 409
    await check("POST", dis, 409, path=f"/v1/deliveries/{pending}/discard")
    await check("POST", dis, 404, path=f"/v1/deliveries/{UNKNOWN_DLV}/discard")
    await check("POST", dis, 401, path=f"/v1/deliveries/{dead}/discard", session=anon)
    await check("POST", dis, 202, path=f"/v1/deliveries/{dead}/discard")
    rec = "/v1/endpoints/{id}/recover"
    await check(
        "POST", rec, 400, path=f"/v1/endpoints/{gone['id']}/recover", data=b"{", headers=json_type()
    )
    await check(
        "POST", rec, 413, path=f"/v1/endpoints/{gone['id']}/recover", data=big, headers=json_type()
    )
    await check("POST", rec, 422, path=f"/v1/endpoints/{gone['id']}/recover", json={"since": "x"})
    await check("POST", rec, 404, path=f"/v1/endpoints/{UNKNOWN_EP}/recover")
    await check("POST", rec, 401, path=f"/v1/endpoints/{gone['id']}/recover", session=anon)
    assert (await check("POST", rec, 202, path=f"/v1/endpoints/{gone['id']}/recover")) == {
        "recovered": 1
    }

    # -- dashboard JSON
    await check("GET", "/v1/ui/overview", 200)
    await check("GET", "/v1/ui/overview", 401, session=anon)
    await check("GET", "/v1/ui/deliveries", 200, path="/v1/ui/deliveries?type=order.*")
    await check("GET", "/v1/ui/deliveries", 422, path="/v1/ui/deliveries?limit=0")
    await check("GET", "/v1/ui/deliveries", 400, path="/v1/ui/deliveries?cursor=nope")
    await check("GET", "/v1/ui/deliveries", 401, session=anon)
    view = "/v1/ui/deliveries/{id}"
    for d in (succeeded, dead, pending):
        await check("GET", view, 200, path=f"/v1/ui/deliveries/{d}")
    await check("GET", view, 404, path=f"/v1/ui/deliveries/{UNKNOWN_DLV}")
    await check("GET", view, 401, path=f"/v1/ui/deliveries/{dead}", session=anon)
    await check("GET", "/v1/ui/endpoint-health", 200)
    await check("GET", "/v1/ui/endpoint-health", 401, session=anon)

    # -- replay jobs
    window = {"since": "2026-01-01T00:00:00Z", "until": "2026-12-31T00:00:00Z"}
    await check("POST", "/v1/replays", 200, json={**window, "dry_run": True})
    job = await check("POST", "/v1/replays", 202, json=window)
    await check("POST", "/v1/replays", 422, json={**window, "status": ["pending"]})
    await check("POST", "/v1/replays", 400, data=b"{", headers=json_type())
    await check("POST", "/v1/replays", 413, data=big, headers=json_type())
    await check("POST", "/v1/replays", 401, json=window, session=anon)
    await check("GET", "/v1/replays", 200)
    await check("GET", "/v1/replays", 401, session=anon)
    rpl = "/v1/replays/{id}"
    await check("GET", rpl, 200, path=f"/v1/replays/{job['id']}")
    await check("GET", rpl, 404, path="/v1/replays/rpl_nope")
    await check("GET", rpl, 401, path=f"/v1/replays/{job['id']}", session=anon)
    cancel = "/v1/replays/{id}/cancel"
    await check("POST", cancel, 200, path=f"/v1/replays/{job['id']}/cancel")
    await check("POST", cancel, 409, path=f"/v1/replays/{job['id']}/cancel")
    await check("POST", cancel, 404, path="/v1/replays/rpl_nope/cancel")
    await check("POST", cancel, 401, path=f"/v1/replays/{job['id']}/cancel", session=anon)

    # -- API keys, portal sessions, test events
    keys = "/v1/api-keys"
    made = await check("POST", keys, 201, json={"app": "default", "scopes": ["read"]})
    pub = await check("POST", keys, 201, json={"app": "default", "scopes": ["publish"]})
    await check("POST", keys, 400, data=b"{", headers=json_type())
    await check("POST", keys, 413, data=big, headers=json_type())
    await check("POST", keys, 422, json={"app": "default", "scopes": ["root"]})
    await check("POST", keys, 401, json={"app": "a", "scopes": ["read"]}, session=anon)
    bearer = {"Authorization": f"Bearer {made['token']}"}
    as_pub = {"Authorization": f"Bearer {pub['token']}"}
    await check("POST", keys, 403, json={"app": "a", "scopes": ["read"]}, headers=bearer)
    await check("GET", keys, 200, path=keys + "?app=default")
    await check("GET", keys, 422, path=keys + "?app=%20bad")
    await check("GET", keys, 401, session=anon)
    await check("GET", keys, 403, headers=bearer)
    with monkeypatch.context() as m:  # a key id drawn twice (96 random bits: never seen)
        m.setattr(access, "new_key_id", lambda: pub["id"])
        await check("POST", keys, 409, json={"app": "default", "scopes": ["read"]})
    one_key = "/v1/api-keys/{id}"
    await check("DELETE", one_key, 403, path=f"{keys}/{made['id']}", headers=bearer)
    await check("DELETE", one_key, 401, path=f"{keys}/{made['id']}", session=anon)
    await check("DELETE", one_key, 204, path=f"{keys}/{made['id']}")
    await check("DELETE", one_key, 404, path=f"{keys}/{made['id']}")
    portal = "/v1/apps/{app}/portal"
    await check("POST", portal, 201, path="/v1/apps/default/portal")
    await check("POST", portal, 422, path="/v1/apps/%20bad/portal")
    elsewhere = {"Host": "relay.example.com"}  # no RELAY_PUBLIC_URL, not a loopback Host
    await check("POST", portal, 400, path="/v1/apps/default/portal", headers=elsewhere)
    await check("POST", portal, 401, path="/v1/apps/default/portal", session=anon)
    await check("POST", portal, 403, path="/v1/apps/default/portal", headers=as_pub)
    manager = await check("POST", keys, 201, json={"app": "other", "scopes": ["manage"]})
    as_other = {"Authorization": f"Bearer {manager['token']}"}
    await check("POST", portal, 404, path="/v1/apps/default/portal", headers=as_other)
    brand = {"branding": {"name": "Acme", "accent_color": "#0a7cff"}}
    opened = await check("POST", portal, 201, path="/v1/apps/default/portal", json=brand)
    bad = {"branding": {"logo_url": "http://acme.example/x.png"}}
    await check("POST", portal, 422, path="/v1/apps/default/portal", json=bad)
    await check("POST", portal, 400, path="/v1/apps/default/portal", data=b"{", headers=json_type())
    await check("POST", portal, 413, path="/v1/apps/default/portal", data=big, headers=json_type())
    mine = "/v1/portal/session"
    session = await check("GET", mine, 200, headers=auth(opened))
    assert session["branding"] == brand["branding"] and session["app"] == "default"
    await check("GET", mine, 404)
    await check("GET", mine, 401, session=anon)
    test = "/v1/endpoints/{id}/test"
    await check("POST", test, 201, path=f"/v1/endpoints/{ok['id']}/test")
    await check("POST", test, 404, path=f"/v1/endpoints/{UNKNOWN_EP}/test")
    await check("POST", test, 401, path=f"/v1/endpoints/{ok['id']}/test", session=anon)
    off = await check("POST", "/v1/endpoints", 201, json={"url": "http://127.0.0.1:9/off"})
    await check("PATCH", one, 200, path=f"/v1/endpoints/{off['id']}", json={"enabled": False})
    await check("POST", test, 409, path=f"/v1/endpoints/{off['id']}/test")

    # -- every route: 403 for a key without its scope (the scope is checked before the
    # owner, the body or the id), 429 for a key past its rate limit (before the rest)
    limited_store = await make_store(api_rate=0.01, api_burst=1)
    limited_api = await make_api(limited_store)
    limited_check = Checker(limited_api.url, doc, limited_api.session)
    slow = await limited_check("POST", keys, 201, json={"app": "default", "scopes": ["read"]})
    await limited_check("GET", "/v1/endpoints", 200, headers=auth(slow))  # its burst of 1
    reader = auth(await check("POST", keys, 201, json={"app": "default", "scopes": ["read"]}))
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if not op["security"]:
                continue
            publishes = {
                ("post", "/v1/events"),
                ("post", "/v1/events/batch"),
                ("post", "/api/v1/app/{app_id}/msg"),
            }
            key = reader if (method, path) in publishes else as_pub
            await check(method.upper(), path, 403, path=concrete(path), headers=key)
            await limited_check(method.upper(), path, 429, path=concrete(path), headers=auth(slow))
    check.seen |= limited_check.seen
    assert not limited_check.mismatches, limited_check.mismatches

    # -- operations
    await check("GET", "/v1/stats", 200)
    await check("GET", "/v1/stats", 401, session=anon)
    await check("GET", "/healthz", 200, session=anon)
    await check("GET", "/readyz", 200, session=anon)
    await check("GET", "/openapi.json", 200, session=anon)
    text = await check("GET", "/metrics", 200, session=anon)
    assert b"relay_deliveries_total" in text
    await event_type_answers(check, anon, big, receiver.url)

    async def deliver() -> None:
        await Worker(store, store.settings).run(asyncio.Event(), burst=True)

    await svix_answers(check, anon, big, receiver.url, doc, deliver)
    check.seen |= await redis_gone(doc)
    check.seen |= await archive_gone(make_store, make_api, doc)
    await Worker(store, store.settings).run(asyncio.Event(), burst=True)  # replayed ones again
    spare = await check("POST", "/v1/endpoints", 201, json={"url": receiver.url + "/s"})
    check.seen |= await replication_unconfirmed(
        make_store,
        make_api,
        doc,
        ok=ok["id"],
        gone=gone["id"],
        spare=spare["id"],
        done=succeeded,
        dead=dead,
    )

    assert not check.mismatches, "answers that do not match their schema:\n" + "\n".join(
        check.mismatches
    )
    missing = documented(doc) - check.seen
    assert not missing, f"documented but never produced by a request: {sorted(missing)}"


async def redis_gone(doc: dict[str, Any]) -> set[tuple[str, str, int]]:
    """503s need a Redis that went away: a private one, stopped. /readyz says so, and every
    ``/v1`` route answers 503 ``unavailable`` (its request body the document's example)."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(data_dir=Path(tmp), appendonly=False)
        server.start()
        settings = make_settings(redis_url=server.url)
        store = Store(connect(settings), settings)
        runner = web.AppRunner(create_app(settings, store), access_log=None)
        try:
            await runner.setup()
            port = free_port()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            server.stop()
            token = {"Authorization": f"Bearer {settings.api_tokens[0]}"}
            async with aiohttp.ClientSession(headers=token) as session:
                check = Checker(f"http://127.0.0.1:{port}", doc, session)
                data = await check("GET", "/readyz", 503)
                assert data["status"] == "unavailable"
                for method, path, op in operations(doc):
                    if not op["security"]:
                        continue
                    content = op.get("requestBody", {}).get("content", {})
                    examples = content.get("application/json", {}).get("examples", {})
                    kw = {"json": next(iter(examples.values()))["value"]} if examples else {}
                    data = await check(method, path, 503, path=concrete(path, "order.paid"), **kw)
                    assert data[error_key(path)] == "unavailable", (method, path, data)
            assert not check.mismatches, check.mismatches
            return check.seen
        finally:
            await runner.cleanup()
            await store.close()
            server.stop()


async def archive_gone(make_store: Any, make_api: Any, doc: dict[str, Any]) -> set[Any]:
    """503 ``archive_unavailable``: the reads over both tiers, with an archive URL that
    nothing answers on; Redis is there, so the archive is the only thing missing."""
    store = await make_store(archive_url=f"postgresql://relay@127.0.0.1:{free_port()}/relay")
    api = await make_api(store)
    check = Checker(api.url, doc, api.session)
    unknown = ids.new_id("dlv", 0, int(time.time() * 1000))
    for path, real in (
        ("/v1/deliveries", "/v1/deliveries?status=dead"),
        ("/v1/deliveries/{id}", f"/v1/deliveries/{unknown}"),
        ("/v1/events/{id}", f"/v1/events/{ids.new_event_id(0, int(time.time() * 1000))}"),
        ("/v1/stats", "/v1/stats"),
        ("/v1/archive/deliveries", "/v1/archive/deliveries"),
    ):
        data = await check("GET", path, 503, path=real)
        assert data["error"] == "archive_unavailable", (path, data)
    assert not check.mismatches, check.mismatches
    return check.seen


async def replication_unconfirmed(
    make_store: Any,
    make_api: Any,
    doc: dict[str, Any],
    *,
    ok: str,
    gone: str,
    spare: str,
    done: str,
    dead: str,
) -> set[tuple[str, str, int]]:
    """503 replication_timeout: the same data through a Store that waits for one replica
    (RELAY_ACK_REPLICAS=1, 20 ms) of a Redis that has none. ``gone`` has a dead delivery,
    ``done`` is a succeeded one, ``gone`` was never rotated."""
    store = await make_store(ack_replicas=1, ack_timeout=0.02)
    api = await make_api(store)
    check = Checker(api.url, doc, api.session)
    event = {"type": "order.paid", "payload": {"n": 2}, "endpoint_ids": [ok]}
    calls: list[tuple[str, str, str, dict[str, Any]]] = [
        ("POST", "/v1/deliveries/{id}/replay", f"/v1/deliveries/{done}/replay", {}),
        ("POST", "/v1/deliveries/{id}/discard", f"/v1/deliveries/{dead}/discard", {}),
        ("POST", "/v1/endpoints/{id}/recover", f"/v1/endpoints/{gone}/recover", {}),
        ("POST", "/v1/endpoints/{id}/rotate-secret", f"/v1/endpoints/{gone}/rotate-secret", {}),
        ("PATCH", "/v1/endpoints/{id}", f"/v1/endpoints/{ok}", {"json": {"description": "e"}}),
        ("DELETE", "/v1/endpoints/{id}", f"/v1/endpoints/{spare}", {}),
        ("POST", "/v1/endpoints", "/v1/endpoints", {"json": {"url": "http://127.0.0.1:9/x"}}),
        ("POST", "/v1/events", "/v1/events", {"json": event, "headers": {"Idempotency-Key": "u"}}),
        (
            "POST",
            "/v1/events/batch",
            "/v1/events/batch",
            {"json": {"events": [{**event, "idempotency_key": f"u{i}"} for i in range(3)]}},
        ),
        # the event type catalog: event_type_answers left "spare.type" behind
        ("POST", "/v1/event-types", "/v1/event-types", {"json": {"name": "another.type"}}),
        ("PATCH", "/v1/event-types/{name}", "/v1/event-types/spare.type", {"json": {}}),
        ("DELETE", "/v1/event-types/{name}", "/v1/event-types/spare.type", {}),
        ("POST", "/v1/endpoints/{id}/test", f"/v1/endpoints/{ok}/test", {}),
        ("POST", "/v1/apps/{app}/portal", "/v1/apps/default/portal", {}),
        ("POST", "/v1/api-keys", "/v1/api-keys", {"json": {"app": "a", "scopes": ["read"]}}),
    ]
    for method, template, path, kw in calls:
        data = await check(method, template, 503, path=path, **kw)
        assert data["error"] == "replication_timeout", (path, data)
    # a revocation through the confirmed path too (the key made above, unconfirmed, exists)
    (key,) = await store.list_api_keys("a")
    data = await check("DELETE", "/v1/api-keys/{id}", 503, path=f"/v1/api-keys/{key['id']}")
    assert data["error"] == "replication_timeout", data
    assert not check.mismatches, check.mismatches
    return check.seen


def auth(key: dict[str, Any]) -> dict[str, str]:
    return {"Authorization": f"Bearer {key['token']}"}


def json_type() -> dict[str, str]:
    return {"Content-Type": "application/json"}


async def event_type_answers(check: Checker, anon: Any, big: bytes, url: str) -> None:
    """The event type catalog and ed25519 endpoints, every answer documented."""
    schema = {"type": "object", "required": ["amount"]}
    col, one = "/v1/event-types", "/v1/event-types/{name}"
    await check("POST", col, 201, json={"name": "invoice.paid", "schema": schema})
    await check("POST", col, 201, json={"name": "spare.type"})
    await check("POST", col, 409, json={"name": "invoice.paid"})
    await check("POST", col, 422, json={"name": "x.y", "schema": {"type": 1}})
    await check("POST", col, 400, data=b"{", headers=json_type())
    await check("POST", col, 413, data=big, headers=json_type())
    await check("POST", col, 401, json={"name": "x.y"}, session=anon)
    await check("GET", col, 200)
    await check("GET", col, 401, session=anon)
    await check("GET", one, 200, path="/v1/event-types/invoice.paid")
    await check("GET", one, 404, path="/v1/event-types/invoice.nope")
    await check("GET", one, 401, path="/v1/event-types/invoice.paid", session=anon)
    paid = "/v1/event-types/invoice.paid"
    await check("PATCH", one, 200, path=paid, json={"deprecated": True})
    await check("PATCH", one, 404, path="/v1/event-types/invoice.nope", json={})
    await check("PATCH", one, 422, path=paid, json={"schema": {"type": 1}})
    await check("PATCH", one, 400, path=paid, data=b"[", headers=json_type())
    await check("PATCH", one, 413, path=paid, data=big, headers=json_type())
    await check("PATCH", one, 401, path=paid, json={}, session=anon)
    ep = await check(
        "POST", "/v1/endpoints", 201, json={"url": url, "event_types": ["invoice.paid"]}
    )
    await check("DELETE", one, 409, path=paid)
    await check("DELETE", one, 404, path="/v1/event-types/invoice.nope")
    await check("DELETE", one, 401, path=paid, session=anon)
    # publish against it: payload_invalid names the path; a deprecated type says so
    bad = await check("POST", "/v1/events", 422, json={"type": "invoice.paid", "payload": {}})
    assert bad["error"] == "payload_invalid" and bad["path"] == "$.amount"
    done = await check(
        "POST", "/v1/events", 201, json={"type": "invoice.paid", "payload": {"amount": 1}}
    )
    assert done["type_deprecated"] is True
    await check("DELETE", "/v1/endpoints/{id}", 204, path=f"/v1/endpoints/{ep['id']}")
    await check("DELETE", one, 204, path=paid)
    # an ed25519 endpoint: its reads show public keys, documented like every other field
    ed = await check("POST", "/v1/endpoints", 201, json={"url": url, "signing": "ed25519"})
    await check("GET", "/v1/endpoints/{id}", 200, path=f"/v1/endpoints/{ed['id']}")
    await check("GET", "/v1/endpoints/{id}/secret", 200, path=f"/v1/endpoints/{ed['id']}/secret")
    rotate = "/v1/endpoints/{id}/rotate-secret"
    await check("POST", rotate, 200, path=f"/v1/endpoints/{ed['id']}/rotate-secret")
    await check("GET", "/v1/endpoints/{id}", 200, path=f"/v1/endpoints/{ed['id']}")
