"""What every destination kind shares: the message it carries and the shape of a kind.

A kind is a module with one coroutine, ``connect(target, address, seconds)``, that opens
a :class:`Publisher` to one destination (relay.domain.destinations.Target) at ``address``
(the host as the private-network guard checked it), within ``seconds``. A publisher's
``publish`` returns the broker's acknowledgement as a short text for the attempt log, or
raises: :class:`Refused` when the broker answered no, anything else when there was no
answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Message:
    """One signed delivery: the Standard Webhooks body and the three values a consumer
    verifies it with (headers on AMQP and NATS, fields beside ``body`` on a stream).
    ``trace``: the attempt span's ``traceparent`` (and ``tracestate``) with tracing on,
    which AMQP and NATS carry as headers too (a stream entry keeps its four fields)."""

    event_id: str
    event_type: str
    body: bytes
    timestamp: str
    signature: str
    trace: dict[str, str] = field(default_factory=dict)

    def signed(self) -> dict[str, str]:
        return {
            "webhook-id": self.event_id,
            "webhook-timestamp": self.timestamp,
            "webhook-signature": self.signature,
        }


class Refused(Exception):
    """The broker answered, and the answer is not an acknowledgement (no stream for the
    subject, a message returned unroutable, a negative confirm, an error reply)."""


class Publisher(Protocol):
    """An open connection to one destination."""

    @property
    def closed(self) -> bool: ...

    async def publish(self, message: Message) -> str: ...

    async def close(self) -> None: ...
