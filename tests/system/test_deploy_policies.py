"""What ``deploy/k8s`` renders around the pods: who owns the worker count,
NetworkPolicies, topology spread.

The worker's egress policy is held to relay's SSRF guard (``relay.delivery.ssrf``): no
address the guard refuses is open to the worker through an ``ipBlock``, and public
addresses are. Rendered by the offline resolver of ``tests/helpers/deploy.py`` (and
by ``kubectl kustomize`` in test_deploy.py / test_deploy_apply.py when installed), each
object validated against the Kubernetes schemas.
"""

from __future__ import annotations

import copy
import ipaddress
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from relay.delivery.ssrf import _NETWORKS, forbidden_reason
from tests.helpers.deploy import (
    K8S_VERSIONS,
    documented_overlay,
    kubectl_render,
    render_kustomization,
    validate_k8s,
    write_overlay,
)

RENDERS = ["base", "keda", "sentinel", "documented"]


def _renders(tmp_path: Path, which: str) -> list[list[dict[str, Any]]]:
    """The offline render, and kubectl's when it is installed, each object validated."""
    if which == "documented":
        folder = documented_overlay(tmp_path)
    else:
        folder = write_overlay(tmp_path, [] if which == "base" else [which])
    by_kubectl = kubectl_render(folder)
    renders = [render_kustomization(folder), *([by_kubectl] if by_kubectl is not None else [])]
    for docs in renders:
        for version in K8S_VERSIONS:
            for doc in docs:
                validate_k8s(doc, version)
    return renders


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


def _pods(docs: list[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Pod template labels by workload name."""
    return {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in docs
        if d["kind"] in ("Deployment", "StatefulSet")
    }


def _selects(selector: dict[str, Any], docs: list[dict[str, Any]]) -> set[str]:
    assert set(selector) <= {"matchLabels"}, selector  # the only form used here
    want = selector.get("matchLabels", {}).items()
    return {name for name, labels in _pods(docs).items() if want <= labels.items()}


# ---- the worker count ----------------------------------------------------------------


@pytest.mark.parametrize("which", RENDERS)
def test_the_autoscaler_alone_sets_the_worker_count(tmp_path: Path, which: str) -> None:
    """No ``spec.replicas`` on relay-worker beside its HPA or ScaledObject: with one,
    every ``kubectl apply -k`` would reset the autoscaled count to it."""
    for docs in _renders(tmp_path, which):
        worker = _one(docs, "Deployment", "relay-worker")
        assert "replicas" not in worker["spec"]
        scalers = [
            d
            for d in docs
            if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
            and d["spec"]["scaleTargetRef"]["name"] == "relay-worker"
        ]
        assert len(scalers) == 1
        spec = scalers[0]["spec"]
        assert spec.get("minReplicas", spec.get("minReplicaCount")) == 3
        # the api has no autoscaler here: it keeps its count
        assert _one(docs, "Deployment", "relay-api")["spec"]["replicas"] == 2


# ---- NetworkPolicies -----------------------------------------------------------------


def _port_numbers(rule: dict[str, Any]) -> set[tuple[str, int]]:
    return {(p.get("protocol", "TCP"), p["port"]) for p in rule.get("ports", [])}


@pytest.mark.parametrize("which", RENDERS)
def test_api_ingress_is_its_http_port_only(tmp_path: Path, which: str) -> None:
    for docs in _renders(tmp_path, which):
        policy = _one(docs, "NetworkPolicy", "relay-api")["spec"]
        assert _selects(policy["podSelector"], docs) == {"relay-api"}
        assert policy["policyTypes"] == ["Ingress"]
        (c,) = _one(docs, "Deployment", "relay-api")["spec"]["template"]["spec"]["containers"]
        http = next(p["containerPort"] for p in c["ports"] if p["name"] == "http")
        assert [_port_numbers(rule) for rule in policy["ingress"]] == [{("TCP", http)}]


def _ip_blocks(policy: dict[str, Any]) -> list[tuple[Any, list[Any]]]:
    """(cidr, excepts) of every ipBlock peer of the egress rules."""
    blocks = []
    for rule in policy["egress"]:
        for peer in rule.get("to", []):
            if "ipBlock" in peer:
                block = peer["ipBlock"]
                excepts = [ipaddress.ip_network(e) for e in block.get("except", [])]
                blocks.append((ipaddress.ip_network(block["cidr"]), excepts))
    return blocks


def _open_to(blocks: list[tuple[Any, list[Any]]], ip: Any) -> bool:
    return any(
        ip.version == net.version and ip in net and not any(ip in e for e in excepts)
        for net, excepts in blocks
    )


PUBLIC = ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111", "2a00:1450:4001::1"]


@pytest.mark.parametrize("which", RENDERS)
def test_worker_egress_is_redis_dns_and_public_addresses(tmp_path: Path, which: str) -> None:
    """The worker reaches Redis (and the Sentinels) by pod selector, cluster DNS, and by
    address only what relay's SSRF guard lets it send to: no private, loopback,
    link-local, metadata or other refused range, every public address tried."""
    for docs in _renders(tmp_path, which):
        policy = _one(docs, "NetworkPolicy", "relay-worker")["spec"]
        assert _selects(policy["podSelector"], docs) == {"relay-worker"}
        assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
        # ingress: its /metrics port, for Prometheus
        (w,) = _one(docs, "Deployment", "relay-worker")["spec"]["template"]["spec"]["containers"]
        metrics = next(p["containerPort"] for p in w["ports"] if p["name"] == "metrics")
        assert [_port_numbers(rule) for rule in policy["ingress"]] == [{("TCP", metrics)}]

        ha = which in ("sentinel", "documented")
        # in this namespace: a podSelector without a namespaceSelector
        [(redis_rule, redis_peer)] = [
            (rule, peer)
            for rule in policy["egress"]
            for peer in rule.get("to", [])
            if "podSelector" in peer and "namespaceSelector" not in peer
        ]
        assert _selects(redis_peer["podSelector"], docs) == {
            "relay-redis-ha" if ha else "relay-redis"
        }
        assert _port_numbers(redis_rule) == {("TCP", 6379), ("TCP", 26379)}

        dns = [r for r in policy["egress"] if ("UDP", 53) in _port_numbers(r)]
        assert len(dns) == 1 and _port_numbers(dns[0]) == {("UDP", 53), ("TCP", 53)}
        for peer in dns[0]["to"]:
            assert "ipBlock" not in peer  # the cluster's DNS pods, not port 53 anywhere

        blocks = _ip_blocks(policy)
        for ip in PUBLIC:
            assert forbidden_reason(ip) is None, ip
            assert _open_to(blocks, ipaddress.ip_address(ip)), ip
        for net, why in _NETWORKS:
            for ip in (net[0], net[-1], net[net.num_addresses // 2]):
                assert not _open_to(blocks, ip), (str(ip), why)
        # addresses standing for a private IPv4 (mapped, NAT64, 6to4, Teredo) stay shut too
        for ip in ("::ffff:10.0.0.5", "64:ff9b::a00:5", "2002:a00:5::1", "2001:0:4136:e378::1"):
            assert not _open_to(blocks, ipaddress.ip_address(ip)), ip
        # an ipBlock rule opens its addresses on any port: webhook URLs use any port
        for rule in policy["egress"]:
            if any("ipBlock" in p for p in rule.get("to", [])):
                assert "ports" not in rule


@pytest.mark.parametrize("which", RENDERS)
def test_topology_spread_for_api_and_workers(tmp_path: Path, which: str) -> None:
    """Across nodes and zones, each over its own pods, never blocking scheduling on a
    cluster with one node or one zone."""
    for docs in _renders(tmp_path, which):
        for name in ("relay-api", "relay-worker"):
            spec = _one(docs, "Deployment", name)["spec"]["template"]["spec"]
            constraints = spec["topologySpreadConstraints"]
            keys = {c["topologyKey"] for c in constraints}
            assert keys == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}, name
            for c in constraints:
                assert _selects(c["labelSelector"], docs) == {name}, (name, c)
                assert c["maxSkew"] == 1 and c["whenUnsatisfiable"] == "ScheduleAnyway", name


def test_the_schemas_reject_a_broken_policy(tmp_path: Path) -> None:
    """The validation above is really on for NetworkPolicies: a wrong type and a
    misspelt field fail."""
    docs = render_kustomization(write_overlay(tmp_path))
    policy = _one(docs, "NetworkPolicy", "relay-worker")
    validate_k8s(policy, K8S_VERSIONS[-1])
    wrong_type = copy.deepcopy(policy)
    (block,) = [
        p["ipBlock"]
        for r in wrong_type["spec"]["egress"]
        for p in r["to"]
        if p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0"
    ]
    block["except"] = "10.0.0.0/8"  # a list of CIDRs, not one
    misspelt = copy.deepcopy(policy)
    misspelt["spec"]["egres"] = misspelt["spec"].pop("egress")
    for doc in (wrong_type, misspelt):
        with pytest.raises(jsonschema.ValidationError):
            validate_k8s(doc, K8S_VERSIONS[-1])
