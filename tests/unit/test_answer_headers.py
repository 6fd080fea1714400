"""What an attempt-log entry keeps of a receiver's answer headers (relay.domain.attemptlog)."""

from __future__ import annotations

from relay.domain import attemptlog


def test_credentials_and_cookies_are_dropped_by_name() -> None:
    kept = attemptlog.answer_headers(
        [
            ("Content-Type", "text/plain"),
            ("Set-Cookie", "sid=1"),
            ("Cookie", "a=b"),
            ("Authorization", "Bearer x"),
            ("Proxy-Authorization", "Basic y"),
            ("WWW-Authenticate", "Bearer realm=x"),
            ("X-Api-Key", "k"),
            ("X-Auth-Token", "t"),
            ("X-Session-Id", "s"),
            ("X-Client-Secret", "c"),
            ("X-Csrf", "c"),
            ("X-Request-Id", "req-1"),
            ("Retry-After", "30"),
        ]
    )
    assert kept == {"content-type": "text/plain", "x-request-id": "req-1", "retry-after": "30"}


def test_repeats_join_and_everything_is_bounded() -> None:
    joined = attemptlog.answer_headers([("Via", "a"), ("via", "b")])
    assert joined == {"via": "a, b"}
    many = attemptlog.answer_headers([(f"x-h{i}", "v") for i in range(100)])
    assert len(many) == attemptlog.HEADERS_MAX
    long = attemptlog.answer_headers([("x-long", "v" * 5000), ("x" * 65, "too long a name")])
    assert long == {"x-long": "v" * attemptlog.HEADER_VALUE_MAX}
    big = attemptlog.answer_headers([(f"x-{i}", "v" * 190) for i in range(20)])
    assert sum(len(k) + len(v) for k, v in big.items()) <= attemptlog.HEADERS_BYTES
    assert len(big) < 20  # the byte budget left the rest out


def test_an_entry_has_response_headers_only_when_there_are_some() -> None:
    args = (2, 7, 1.5, 503, "http_status", "busy", "retry", "w1")
    assert "response_headers" not in attemptlog.fields(*args)
    assert "response_headers" not in attemptlog.fields(*args, {})
    entry = attemptlog.fields(*args, {"retry-after": "5"})
    assert entry["response_headers"] == {"retry-after": "5"}
