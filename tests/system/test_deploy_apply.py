"""What ``kubectl apply -k deploy/k8s`` applies, rendered offline.

A small resolver of the kustomization in Python (always runs), compared with
``kubectl kustomize`` when kubectl is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from relay.settings import Settings
from tests.helpers.deploy import (
    DEPLOY,
    K8S,
    ROOT,
    config_env,
    documented_overlay,
    find_doc,
    kubectl_render,
    render_kustomization,
)


def _kinds_names(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return sorted((d["kind"], d["metadata"]["name"]) for d in docs)


@pytest.mark.parametrize("with_keda", [False, True], ids=["base", "keda"])
def test_apply_k_never_overwrites_the_token_secret(tmp_path: Path, with_keda: bool) -> None:
    """`kubectl create secret ... relay-api-tokens` then `kubectl apply -k deploy/k8s`:
    the apply holds no Secret, so the real tokens survive it, and the api still reads
    them from the Secret of that name. Fails with secret.yaml a resource: the render
    holds Secret/relay-api-tokens with RELAY_API_TOKENS ""."""
    overlay: dict[str, Any] = {"resources": [os.path.relpath(K8S, tmp_path)]}
    if with_keda:
        overlay["components"] = [os.path.relpath(K8S / "keda", tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    docs = render_kustomization(tmp_path)
    secrets = [d for d in docs if d["kind"] == "Secret"]
    assert [
        s
        for s in secrets
        if not (s.get("stringData") or s.get("data") or {}).get("RELAY_API_TOKENS")
    ] == []
    assert secrets == []
    (api,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "relay-api"]
    refs = api["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"secretRef": {"name": "relay-api-tokens"}} in refs
    # the command is in the docs, not only in a comment
    guide = (ROOT / "docs" / "operating" / "kubernetes.md").read_text()
    assert "kubectl apply -k deploy/k8s" in guide
    assert "kubectl create secret generic relay-api-tokens" in guide


def test_workers_expose_metrics_and_are_scraped() -> None:
    """A worker with RELAY_METRICS_PORT (not 0), its port and the scrape annotations."""
    worker = find_doc("Deployment", "relay-worker")["spec"]["template"]
    (c,) = worker["spec"]["containers"]
    values = {e["name"]: e["value"] for e in c["env"] if "valueFrom" not in e}
    env = {**config_env(), **values}
    port = Settings.from_env(env).metrics_port
    assert port != 0
    assert {"name": "metrics", "containerPort": port} in c["ports"]
    notes = worker["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert notes["prometheus.io/port"] == str(port)
    assert notes["prometheus.io/path"] == "/metrics"


def test_ingress_example_routes_to_the_api_service() -> None:
    ingress = find_doc("Ingress", "relay-api")
    service = find_doc("Service", "relay-api")
    ports = {p["name"] for p in service["spec"]["ports"]}
    paths = ingress["spec"]["rules"][0]["http"]["paths"]
    assert {p["path"] for p in paths} >= {"/v1", "/ui"}
    assert "/metrics" not in {p["path"] for p in paths}
    for p in paths:
        assert p["backend"]["service"]["name"] == "relay-api"
        assert p["backend"]["service"]["port"]["name"] in ports
    guide = (ROOT / "docs" / "operating" / "kubernetes.md").read_text()
    assert "kubectl port-forward service/relay-api" in guide


@pytest.mark.parametrize("with_keda", [False, True], ids=["base", "keda"])
def test_resolver_agrees_with_kubectl(tmp_path: Path, with_keda: bool) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    overlay: dict[str, Any] = {"resources": [os.path.relpath(K8S, tmp_path)]}
    if with_keda:
        overlay["components"] = [os.path.relpath(K8S / "keda", tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    out = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert _kinds_names(rendered) == _kinds_names(render_kustomization(tmp_path))
    assert "Secret" not in {d["kind"] for d in rendered}


def test_keda_and_sentinel_are_components_and_called_so() -> None:
    """deploy/k8s/keda and deploy/k8s/sentinel are kustomize Components (listed under an
    overlay's `components:`, never applied alone): no doc or manifest calls them overlays."""
    for name in ("keda", "sentinel"):
        kind = yaml.safe_load((K8S / name / "kustomization.yaml").read_text())["kind"]
        assert kind == "Component"
    texts = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    texts += [p for p in DEPLOY.rglob("*") if p.is_file()]
    wrong = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in texts
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\b(keda|sentinel)\b\S*\s+overlay", line, re.IGNORECASE)
    ]
    assert wrong == []


def test_the_documented_overlay_combines_both_components(tmp_path: Path) -> None:
    """docs/operating/kubernetes.md's overlay, beside a checkout of relay, with its Ingress copy:
    the base with both components renders KEDA's ScaledObject instead of the HPA and
    the Sentinel-watched Redis instead of the single node, in the overlay's namespace."""
    overlay = documented_overlay(tmp_path)
    example = (overlay / "kustomization.yaml").read_text()
    assert yaml.safe_load(example)["components"] == [
        "../relay/deploy/k8s/keda",
        "../relay/deploy/k8s/sentinel",
    ]
    docs = render_kustomization(overlay)
    got = set(_kinds_names(docs))
    assert {("ScaledObject", "relay-worker"), ("StatefulSet", "relay-redis-ha")} <= got
    assert ("Ingress", "relay-api") in got
    assert "HorizontalPodAutoscaler" not in {kind for kind, _ in got}
    assert not {("StatefulSet", "relay-redis"), ("Service", "relay-redis")} & got
    config = next(d for d in docs if d["metadata"]["name"] == "relay-config")
    assert config["data"]["RELAY_REDIS_SENTINELS"]
    assert {d["metadata"]["namespace"] for d in docs} == {"relay"}
    rendered = kubectl_render(overlay)  # the offline render, checked by kustomize itself
    if rendered is not None:
        assert _kinds_names(rendered) == _kinds_names(docs)
