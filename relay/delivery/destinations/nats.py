"""The NATS JetStream kind: publish to a subject and wait for the stream's acknowledgement.

The body is the message; ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``
are headers, and ``Nats-Msg-Id`` is the event id, so JetStream's de-duplication window
drops a re-send of an event it has stored (the acknowledgement then says ``duplicate``).
A subject no stream takes is a refusal. The connection does not reconnect by itself: a
closed one is dropped from the pool and the next send opens another.
"""

from __future__ import annotations

import ssl

import nats
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import NoServersError
from nats.js.errors import APIError, NoStreamResponseError

from relay.delivery.destinations.base import Message, Refused
from relay.domain.destinations import Target, fill


class NatsPublisher:
    def __init__(self, client: Client, subject: str, seconds: float) -> None:
        self.client = client
        self.subject = subject
        self.js = client.jetstream(timeout=seconds)

    @property
    def closed(self) -> bool:
        return bool(self.client.is_closed or not self.client.is_connected)

    async def publish(self, message: Message) -> str:
        subject = fill(self.subject, message.event_type)
        headers = {**message.trace, **message.signed(), "Nats-Msg-Id": message.event_id}
        try:
            ack = await self.js.publish(subject, message.body, headers=headers)
        except NoStreamResponseError:
            raise Refused(f"no JetStream stream takes subject {subject}") from None
        except APIError as exc:
            raise Refused(f"JetStream refused {subject}: {exc.description or exc}") from None
        duplicate = " duplicate" if ack.duplicate else ""
        return f"stream {ack.stream} seq {ack.seq}{duplicate}"

    async def close(self) -> None:
        await self.client.close()


async def _quiet(*_: object) -> None:
    """The client's callbacks: a failure reaches the send that meets it, not a log line."""


async def connect(target: Target, address: str, seconds: float) -> NatsPublisher:
    """A connection to the destination's NATS server (no reconnects; see the module)."""
    host = target.host if target.tls else address
    failure: list[BaseException] = []

    async def remember(exc: BaseException) -> None:
        failure[:] = [exc]

    options: dict[str, object] = {
        "servers": [f"{'tls' if target.tls else 'nats'}://{host}:{target.port}"],
        "allow_reconnect": False,
        # the client tries a server until it has failed more than this many times
        "max_reconnect_attempts": 1,
        "reconnect_time_wait": 0.05,
        "connect_timeout": seconds,
        "name": "relay",
        "error_cb": remember,
        "disconnected_cb": _quiet,
        "closed_cb": _quiet,
    }
    if target.user and target.password:
        options |= {"user": target.user, "password": target.password}
    elif target.user:
        options["token"] = target.user
    if target.tls:
        options["tls"] = ssl.create_default_context()
        options["tls_hostname"] = target.host
    try:
        client = await nats.connect(**options)  # type: ignore[arg-type]
    except NoServersError:  # the reason is the last connection error it saw
        raise failure[0] if failure else ConnectionError("no NATS server answered") from None
    except NatsError as exc:
        if "authorization" in str(exc).lower():
            raise Refused(f"NATS: {exc}") from None
        raise
    return NatsPublisher(client, target.path, seconds)
