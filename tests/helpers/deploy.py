"""Paths and validators for the deploy/ manifests."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
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
    """What the api pod reads: relay-config and the Secret templates of secret.yaml."""
    env = dict(find_doc("ConfigMap", "relay-config")["data"])
    env.update(find_doc("Secret", "relay-api-tokens")["stringData"])
    env.update(find_doc("Secret", "relay-redis")["stringData"])
    return env


def write_overlay(folder: Path, components: Sequence[str] = ()) -> Path:
    """An overlay in ``folder``: the base and the named components (keda, sentinel)."""
    overlay: dict[str, Any] = {"resources": [os.path.relpath(K8S, folder)]}
    if components:
        overlay["components"] = [os.path.relpath(K8S / c, folder) for c in components]
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return folder


def render_overlay(folder: Path, components: Sequence[str] = ()) -> list[dict[str, Any]]:
    """:func:`write_overlay`, rendered by :func:`render_kustomization`."""
    return render_kustomization(write_overlay(folder, components))


def kubectl_render(folder: Path) -> list[dict[str, Any]] | None:
    """``kubectl kustomize folder`` (offline), or None without kubectl."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    out = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def documented_overlay(tmp_path: Path) -> Path:
    """docs/operating/kubernetes.md's overlay, ``my-relay/`` beside a checkout of relay
    (``relay/``, a link to this one), with its copy of the Ingress example."""
    text = (ROOT / "docs" / "operating" / "kubernetes.md").read_text()
    (example,) = re.findall(r"```yaml\n(# my-relay/kustomization\.yaml.*?)```", text, re.S)
    overlay = tmp_path / "my-relay"
    overlay.mkdir()
    (tmp_path / "relay").symlink_to(ROOT)
    (overlay / "kustomization.yaml").write_text(example)
    shutil.copy(K8S / "ingress.example.yaml", overlay / "ingress.yaml")
    return overlay


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
