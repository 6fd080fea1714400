"""The standard ``OTEL_*`` variables relay itself looks at: is tracing on, and which
exporters. Pure: :class:`relay.settings.Settings` hands the environment in; the SDK reads
its own other variables (endpoint, headers, sampler, batching) when relay builds it.
"""

from __future__ import annotations

from collections.abc import Mapping

TRACE_EXPORTERS = ("otlp", "console")


def tracing(env: Mapping[str, str]) -> tuple[tuple[str, ...], str]:
    """Which span exporters the standard ``OTEL_*`` variables ask for; () is off.

    Off unless ``OTEL_TRACES_EXPORTER`` names an exporter other than ``none``, or an
    OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``:
    then ``otlp``); ``OTEL_SDK_DISABLED=true`` turns it off whatever else is set.
    OTLP is sent as ``http/protobuf`` only (the exporter relay ships).
    """

    def get(name: str) -> str:
        return (env.get(name) or "").strip()

    resource = dict(
        (k.strip(), v.strip())
        for k, _, v in (p.partition("=") for p in get("OTEL_RESOURCE_ATTRIBUTES").split(","))
    )
    service = get("OTEL_SERVICE_NAME") or resource.get("service.name") or "relay"
    if get("OTEL_SDK_DISABLED").lower() == "true":
        return (), service
    raw = get("OTEL_TRACES_EXPORTER")
    if raw:
        names = tuple(dict.fromkeys(n.strip().lower() for n in raw.split(",") if n.strip()))
        names = tuple(n for n in names if n != "none")
        unknown = [n for n in names if n not in TRACE_EXPORTERS]
        if unknown:
            raise ValueError(f"OTEL_TRACES_EXPORTER={raw!r}: relay knows otlp, console and none")
    elif get("OTEL_EXPORTER_OTLP_ENDPOINT") or get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        names = ("otlp",)
    else:
        names = ()
    protocol = get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or get("OTEL_EXPORTER_OTLP_PROTOCOL")
    if "otlp" in names and protocol not in ("", "http/protobuf"):
        raise ValueError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol!r}: relay exports OTLP as http/protobuf only"
        )
    return names, service
