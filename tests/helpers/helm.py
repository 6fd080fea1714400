"""Rendering the Helm chart ``deploy/helm/relay`` offline, and reading what it renders.

Helm itself renders: the ``helm-python-sdk`` wheel (import name ``helm_python``) binds
Helm's Go SDK, so no ``helm`` binary is needed. Where it has no wheel (Intel macOS) the
tests that need it skip, saying so; anywhere else a missing one fails them.
"""

from __future__ import annotations

import base64
import copy
import platform
import re
import sys
from functools import cache
from typing import Any

import pytest
import yaml

from tests.helpers.crds import crd_validator
from tests.helpers.deploy import DEPLOY, validate_k8s

try:
    import helm_python
except ImportError:  # no wheel for this platform (pyproject.toml's marker)
    helm_python = None

CHART = DEPLOY / "helm" / "relay"
VALUES = sorted((CHART / "ci").glob("*-values.yaml"))
NAMES = [p.name.removesuffix("-values.yaml") for p in VALUES]
SECRET_SETTINGS = {
    "RELAY_REDIS_URL",
    "RELAY_API_TOKENS",
    "RELAY_REDIS_SENTINEL_PASSWORD",
    "RELAY_OUTBOX_DSN",
    "RELAY_ARCHIVE_URL",
}
URL_WITH_PASSWORD = re.compile(r"://[^/@\s]*:[^/@\s]+@")


class StrictLoader(yaml.SafeLoader):
    """YAML that refuses a key twice in one mapping (PyYAML keeps the last silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate keys {dup}", node.start_mark
            )
        return super().construct_mapping(node, deep=deep)


def helm() -> Any:
    if helm_python is not None:
        return helm_python
    if sys.platform == "darwin" and platform.machine() != "arm64":
        pytest.skip(
            "helm-python-sdk (Helm's SDK) has no wheel for Intel macOS: helm lint and "
            "helm template of deploy/helm/relay did not run here"
        )
    pytest.fail("helm-python-sdk is not installed: pip install -e '.[test]'")


def values_of(name: str) -> dict[str, Any]:
    return yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text()) or {}


def render_values(values: dict[str, Any]) -> list[dict[str, Any]]:
    """``helm template relay deploy/helm/relay -n relay`` with these values, as objects."""
    with helm().Chart.load(str(CHART)) as chart:
        out = chart.render(values, name="relay", namespace="relay", is_install=True)
    return [
        doc
        for path, text in sorted(out.items())
        if path.endswith(".yaml")
        for doc in yaml.load_all(text, Loader=StrictLoader)
        if doc
    ]


@cache
def _rendered(name: str) -> tuple[dict[str, Any], ...]:
    return tuple(render_values(values_of(name)))


def rendered(name: str) -> list[dict[str, Any]]:
    return copy.deepcopy(list(_rendered(name)))


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def pod_specs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        f"{d['kind']}/{d['metadata']['name']}": d["spec"]["template"]["spec"]
        for d in docs
        if d["kind"] in ("Deployment", "Job")
    }


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def validate(doc: dict[str, Any], version: str) -> None:
    """Raise unless ``doc`` is valid; a kind with no schema anywhere raises too."""
    meta = doc["metadata"]
    assert DNS_LABEL.match(meta["name"]) and len(meta["name"]) <= 63, meta["name"]
    for value in meta.get("labels", {}).values():
        assert isinstance(value, str) and LABEL_VALUE.match(value) and len(value) <= 63, value
    crd = crd_validator(doc["apiVersion"], doc["kind"])
    if crd is not None:
        crd.validate(doc)
    else:
        validate_k8s(doc, version)


def secret_data(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    return {
        d["metadata"]["name"]: {
            k: base64.b64decode(v).decode() for k, v in (d.get("data") or {}).items()
        }
        | dict(d.get("stringData") or {})
        for d in docs
        if d["kind"] == "Secret"
    }


def container_env(docs: list[dict[str, Any]], container: dict[str, Any]) -> dict[str, str]:
    """A container's environment as the kubelet builds it: envFrom ConfigMaps, then env in
    order, secretKeyRefs read from the rendered Secrets (a Secret the operator manages
    gets a stand-in value) and $(VAR) references expanded."""
    secrets = secret_data(docs)
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(find(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for entry in container.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), entry["value"])
            continue
        ref = entry["valueFrom"]["secretKeyRef"]
        if ref["name"] in secrets:
            env[name] = secrets[ref["name"]][ref["key"]]
        elif name == "RELAY_REDIS_URL":
            env[name] = "redis://:operator-pw@redis.example:6379/0"
        else:
            env[name] = f"operator-{ref['key']}"
    return env
