"""Broker urls: the kind by scheme, what is refused at write (with which message), the
mask reads show, and the scrubbing of a url's secrets from a broker's error text."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from relay.domain import destinations
from relay.domain.schema import EndpointIn, EndpointPatch, public_endpoint

MASK = destinations.MASK


@pytest.mark.parametrize(
    ("url", "kind", "path", "params"),
    [
        ("https://h.example/x", "http", None, None),
        ("redis://:pw@127.0.0.1:6400/2?stream=ev&maxlen=1000", "redis", "2", {"stream": "ev"}),
        ("rediss://h.example?stream=ev&maxlen=5", "redis", "0", {"maxlen": "5"}),
        ("nats://tok@h.example/orders.{type}", "nats", "orders.{type}", {}),
        ("tls://u:p@h.example:4443/a.b", "nats", "a.b", {}),
        (
            "amqp://u:p@h.example/%2F?exchange=x&routing_key=r.{type}",
            "amqp",
            "/",
            {"exchange": "x"},
        ),
        ("amqps://u:p@h.example/vh?routing_key=q", "amqp", "vh", {"exchange": ""}),
    ],
)
def test_a_valid_url_names_its_kind(url: str, kind: str, path: str | None, params: dict) -> None:
    assert destinations.kind_of(url) == kind
    assert EndpointIn(url=url).url == url
    if kind != "http":
        target = destinations.parse(url)
        assert target.path == path
        assert params.items() <= target.params.items()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h/0?stream=a", "?maxlen=N"),
        ("redis://h/0?maxlen=5", "?stream=NAME"),
        ("redis://h/16?stream=a&maxlen=5", "db number"),
        ("redis://h/0?stream=a&maxlen=0", "?maxlen=N"),
        ("redis://h/0?stream=a&maxlen=5&x=1", "unknown url parameter 'x'"),
        ("redis://h/0?stream=a&stream=b&maxlen=5", "given twice"),
        ("redis://h/0?stream=a{type}&maxlen=5", "no {type}"),
        ("nats://h/", "names its subject"),
        ("nats://h/a.*", "no wildcards"),
        ("nats://h/a..b", "dot-separated"),
        ("nats://h/a.{id}", "{type} only"),
        ("nats://:pw@h/a", "needs a user"),
        ("amqp://h/?exchange=x", "routing key"),
        ("amqp://h/?exchange=x{type}&routing_key=r", "exchange may not use {type}"),
        ("amqp://h:0/?routing_key=r", "valid port"),
        (f"amqp://u:{MASK}@h/?routing_key=r", "holds the mask"),
        ("ftp://h/x", "url must use http, https, redis"),
    ],
)
def test_an_invalid_url_is_refused_saying_why(url: str, message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        EndpointIn(url=url)
    assert message in str(refused.value)
    with pytest.raises(ValidationError):
        EndpointPatch(url=url)


def test_reads_mask_the_password_or_token_and_nothing_else() -> None:
    cases = {
        "amqp://u:pw@h:5672/%2F?exchange=x&routing_key=r": f"amqp://u:{MASK}@h:5672/%2F?exchange=x&routing_key=r",
        "nats://tok@h/a.{type}": f"nats://{MASK}@h/a.{{type}}",
        "nats://u:pw@h/a": f"nats://u:{MASK}@h/a",
        "redis://:pw@h/0?stream=s&maxlen=1": f"redis://:{MASK}@h/0?stream=s&maxlen=1",
        "redis://h/0?stream=s&maxlen=1": "redis://h/0?stream=s&maxlen=1",
        "https://h/x?token=t": "https://h/x?token=t",
    }
    for url, shown in cases.items():
        assert destinations.masked(url) == shown
        endpoint = {"url": url, "secret": "whsec_x", "headers": {}}
        assert public_endpoint(endpoint)["url"] == shown
        assert public_endpoint(endpoint)["kind"] == destinations.kind_of(url)


def test_a_brokers_error_text_loses_the_urls_secrets() -> None:
    url = "amqp://user:Pa%24%24word@h/?routing_key=r"
    text = f"ACCESS_REFUSED for {url}: Pa$$word / Pa%24%24word"
    scrubbed = destinations.scrub(text, url)
    assert "Pa$$word" not in scrubbed and "Pa%24%24word" not in scrubbed
    assert destinations.scrub("no stream", "nats://tok@h/a") == "no stream"


def test_fill_puts_the_event_type_in_a_template() -> None:
    assert destinations.fill("orders.{type}", "order.paid") == "orders.order.paid"


def test_an_attempt_span_names_where_a_broker_message_went() -> None:
    amqp = "amqp://relay:pw@127.0.0.1:5672/%2F?exchange=orders&routing_key=o.{type}"
    assert destinations.messaging_attributes(amqp, "order.paid") == {
        "messaging.system": "rabbitmq",
        "messaging.destination.name": "orders",
        "messaging.rabbitmq.destination.routing_key": "o.order.paid",
    }
    stream = "rediss://:pw@127.0.0.1:6390/0?stream=orders&maxlen=1000"
    assert destinations.messaging_attributes(stream, "order.paid") == {
        "messaging.system": "redis",
        "messaging.destination.name": "orders",
    }
