"""Tests for relay.domain.matching."""

from __future__ import annotations

import pytest

from relay.domain.matching import matches, validate_pattern


@pytest.mark.parametrize("event_type", ["order.created", "x", "a.b.c"])
def test_star_matches_everything(event_type: str) -> None:
    assert matches(["*"], event_type)


@pytest.mark.parametrize(
    ("event_type", "expected"),
    [
        ("order.created", True),
        ("order.item.added", True),
        ("order", False),
        ("order.", False),
        ("orders.x", False),
        ("xorder.created", False),
    ],
)
def test_prefix_wildcard(event_type: str, expected: bool) -> None:
    assert matches(["order.*"], event_type) is expected


def test_exact_and_any_of() -> None:
    assert matches(["order.created"], "order.created")
    assert not matches(["order.created"], "order.created.v2")
    assert not matches(["order.created"], "order")
    assert matches(["user.deleted", "order.*"], "order.paid")
    assert not matches([], "order.paid")


@pytest.mark.parametrize("p", ["*", "order.*", "a.b.*", "order.created", "x"])
def test_valid_patterns(p: str) -> None:
    assert validate_pattern(p) == p


@pytest.mark.parametrize(
    "p",
    [
        "",
        " ",
        "order. created",
        "order.*\n",
        "\torder",
        ".*",
        "**",
        "order*",
        "*.x",
        "a.*.b",
        "a.**",
    ],
)
def test_invalid_patterns(p: str) -> None:
    with pytest.raises(ValueError):
        validate_pattern(p)
