"""Paths and validators for the deploy/ manifests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import all_versions

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DATA = Path(__file__).resolve().parents[1] / "data"
REDIS_CONF = DEPLOY / "redis.conf"

# Kinds outside the Kubernetes API, validated with our own schema instead. Listed
# explicitly: any other kind without a bundled schema fails the test.
CRD_SCHEMAS = {("keda.sh/v1alpha1", "ScaledObject"): DATA / "keda-scaledobject.schema.json"}
K8S_VERSIONS = sorted({all_versions()[0], all_versions()[-1]})  # oldest and newest bundled


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def all_docs() -> list[dict[str, Any]]:
    return [d for p in manifest_files() for d in load_docs(p)]


def find_doc(kind: str, name: str) -> dict[str, Any]:
    found = [d for d in all_docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def validate_k8s(doc: dict[str, Any], version: str) -> None:
    """Raise if ``doc`` is invalid; a kind with no schema at all raises too (never skipped)."""
    crd = CRD_SCHEMAS.get((doc["apiVersion"], doc["kind"]))
    if crd is not None:
        jsonschema.Draft202012Validator(json.loads(crd.read_text())).validate(doc)
    else:
        kubernetes_validate.validate(doc, version, strict=True)


def config_env() -> dict[str, str]:
    env = dict(find_doc("ConfigMap", "relay-config")["data"])
    env.update(find_doc("Secret", "relay-api-tokens")["stringData"])
    return env


def render_kustomization(folder: Path, docs: list[dict[str, Any]] | None = None) -> list[dict]:
    """A small offline kustomize: ``resources`` (files, or folders with their own
    kustomization), ``components`` (their resources and patches act on what the parent
    has so far), ``$patch: delete`` patches and patches adding to a ConfigMap's data.
    Anything else it does not understand fails, so it never renders something kubectl
    would not."""
    k = yaml.safe_load((folder / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "namespace", "resources", "components", "patches", "images"}
    assert set(k) <= known, f"{folder}: resolver does not handle {set(k) - known}"
    docs = [] if docs is None else docs
    for entry in k.get("resources", []):
        path = (folder / entry).resolve()
        docs += render_kustomization(path) if path.is_dir() else load_docs(path)
    for entry in k.get("components", []):
        docs = render_kustomization((folder / entry).resolve(), docs)
    for patch in k.get("patches", []):
        doc = yaml.safe_load(patch["patch"])
        key = (doc["kind"], doc["metadata"]["name"])
        if doc.get("$patch") != "delete":  # the one merge it knows: a ConfigMap's data
            assert set(doc) == {"apiVersion", "kind", "metadata", "data"}, doc
            assert doc["kind"] == "ConfigMap", "resolver merges ConfigMap data only"
            (target,) = [d for d in docs if (d["kind"], d["metadata"]["name"]) == key]
            target["data"] = {**target["data"], **doc["data"]}
            continue
        before = len(docs)
        docs = [d for d in docs if (d["kind"], d["metadata"]["name"]) != key]
        assert len(docs) == before - 1, f"patch deletes nothing: {key}"
    if "namespace" in k:
        for d in docs:
            d["metadata"]["namespace"] = k["namespace"]
    return docs
