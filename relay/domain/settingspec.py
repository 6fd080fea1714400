"""A setting's declaration, and what is derived from it: reading the environment, the
``repr`` that hides secrets, and the configuration reference (markdown).

Each setting is a dataclass field made by :func:`setting`, which keeps its
:class:`Setting` in the field's metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

Redact = Callable[[Any], str]


class SettingsError(ValueError):
    """A ``RELAY_*`` variable has a value relay cannot use."""


@dataclass(frozen=True)
class Setting:
    """One environment variable: how it is parsed, its default and its one line of doc."""

    env: str  # the variable, e.g. RELAY_REDIS_URL
    parse: Callable[[str], Any]  # raises ValueError saying what is wrong
    default: str  # as it would be written in the environment; "" is unset
    doc: str
    group: str
    secret: bool | Redact = False  # True: shown as ***; a function: how to show it
    shown: str = ""  # the default as the reference shows it, when not ``default``
    also: str = ""  # a second field it sets: then parse returns (value, that field's value)


def setting(
    env: str,
    parse: Callable[[str], Any],
    default: str | Callable[[], Any],
    doc: str,
    *,
    group: str,
    secret: bool | Redact = False,
    empty: Any = "",
    shown: str = "",
    also: str = "",
) -> Any:
    """A dataclass field for the variable ``env``: its default is ``parse(default)``,
    ``empty`` when ``default`` is "", or made per instance when ``default`` is a function."""
    spec = Setting(
        env, parse, "" if callable(default) else default, doc, group, secret, shown, also
    )
    meta = {"setting": spec}
    if callable(default):
        return field(default_factory=default, metadata=meta)
    value = parse(default) if default else empty
    return field(default=value[0] if also else value, metadata=meta)


def declared(cls: type) -> list[tuple[str, Setting]]:
    """(field name, declaration) of each setting of the dataclass ``cls``, in order."""
    return [(f.name, f.metadata["setting"]) for f in fields(cls) if "setting" in f.metadata]


def read_env(cls: type, env: Mapping[str, str]) -> dict[str, Any]:
    """The value of each setting of ``cls`` whose variable is set (blank is unset);
    a value the parser refuses is a :class:`SettingsError` naming the variable."""
    values: dict[str, Any] = {}
    for name, spec in declared(cls):
        raw = (env.get(spec.env) or "").strip()
        if not raw:
            continue
        try:
            value = spec.parse(raw)
        except ValueError as exc:
            raise SettingsError(f"{spec.env}={raw!r}: {exc}") from None
        if spec.also:
            values[name], values[spec.also] = value
        else:
            values[name] = value
    return values


def redacted_repr(obj: Any) -> str:
    """``Name(field=value, ...)`` with each secret setting shown as its declaration says."""
    shown = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        secret = f.metadata["setting"].secret if "setting" in f.metadata else False
        if callable(secret):
            value = secret(value)
        elif secret:
            value = "***" if value else ""
        shown.append(f"{f.name}={value!r}")
    return f"{type(obj).__name__}({', '.join(shown)})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference(cls: type, intro: str, outro: str) -> str:
    """The configuration reference of ``cls`` in markdown: a table per group, in the order
    the settings are declared."""
    groups: dict[str, list[Setting]] = {}
    for _, spec in declared(cls):
        groups.setdefault(spec.group, []).append(spec)
    out = [intro.strip(), ""]
    for group, specs in groups.items():
        out += [f"## {group}", "", "| variable | default | meaning |", "| --- | --- | --- |"]
        for spec in specs:
            default = spec.shown or (f"`{spec.default}`" if spec.default else "none")
            out.append(f"| `{spec.env}` | {_cell(default)} | {_cell(spec.doc)} |")
        out.append("")
    out.append(outro.strip())
    return "\n".join(out) + "\n"
