"""The RabbitMQ (AMQP 0-9-1) kind: a persistent message to an exchange, confirmed.

The channel has publisher confirms on and every message is ``mandatory``: a delivery
succeeds on the broker's ``basic.ack``; a message returned as unroutable (no queue bound
for its routing key), a ``basic.nack`` or a channel the broker closes (an unknown
exchange, no permission) is a refusal. The body is the message; ``webhook-id``,
``webhook-timestamp`` and ``webhook-signature`` are headers, the event id also its
``message_id``. A closed connection or channel leaves the pool; the next send opens
another.
"""

from __future__ import annotations

import ssl
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractExchange
from aiormq.exceptions import (
    AMQPChannelError,
    AMQPConnectionError,
    ChannelInvalidStateError,
    DeliveryError,
    ProbableAuthenticationError,
)

from relay.delivery.destinations.base import Message, Refused
from relay.domain.destinations import Target, fill


class AmqpPublisher:
    def __init__(
        self,
        connection: AbstractConnection,
        channel: AbstractChannel,
        exchange: AbstractExchange,
        routing_key: str,
    ) -> None:
        self.connection = connection
        self.channel = channel
        self.exchange = exchange
        self.routing_key = routing_key

    @property
    def closed(self) -> bool:
        return bool(self.connection.is_closed or self.channel.is_closed)

    async def publish(self, message: Message) -> str:
        key = fill(self.routing_key, message.event_type)
        amqp_message = aio_pika.Message(
            message.body,
            headers={**message.trace, **message.signed()},
            content_type="application/json",
            delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            message_id=message.event_id,
        )
        where = f"exchange {self.exchange.name or '(default)'!r} routing key {key!r}"
        try:
            await self.exchange.publish(amqp_message, routing_key=key, mandatory=True)
        except DeliveryError as exc:  # returned unroutable, or nacked
            raise Refused(f"{where}: {_reason(exc)}") from None
        except AMQPChannelError as exc:  # the broker closed the channel: 404, 403, ...
            raise Refused(f"{where}: {exc}") from None
        except (AMQPConnectionError, ChannelInvalidStateError) as exc:  # the connection is gone
            raise ConnectionError(f"AMQP connection lost: {exc}") from None
        return f"confirmed by {where}"

    async def close(self) -> None:
        await self.connection.close()


def _reason(exc: DeliveryError) -> str:
    frame: Any = exc.frame
    message: Any = exc.message
    delivery = getattr(message, "delivery", None)
    if delivery is not None and getattr(delivery, "reply_text", None):
        return f"returned {delivery.reply_code} {delivery.reply_text} (no queue bound)"
    return f"{getattr(frame, 'name', 'refused')} from the broker"


async def connect(target: Target, address: str, seconds: float) -> AmqpPublisher:
    """A connection and a confirming channel to the destination's broker."""
    options: dict[str, Any] = {
        "host": target.host if target.tls else address,
        "port": target.port,
        "login": target.user or "guest",
        "password": target.password or "guest",
        "virtualhost": target.path,
        "timeout": seconds,
        "client_properties": {"connection_name": "relay"},
    }
    if target.tls:
        options |= {"ssl": True, "ssl_context": ssl.create_default_context()}
    try:
        connection = await aio_pika.connect(**options)
    except ProbableAuthenticationError as exc:
        raise Refused(f"AMQP login refused: {exc}") from None
    try:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        name = target.params.get("exchange", "")
        exchange = (
            await channel.get_exchange(name, ensure=False) if name else channel.default_exchange
        )
    except BaseException:
        await connection.close()
        raise
    return AmqpPublisher(connection, channel, exchange, target.params["routing_key"])
