"""What a reconciliation replay asks for (``POST /v1/replays``, ``relay replay --since``),
and how a job record reads. Pure: no I/O."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from pydantic import AliasChoices, Field, field_validator, model_validator

from relay.domain import matching, signing
from relay.domain.schema import StrictBody, parse_time

ReplayStatus = Literal["dead", "succeeded"]
STATES = ("running", "done", "cancelled", "failed")
MAX_RANGE_MS = 400 * 86400 * 1000  # longer than any retention: a typo, not a replay


class ReplayIn(StrictBody):
    """Replay every delivery created in ``[since, until]`` that matches."""

    since: Annotated[str, Field(description="RFC 3339: deliveries created at or after")]
    until: Annotated[str, Field(description="RFC 3339: deliveries created at or before")]
    endpoint_id: Annotated[str | None, Field(max_length=64)] = None
    type: Annotated[
        str | None,
        Field(
            max_length=256,
            validation_alias=AliasChoices("type", "event_type"),
            description="event type: exact, order.* or *, as subscriptions (also event_type)",
        ),
    ] = None
    status: Annotated[list[ReplayStatus], Field(min_length=1, max_length=2)] = ["dead"]
    dry_run: bool = Field(default=False, description="only count; change nothing")

    @field_validator("since", "until")
    @classmethod
    def _time(cls, v: str) -> str:
        parse_time(v)
        return v

    @field_validator("type")
    @classmethod
    def _type(cls, v: str | None) -> str | None:
        return None if v is None else matching.validate_pattern(v)

    @model_validator(mode="after")
    def _range(self) -> ReplayIn:
        since, until = parse_time(self.since), parse_time(self.until)
        if until < since:
            raise ValueError("until is before since")
        if until - since > MAX_RANGE_MS:
            raise ValueError("the range is longer than 400 days")
        return self

    def params(self) -> dict[str, Any]:
        """What the job record keeps (times in ms)."""
        return {
            "since": parse_time(self.since),
            "until": parse_time(self.until),
            "endpoint_id": self.endpoint_id,
            "event_type": self.type,
            "status": sorted(set(self.status)),
        }


def wanted(params: dict[str, Any], status: str, event_type: str) -> bool:
    """Whether a delivery met in the range is one the job replays."""
    if status not in params["status"]:
        return False
    pattern = params.get("event_type")
    return pattern is None or matching.matches([pattern], event_type)


def job_view(raw: dict[str, str]) -> dict[str, Any]:
    """A job record (the Redis hash) as the API and the CLI show it."""
    params = orjson.loads(raw.get("params") or "{}")

    def num(name: str) -> int:
        return int(raw.get(name) or 0)

    def when(name: str) -> str | None:
        return signing.rfc3339_ms(num(name)) if num(name) else None

    return {
        "id": raw["id"],
        "state": raw.get("state", ""),
        "since": signing.rfc3339_ms(params.get("since", 0)),
        "until": signing.rfc3339_ms(params.get("until", 0)),
        "endpoint_id": params.get("endpoint_id"),
        "type": params.get("event_type"),
        "status": params.get("status", []),
        "matched": num("matched"),
        "replayed": num("replayed"),
        "skipped": num("skipped"),
        "waiting": len(orjson.loads(raw.get("buffer") or "[]")),
        "outstanding": len(orjson.loads(raw.get("outstanding") or "[]")),
        "scan_done": raw.get("scan_done") == "1",
        "takeovers": num("takeovers"),
        "error": raw.get("error") or None,
        "created_at": when("created_at"),
        "updated_at": when("updated_at"),
        "finished_at": when("finished_at"),
    }
