"""Hostile tenant logic from the adversarial run, shared by the tests and bench/hostile.py.

Each passes the checks made when it is written, so only the budgets at publish stop it
(measured in-process, on the unfixed code, on this 2-core VM: the slow filter takes
~6.6 s per publish, the memory filter 2.2 GB and ~2 s, the slow schema ~9.5 s).
"""

from __future__ import annotations

from typing import Any


def zeros(n: int) -> str:
    return "[" + ",".join(["0"] * n) + "]"


# The run's regex filter (the pattern compiled again on every pass), refused at write:
# its pattern is 240,002 RE2 instructions.
def regex_filter(n: int) -> str:
    return f"{zeros(n)}.exists(x, event_type.matches('(?i)\\\\pL{{1,200}}[0-9]{{1,200}}'))"


# The same shape within the write checks (4,295 instructions, 1,813 characters): the
# pattern never matches an event type without digits, so all 880 passes compile it.
SLOW_FILTER = f"{zeros(880)}.exists(x, event_type.matches('\\\\pL{{1,3}}\\\\pN{{1,3}}'))"

# String concatenation inside a comprehension: every pass allocates 20 copies of
# payload.s, and cel-cpp frees none of them before the evaluation ends.
MEMORY_FILTER = "payload.l.exists(x, (" + " + ".join(["payload.s"] * 20) + ").size() == 0)"
MEMORY_PAYLOAD: dict[str, Any] = {"s": "a" * 27_000, "l": [0] * 400}  # 27.8 KB

# An ordinary schema (an array of objects, each one of 41 shapes) and a 229 KB payload
# that matches it: Python's jsonschema tries the branches of every item.
SLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "items": {
            "type": "array",
            "items": {
                "anyOf": [
                    {
                        "type": "object",
                        "required": [f"k{i}"],
                        "properties": {f"k{i}": {"type": "integer"}},
                    }
                    for i in range(40)
                ]
                + [{"type": "object"}]
            },
        }
    },
}
SLOW_SCHEMA_PAYLOAD: dict[str, Any] = {"items": [{"z": i} for i in range(20_000)]}
