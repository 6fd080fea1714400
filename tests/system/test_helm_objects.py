"""What the Helm chart's objects do, beyond their schemas: NetworkPolicies (the workers'
egress backing the SSRF guard), selectors and routes, the alerts, the migrate hook.

Rendered offline with Helm's SDK (``tests/helpers/helm.py``); ``test_helm.py`` lints and
validates the same renders.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

import pytest

from relay.delivery import ssrf
from tests.helpers.deploy import ROOT
from tests.helpers.helm import NAMES, find, pod_specs, render_values, rendered, values_of

Net = ipaddress.IPv4Network | ipaddress.IPv6Network


def _selects(selector: dict[str, str], docs: list[dict[str, Any]]) -> set[str]:
    """The pod templates (``Kind/name``) whose labels ``selector`` matches."""
    return {
        f"{d['kind']}/{d['metadata']['name']}"
        for d in docs
        if d["kind"] in ("Deployment", "Job")
        and selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
    }


def _policy(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return find(docs, "NetworkPolicy", name)["spec"]


def _webhook_rules(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r
        for r in spec["egress"]
        if any(p.get("ipBlock", {}).get("cidr") == "0.0.0.0/0" for p in r.get("to", []))
    ]


# ---- NetworkPolicies ------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in NAMES if n != "minimal"])
def test_network_policies_select_their_pods(name: str) -> None:
    docs = rendered(name)
    for component in ("api", "worker"):
        spec = _policy(docs, f"relay-{component}")
        assert _selects(spec["podSelector"]["matchLabels"], docs) == {
            f"Deployment/relay-{component}"
        }
        assert spec["policyTypes"] == ["Ingress", "Egress"]
        (ingress,) = spec["ingress"]
        (c,) = find(docs, "Deployment", f"relay-{component}")["spec"]["template"]["spec"][
            "containers"
        ]
        assert [p["port"] for p in ingress["ports"]] == [c["ports"][0]["containerPort"]]
    assert not [d for d in rendered("minimal") if d["kind"] == "NetworkPolicy"]


def test_worker_egress_refuses_every_range_the_ssrf_guard_refuses() -> None:
    """Webhook egress goes to any address but relay's forbidden ranges: the policy drops
    what a bug past the guard would send to a private, loopback or metadata address."""
    spec = _policy(rendered("default"), "relay-worker")
    (rule,) = _webhook_rules(spec)
    assert "ports" not in rule  # webhooks may use any port
    blocks = {
        ipaddress.ip_network(p["ipBlock"]["cidr"]): [
            ipaddress.ip_network(n) for n in p["ipBlock"]["except"]
        ]
        for p in rule["to"]
    }
    assert {str(n) for n in blocks} == {"0.0.0.0/0", "2000::/3"}

    def dropped(net: Net) -> bool:
        inside = [c for c in blocks if _within(net, c)]
        return not inside or any(_within(net, e) for c in inside for e in blocks[c])

    for net, why in ssrf._NETWORKS:
        assert dropped(net), (str(net), why)
    # ...and nothing the guard lets through is dropped: public addresses stay reachable.
    for net in [e for es in blocks.values() for e in es]:
        assert ssrf.forbidden_reason(net[0]) is not None, str(net)
        assert ssrf.forbidden_reason(net[-1]) is not None, str(net)
    for public in ("1.1.1.1", "8.8.8.8", "168.63.129.15", "2606:4700:4700::1111"):
        assert ssrf.forbidden_reason(public) is None
        assert not dropped(ipaddress.ip_network(public)), public


def _within(net: Net, outer: Net) -> bool:
    return net.version == outer.version and net.subnet_of(outer)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "minimal"])
def test_only_the_worker_reaches_beyond_dns_redis_and_postgres(name: str) -> None:
    docs = rendered(name)
    archive = bool(values_of(name).get("archive", {}).get("enabled"))
    for component in ("api", "worker"):
        spec = _policy(docs, f"relay-{component}")
        rest = [r for r in spec["egress"] if r not in _webhook_rules(spec)]
        # every other rule names both its peers and its ports: no open egress
        assert all(r.get("to") and r.get("ports") for r in rest), component
        ports = [sorted(p["port"] for p in r["ports"]) for r in rest]
        redis = values_of(name).get("networkPolicy", {}).get("redis", {}).get("ports")
        assert ports == [[53, 53], sorted(redis or [6379, 26379])] + [[5432]] * archive
        assert len(_webhook_rules(spec)) == (1 if component == "worker" else 0)


def test_private_receivers_need_both_the_setting_and_the_policy() -> None:
    values = values_of("default") | {
        "config": {"RELAY_ALLOW_PRIVATE_NETWORKS": "1"},
        "networkPolicy": {"webhooks": {"except": [], "cidrV6": "::/0", "exceptV6": []}},
    }
    docs = render_values(values)
    (rule,) = _webhook_rules(_policy(docs, "relay-worker"))
    assert [p["ipBlock"] for p in rule["to"]] == [{"cidr": "0.0.0.0/0"}, {"cidr": "::/0"}]
    assert find(docs, "ConfigMap", "relay")["data"]["RELAY_ALLOW_PRIVATE_NETWORKS"] == "1"


# ---- Services, routes, disruption budgets ------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_selectors_and_targets_match(name: str) -> None:
    docs = rendered(name)
    svc = find(docs, "Service", "relay-api")["spec"]
    assert _selects(svc["selector"], docs) == {"Deployment/relay-api"}
    for pdb in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
        target = f"Deployment/{pdb['metadata']['name']}"
        assert _selects(pdb["spec"]["selector"]["matchLabels"], docs) == {target}
    for d in docs:
        if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject"):
            find(docs, "Deployment", d["spec"]["scaleTargetRef"]["name"])
    for d in docs:
        if d["kind"] == "Deployment":  # a selector that is a subset of its own pods' labels
            assert _selects(d["spec"]["selector"]["matchLabels"], docs) == {
                f"Deployment/{d['metadata']['name']}"
            }


def test_ingress_and_httproute_route_the_public_paths_to_the_api() -> None:
    ingress = find(rendered("ingress"), "Ingress", "relay-api")["spec"]
    (rule,) = ingress["rules"]
    paths = {(p["path"], p["pathType"]) for p in rule["http"]["paths"]}
    assert {p["backend"]["service"]["name"] for p in rule["http"]["paths"]} == {"relay-api"}
    route = find(rendered("gateway"), "HTTPRoute", "relay-api")["spec"]
    (r,) = route["rules"]
    assert r["backendRefs"] == [{"name": "relay-api", "port": 8080}]
    route_paths = {
        (m["path"]["value"], {"PathPrefix": "Prefix"}.get(m["path"]["type"], m["path"]["type"]))
        for m in r["matches"]
    }
    assert paths == route_paths
    assert {"/v1", "/ui", "/portal", "/openapi.json"} <= {p for p, _ in paths}
    # /metrics, /healthz and /readyz stay inside the cluster.
    assert not {p for p, _ in paths} & {"/", "/metrics", "/healthz", "/readyz"}


# ---- monitoring --------------------------------------------------------------------------


def _recommended_alerts() -> list[str]:
    """The expressions docs/operating/metrics.md lists after "Useful alerts"."""
    text = (ROOT / "docs" / "operating" / "metrics.md").read_text()
    useful = text[text.index("Useful alerts") :]
    return re.findall(r"`([^`]+)`", useful)


# a function with a window, a label matcher, a grouping: each must be in the rule too
PROMQL_PARTS = r'(?:rate|increase)\(|\[\w+\]|\w+="[^"]*"|by \(\w+\)'


def _comparison(expr: str) -> tuple[str, str]:
    found = re.search(r"(==|!=|>=|<=|>|<)\s*([\d.]+)\s*$", expr)
    assert found is not None, expr
    return found[1], found[2]


def test_prometheus_rule_carries_the_documented_alerts() -> None:
    docs = rendered("monitoring")
    (group,) = find(docs, "PrometheusRule", "relay")["spec"]["groups"]
    exprs = [r["expr"] for r in group["rules"]]
    documented = _recommended_alerts()
    assert len(documented) == 5
    for expr in documented:
        metric = re.search(r"relay_[a-z_]+", expr)
        assert metric is not None
        ours = [e for e in exprs if metric[0] in e]
        assert len(ours) == 1, expr
        # the documented function, window, matchers and comparison, scoped to the
        # release's namespace (and aggregated over its replicas)
        assert _comparison(ours[0]) == _comparison(expr), expr
        for part in re.findall(PROMQL_PARTS, expr):
            assert part in ours[0], (part, ours[0])
        assert 'namespace="relay"' in ours[0]
    assert any("relay_blocked_lanes" in e for e in exprs)
    for rule in group["rules"]:
        assert rule["alert"].startswith("Relay") and rule["labels"]["severity"]
        assert rule["annotations"]["summary"]


def test_monitors_scrape_the_api_service_and_worker_pods() -> None:
    docs = rendered("monitoring")
    smon = find(docs, "ServiceMonitor", "relay-api")["spec"]
    assert smon["selector"]["matchLabels"].items() <= (
        find(docs, "Service", "relay-api")["metadata"]["labels"].items()
    )
    assert [e["port"] for e in smon["endpoints"]] == ["http"]
    pmon = find(docs, "PodMonitor", "relay-worker")["spec"]
    assert _selects(pmon["selector"]["matchLabels"], docs) == {"Deployment/relay-worker"}
    assert [e["port"] for e in pmon["podMetricsEndpoints"]] == ["metrics"]
    assert smon["namespaceSelector"] == pmon["namespaceSelector"] == {"matchNames": ["relay"]}


# ---- the migrate hook --------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n in NAMES if n != "minimal"])
def test_migrate_runs_as_a_hook_before_install_and_upgrade(name: str) -> None:
    docs = rendered(name)
    job = find(docs, "Job", "relay-migrate")
    hook = job["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"
    pod = pod_specs(docs)["Job/relay-migrate"]
    assert pod["restartPolicy"] == "Never"
    (c,) = pod["containers"]
    assert c["args"] == ["migrate"] and "envFrom" not in c
    # The release's ConfigMap and Secret do not exist yet when a pre-install hook runs:
    # the Job carries the settings inline and reads only hook or operator Secrets.
    settings = find(docs, "ConfigMap", "relay")["data"]
    inline = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    assert settings.items() <= inline.items()
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    for e in c["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref and ref["name"] in secrets:  # the chart's: a hook Secret, made before the Job
            made = secrets[ref["name"]]["metadata"].get("annotations", {})
            assert made.get("helm.sh/hook") == hook["helm.sh/hook"], ref["name"]
            assert int(made["helm.sh/hook-weight"]) < int(hook["helm.sh/hook-weight"])
    assert not [d for d in rendered("minimal") if d["kind"] == "Job"]


# ---- docs ----------------------------------------------------------------------------------


def test_docs_name_every_values_file() -> None:
    text = (ROOT / "docs" / "operating" / "helm.md").read_text()
    for name in NAMES:
        assert f"ci/{name}-values.yaml" in text, name
