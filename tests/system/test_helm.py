"""The Helm chart ``deploy/helm/relay``: linted and rendered for every values file in its
``ci/`` folder, and every rendered object checked offline.

Helm itself does the linting and rendering: the ``helm-python-sdk`` wheel (import name
``helm_python``) binds Helm's Go SDK, so no ``helm`` binary is needed; where it has no
wheel (Intel macOS) the Helm tests skip, saying so. Built-in kinds are validated with
``kubernetes-validate`` (strict) for the oldest and newest Kubernetes it bundles; KEDA's
ScaledObject against ``tests/data/keda-scaledobject.schema.json``; ServiceMonitor,
PodMonitor, PrometheusRule and HTTPRoute against their CRDs' schemas in
``tests/data/crds/`` (closed against unknown fields); any other kind fails.
"""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from redis.asyncio.connection import parse_url

from relay.settings import Settings
from tests.helpers.crds import crd_validator
from tests.helpers.deploy import CRD_SCHEMAS, K8S, K8S_VERSIONS
from tests.helpers.helm import (
    CHART,
    NAMES,
    SECRET_SETTINGS,
    URL_WITH_PASSWORD,
    container_env,
    find,
    helm,
    pod_specs,
    render_values,
    rendered,
    validate,
    values_of,
)

# ---- Helm: lint, render, schemas ----------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_helm_lint_passes(name: str) -> None:
    report = helm().lint(str(CHART), values_of(name), strict=True, namespace="relay")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", NAMES)
def test_rendered_objects_validate(name: str, version: str) -> None:
    docs = rendered(name)
    for doc in docs:
        validate(doc, version)
    kinds = {d["kind"] for d in docs}
    assert {"ConfigMap", "Deployment", "Service"} <= kinds


def test_every_kind_is_rendered_and_validated_by_some_values_file() -> None:
    kinds = {(d["apiVersion"], d["kind"]) for name in NAMES for d in rendered(name)}
    custom = {k for k in kinds if crd_validator(*k) is not None or k in CRD_SCHEMAS}
    assert custom == {
        ("keda.sh/v1alpha1", "ScaledObject"),
        ("monitoring.coreos.com/v1", "ServiceMonitor"),
        ("monitoring.coreos.com/v1", "PodMonitor"),
        ("monitoring.coreos.com/v1", "PrometheusRule"),
        ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    }
    assert {k for _, k in kinds} >= {
        "Secret",
        "Job",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "Ingress",
        "NetworkPolicy",
    }


def test_crd_validators_reject_broken_objects() -> None:
    """The CRD schemas are really on: a misspelt field, a wrong type, a missing field fail."""
    docs = rendered("monitoring") + rendered("gateway")
    route = find(docs, "HTTPRoute", "relay-api")
    smon = find(docs, "ServiceMonitor", "relay-api")
    rule = find(docs, "PrometheusRule", "relay")
    broken = [copy.deepcopy(d) for d in (route, smon, rule, smon)]
    broken[0]["spec"]["rules"][0]["backendRefs"][0]["port"] = "http"  # a number
    broken[1]["spec"]["endpoints"][0]["intervall"] = "30s"
    del broken[2]["spec"]["groups"][0]["rules"][0]["expr"]
    broken[3]["spec"]["selector"] = "relay-api"
    for doc in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate(doc, K8S_VERSIONS[-1])
    with pytest.raises(AssertionError):
        validate({**route, "metadata": {"name": "Relay_API"}}, K8S_VERSIONS[-1])


R = {"url": "redis://r:6379/0"}
T = {"existingSecret": "t"}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"apiTokens": T}, "redis.url (or redis.existingSecret) is required"),
        ({"redis": R}, "apiTokens.existingSecret is required"),
        ({"redis": R | {"mode": "sentinel"}, "apiTokens": T}, "needs redis.sentinel.addresses"),
        ({"redis": R | {"mode": "cluster", "ackReplicas": 1}, "apiTokens": T}, "Redis Cluster"),
        ({"redis": R | {"tls": {"enabled": True}}, "apiTokens": T}, "needs a rediss:// redis"),
        (
            {
                "redis": {"url": "redis://:pw@r/0", "password": {"existingSecret": "s"}},
                "apiTokens": T,
            },
            "keep the password in the Secret only",
        ),
        ({"redis": R | {"existingSecret": "u"}, "apiTokens": T}, "set one of redis.url"),
        (
            {"redis": R, "apiTokens": T, "archive": {"enabled": True}},
            "this chart runs no PostgreSQL",
        ),
        (
            {"redis": R, "apiTokens": T, "archive": {"existingSecret": "pg"}},
            "but archive.enabled is false",
        ),
        (
            {"redis": {"existingSecret": "u", "password": {"existingSecret": "s"}}, "apiTokens": T},
            "set one of redis.url",
        ),
    ],
)
def test_chart_refuses_values_relay_cannot_run_with(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm().HelmRenderError, match=re.escape(message)):
        render_values(values)


@pytest.mark.parametrize(
    "values",
    [
        {"worker": {"autoscalling": {"enabled": True}}},
        {"redis": {"mode": "replicated"}},
        {"api": {"replicas": "two"}},
        {"config": {"REDIS_URL": "redis://r/0"}},
    ],
    ids=["misspelt-key", "unknown-mode", "wrong-type", "not-a-relay-setting"],
)
def test_values_schema_refuses_what_the_chart_would_ignore(values: dict[str, Any]) -> None:
    """values.schema.json: a misspelt or mistyped value fails instead of being ignored."""
    merged = values_of("default")
    for key, value in values.items():
        merged[key] = merged.get(key, {}) | value
    with pytest.raises(helm().HelmError, match="schema"):
        render_values(merged)
    report = helm().lint(str(CHART), merged, strict=True, namespace="relay")
    assert report["errors"], values


# ---- secrets: only through Secrets --------------------------------------------------


def test_inline_secret_values_reach_pods_only_through_secrets() -> None:
    """A Redis URL with a password, an archive DSN and an API token given in the values
    land in Secrets only, and every pod reads them through a secretKeyRef."""
    values = values_of("inline-secrets")
    redis_url, dsn = values["redis"]["url"], values["archive"]["url"]
    token = values["apiTokens"]["value"]
    hidden = {"s3cr3t-redis-pw", "s3cr3t-pg-pw", token}
    assert all(h in redis_url + dsn + token for h in hidden)
    docs = rendered("inline-secrets")
    # nowhere but in Secrets, not even base64-encoded (a ConfigMap's binaryData)
    forms = hidden | {base64.b64encode(h.encode()).decode()[:12] for h in hidden}
    for doc in docs:
        if doc["kind"] != "Secret":
            text = yaml.safe_dump(doc)
            assert not [h for h in forms if h in text], (doc["kind"], doc["metadata"]["name"])
    pods = pod_specs(docs)
    assert set(pods) == {"Deployment/relay-api", "Deployment/relay-worker", "Job/relay-migrate"}
    for where, pod in pods.items():
        (c,) = pod["containers"]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
        want = {"RELAY_REDIS_URL", "RELAY_ARCHIVE_URL"}
        if where == "Deployment/relay-api":
            want.add("RELAY_API_TOKENS")
        assert set(refs) == want, where
        env = container_env(docs, c)
        assert env["RELAY_REDIS_URL"] == redis_url and env["RELAY_ARCHIVE_URL"] == dsn
        assert env.get("RELAY_API_TOKENS", token) == token
        # The migrate hook runs before the release's Secret exists: it reads its own.
        secret = "relay-migrate" if where.startswith("Job/") else "relay"
        assert {r["name"] for r in refs.values()} == {secret}, where


def _archive_refs(values: dict[str, Any]) -> dict[str, Any]:
    """RELAY_ARCHIVE_URL of each relay pod as rendered with ``values``: its secretKeyRef,
    or None where the pod has no such variable."""
    out: dict[str, Any] = {}
    for where, pod in pod_specs(render_values(values)).items():
        (c,) = pod["containers"]
        env = {e["name"]: e for e in c.get("env", [])}
        assert "RELAY_ARCHIVE_URL" not in str(c.get("envFrom", "")), where
        e = env.get("RELAY_ARCHIVE_URL")
        out[where] = None if e is None else e["valueFrom"]["secretKeyRef"]
    return out


def test_archive_dsn_reaches_api_and_worker_from_a_secret_only_when_enabled() -> None:
    """archive.enabled with a Secret of the team's: RELAY_ARCHIVE_URL is a required
    secretKeyRef (no `optional`) in the api, the workers and the migrate Job, and the
    worker reaches PostgreSQL; archive off (the default): no pod has the variable."""
    base = {"redis": R, "apiTokens": T}
    on = _archive_refs(
        base | {"archive": {"enabled": True, "existingSecret": "pg", "existingSecretKey": "dsn"}}
    )
    assert {"Deployment/relay-api", "Deployment/relay-worker"} <= set(on)
    assert all(ref == {"name": "pg", "key": "dsn"} for ref in on.values()), on
    assert set(_archive_refs(base).values()) == {None}
    assert set(_archive_refs(base | {"archive": {"enabled": False}}).values()) == {None}


@pytest.mark.parametrize("name", NAMES)
def test_no_secret_setting_in_any_configmap(name: str) -> None:
    docs = rendered(name)
    for cm in (d for d in docs if d["kind"] == "ConfigMap"):
        assert not SECRET_SETTINGS & set(cm["data"]), cm["metadata"]["name"]
        assert not [v for v in cm["data"].values() if URL_WITH_PASSWORD.search(v)]
    for where, pod in pod_specs(docs).items():
        for c in pod["containers"]:
            for e in c.get("env", []):
                if e["name"] not in SECRET_SETTINGS:
                    continue
                if "value" in e:  # the URL with a $(REDIS_PASSWORD) reference, no password
                    assert e["name"] == "RELAY_REDIS_URL", where
                    assert parse_url(e["value"])["password"] == "$(REDIS_PASSWORD)", where
                else:
                    assert set(e["valueFrom"]) == {"secretKeyRef"}, (where, e["name"])


@pytest.mark.parametrize(
    "config",
    [
        {"RELAY_REDIS_URL": "redis://r:6379/0"},
        {"RELAY_OUTBOX_DSN": "postgresql://u@db/relay"},
        {"RELAY_API_TOKENS": "abc"},
        {"RELAY_PUBLIC_URL": "https://user:pw@relay.example.com"},
    ],
    ids=["redis-url", "outbox-dsn", "api-tokens", "url-with-password"],
)
def test_chart_refuses_a_secret_in_config(config: dict[str, str]) -> None:
    values = values_of("default") | {"config": config}
    with pytest.raises(helm().HelmRenderError, match="Secret"):
        render_values(values)


# ---- pods -----------------------------------------------------------------------------


def _base_security_contexts() -> tuple[dict[str, Any], dict[str, Any]]:
    api = yaml.safe_load((K8S / "api.yaml").read_text().split("\n---")[0])
    pod = api["spec"]["template"]["spec"]
    return pod["securityContext"], pod["containers"][0]["securityContext"]


@pytest.mark.parametrize("name", NAMES)
def test_every_pod_is_hardened_as_the_kustomize_base(name: str) -> None:
    pod_sc, container_sc = _base_security_contexts()
    assert pod_sc["runAsNonRoot"] is True and pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    pods = pod_specs(rendered(name))
    assert {"Deployment/relay-api", "Deployment/relay-worker"} <= set(pods)
    for where, pod in pods.items():
        assert pod["securityContext"] == pod_sc, where
        assert pod["automountServiceAccountToken"] is False, where
        # Service links would put RELAY_*_PORT=tcp://... into relay's settings namespace.
        assert pod["enableServiceLinks"] is False, where
        assert pod.get("initContainers", []) == []
        for c in pod["containers"]:
            assert c["securityContext"] == container_sc, where
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (where, kind)
            assert {m["mountPath"] for m in c["volumeMounts"]} >= {"/tmp"}, where


@pytest.mark.parametrize("name", NAMES)
def test_an_autoscaled_deployment_has_no_replica_count(name: str) -> None:
    docs = rendered(name)
    scaled = {
        d["spec"]["scaleTargetRef"]["name"]
        for d in docs
        if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
    }
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert scaled <= set(deployments)
    for dname, d in deployments.items():
        assert ("replicas" in d["spec"]) == (dname not in scaled), dname
    owners = [d["kind"] for d in docs if d["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")]
    assert len(owners) == len(scaled)  # one autoscaler per Deployment, never two


def test_autoscaling_values_files_scale_the_workers() -> None:
    keda = rendered("keda")
    assert "replicas" not in find(keda, "Deployment", "relay-worker")["spec"]
    scaled = find(keda, "ScaledObject", "relay-worker")["spec"]
    assert scaled["triggers"][0]["metadata"]["query"] == 'max(relay_queue_due{namespace="relay"})'
    assert not [d for d in keda if d["kind"] == "HorizontalPodAutoscaler"]
    hpa = rendered("hpa")
    assert "replicas" not in find(hpa, "Deployment", "relay-worker")["spec"]
    assert "replicas" not in find(hpa, "Deployment", "relay-api")["spec"]
    metric = find(hpa, "HorizontalPodAutoscaler", "relay-worker")["spec"]["metrics"][0]
    assert metric["external"]["metric"]["name"] == "relay_queue_due"
    assert find(rendered("default"), "Deployment", "relay-worker")["spec"]["replicas"] == 3


@pytest.mark.parametrize("name", NAMES)
def test_settings_are_accepted_by_relay(name: str) -> None:
    """The api's and the worker's environment, as the kubelet builds it, is one relay
    starts with, and the pods outlast RELAY_SHUTDOWN_GRACE on SIGTERM."""
    docs = rendered(name)
    for where, pod in pod_specs(docs).items():
        (c,) = pod["containers"]
        env = container_env(docs, c)
        settings = Settings.from_env(env)
        parse_url(settings.redis_url)  # redis-py takes it
        if where.startswith("Job/"):
            assert c["args"] == ["migrate"]
            continue
        pre_stop = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        pause = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
        assert pod["terminationGracePeriodSeconds"] > settings.shutdown_grace + pause, where
        assert settings.host == "0.0.0.0" and settings.allow_private_networks is False


def test_topologies_reach_relay_settings() -> None:
    sentinel = Settings.from_env(container_env(*_worker(rendered("sentinel"))))
    assert sentinel.redis_sentinels and sentinel.ack_replicas == 1
    assert sentinel.redis_sentinel_password == "operator-sentinel-password"
    docs, worker = _worker(rendered("cluster-tls"))
    cluster = Settings.from_env(container_env(docs, worker))
    assert cluster.redis_cluster and cluster.shards == 4
    options = parse_url(cluster.redis_url)
    assert options["username"] == "relay" and options["password"] == "operator-redis-password"
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    for option in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        assert Path(options[option]).parent.as_posix() in mounts, option


def _worker(docs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    (c,) = find(docs, "Deployment", "relay-worker")["spec"]["template"]["spec"]["containers"]
    return docs, c
