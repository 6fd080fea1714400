"""The Redis Streams kind: ``XADD stream MAXLEN ~ N`` on a Redis the customer names.

Each entry has the fields ``body``, ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature``; the delivery succeeds when ``XADD`` returns the entry's id.
"""

from __future__ import annotations

from relay.delivery.destinations.base import Message, Refused
from relay.domain.destinations import Target
from relay.queue.streams import StreamClient, StreamRefused


class StreamPublisher:
    def __init__(self, client: StreamClient, stream: str, maxlen: int) -> None:
        self.client = client
        self.stream = stream
        self.maxlen = maxlen
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def publish(self, message: Message) -> str:
        fields = {"body": message.body, **message.signed()}
        try:
            entry = await self.client.xadd(self.stream, fields, self.maxlen)
        except StreamRefused as exc:
            raise Refused(str(exc)) from None
        return f"XADD {self.stream} {entry}"

    async def close(self) -> None:
        self._closed = True
        await self.client.aclose()


async def connect(target: Target, address: str, seconds: float) -> StreamPublisher:
    """A client on the destination's Redis (``AUTH`` and ``PING`` checked here)."""
    client = StreamClient(
        host=target.host if target.tls else address,
        port=target.port,
        db=int(target.path),
        username=target.user or None,
        password=target.password or None,
        tls=target.tls,
        seconds=seconds,
    )
    try:
        await client.ping()
    except StreamRefused as exc:
        await client.aclose()
        raise Refused(str(exc)) from None
    except BaseException:
        await client.aclose()
        raise
    return StreamPublisher(client, target.params["stream"], int(target.params["maxlen"]))
