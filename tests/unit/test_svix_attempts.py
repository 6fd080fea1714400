"""A logged request as the Svix-compatible API shows it (relay.api.svix.attempts)."""

from __future__ import annotations

from typing import Any

from relay.api.svix.attempts import attempt_out
from relay.domain import attemptlog

DELIVERY = {"id": "dlv_0000000000000000000000000000", "event_id": "evt_1", "endpoint_id": "ep_1"}


def _shown(status: int | None, error: str, detail: str, outcome: str) -> dict[str, Any]:
    entry = {"n": 1, **attemptlog.fields(1, 5, 2.0, status, error, detail, outcome, "w")}
    return attempt_out(DELIVERY, entry, "nats://host/orders")


def test_a_brokers_acknowledgement_is_a_success() -> None:
    """Fails with the status code alone deciding: a publish with none was a "fail"."""
    shown = _shown(None, "", "stream orders seq 7", "succeeded")
    assert (shown["status"], shown["statusText"], shown["responseStatusCode"]) == (0, "success", 0)
    assert shown["response"] == "stream orders seq 7"


def test_no_answer_and_a_refusal_are_failures() -> None:
    for status, error in ((None, "timeout"), (None, "refused"), (500, "http_status")):
        shown = _shown(status, error, "", "retry")
        assert (shown["status"], shown["statusText"]) == (2, "fail"), (status, error)
    assert _shown(204, "", "", "succeeded")["status"] == 0
