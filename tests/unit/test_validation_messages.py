"""A refused input reads as one sentence: pydantic's "Value error, " prefix is not shown,
and a message that already names its field is not prefixed with the field again
("filter: filter is not valid CEL"). The same wording in the API, the CLI and the outbox.
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from relay.cli import main
from relay.domain import filters
from relay.domain.schema import EndpointIn, refusal

URL = "http://127.0.0.1:9/hook"
URL_SCHEMES = "url must use http, https, redis, rediss, nats, tls, amqp or amqps"


async def post_endpoint(api: Any, **fields: Any) -> tuple[int, dict[str, Any]]:
    async with api("POST", "/v1/endpoints", json={"url": URL, **fields}) as r:
        return r.status, await r.json()


def cel_reason(text: str) -> str:
    with pytest.raises(filters.FilterInvalid) as caught:
        filters.compile_filter(text)
    return str(caught.value)


async def test_a_filter_refusal_names_the_filter_once(fake_store: Any, make_api: Any) -> None:
    api = await make_api(fake_store)
    status, got = await post_endpoint(api, filter="payload.a >")
    reason = cel_reason("payload.a >")
    assert reason.startswith("filter is not valid CEL: ")
    assert (status, got["error"]) == (422, "filter_invalid")
    assert got["message"] == reason
    assert got["details"] == [{"field": "filter", "message": reason}]


@pytest.mark.parametrize(
    ("fields", "message", "detail"),
    [
        ({"url": "ftp://127.0.0.1/x"}, URL_SCHEMES, URL_SCHEMES),
        (
            {"headers": {"Host": "x"}},
            "headers: header 'Host' is set by relay and cannot be overridden",
            "header 'Host' is set by relay and cannot be overridden",
        ),
        (
            {"rate_limit": 0},
            "rate_limit: Input should be greater than or equal to 0.01",
            "Input should be greater than or equal to 0.01",
        ),
    ],
    ids=["names-its-field", "another-word", "pydantic-own"],
)
async def test_no_value_error_prefix(
    fake_store: Any, make_api: Any, fields: dict[str, Any], message: str, detail: str
) -> None:
    api = await make_api(fake_store)
    status, got = await post_endpoint(api, **fields)
    assert (status, got["error"]) == (422, "validation_error")
    assert got["message"] == message
    assert [d["message"] for d in got["details"]] == [detail]


def test_cli_replay_job_refusal_reads_as_a_sentence() -> None:
    got = CliRunner().invoke(
        main, ["replay", "--since", "1h", "--until", "2h", "--no-wait"], prog_name="relay"
    )
    assert got.exit_code == 2, got.output
    assert got.stderr.strip().splitlines()[-1] == "Error: range: until is before since"


def test_refusal_of_a_model() -> None:
    with pytest.raises(ValidationError) as caught:
        EndpointIn.model_validate({"url": "ftp://x/", "filter": "payload.a >"})
    assert refusal(caught.value) == (
        f"{URL_SCHEMES}; {cel_reason('payload.a >')}",
        [
            {"field": "url", "message": URL_SCHEMES},
            {"field": "filter", "message": cel_reason("payload.a >")},
        ],
    )
