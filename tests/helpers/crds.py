"""Validators for custom resources, from the CRD schemas in tests/data/crds/."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema

from tests.helpers.deploy import DATA

CRD_DIR = DATA / "crds"
# (apiVersion, kind) -> the schema file of that version
CRDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproute.json",
}


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    """A CRD's structural schema as a JSON Schema that rejects unknown fields.

    The API server prunes (or, with strict field validation, rejects) a field the schema
    does not declare; JSON Schema allows it unless ``additionalProperties`` is false, so
    every object with ``properties`` and no ``x-kubernetes-preserve-unknown-fields`` gets
    that. ``x-kubernetes-int-or-string``, ``nullable`` and Go's ``(?i)`` within a pattern
    become their JSON Schema (Python ``re``) forms.
    """
    out = dict(schema)
    if out.pop("x-kubernetes-int-or-string", False) and "anyOf" not in out:
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    pattern = out.get("pattern", "")
    if "(?i)" in pattern[1:]:  # Go's regexp takes the flag anywhere, Python's at the start
        out["pattern"] = "(?i)" + pattern.replace("(?i)", "")
    if out.pop("nullable", False) and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    if "properties" in out:
        out["properties"] = {k: closed(v) for k, v in out["properties"].items()}
        if "additionalProperties" not in out and not out.get(
            "x-kubernetes-preserve-unknown-fields"
        ):
            out["additionalProperties"] = False
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = closed(out["additionalProperties"])
    if isinstance(out.get("items"), dict):
        out["items"] = closed(out["items"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in out:
            out[key] = [closed(s) for s in out[key]]
    return out


@cache
def crd_validator(api_version: str, kind: str) -> jsonschema.Draft7Validator | None:
    """The validator of one custom resource kind, or None when tests/data/crds/ lacks it."""
    name = CRDS.get((api_version, kind))
    if name is None:
        return None
    schema = closed(json.loads((CRD_DIR / name).read_text()))
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)
