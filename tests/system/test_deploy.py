"""Offline validation of ``deploy/``: Kubernetes manifests, Compose file, redis.conf, Dockerfile.

Nothing here touches the network. Kubernetes objects are checked (strict: unknown
fields fail) against the schemas bundled in ``kubernetes-validate`` for the oldest and
newest Kubernetes it ships; KEDA's ScaledObject, a CRD those schemas lack, against
``tests/data/keda-scaledobject.schema.json`` (a hand-written subset of its CRD). The
Compose file is checked against the Compose Specification schema vendored in
``tests/data/compose-spec.json`` (copied verbatim from check-jsonschema 0.39.0, which
vendors the official compose-spec schema; sha256 d549057e...). The Dockerfile's own checks are
in tests/system/test_dockerfile.py. Each validator also gets a broken input, so a validator
that silently accepts everything fails here.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis
import yaml
from click.testing import CliRunner
from kubernetes_validate.utils import SchemaNotFoundError

import relay
from relay.domain.retry import parse_duration
from relay.domain.settingspec import declared
from relay.redisproc import free_port
from relay.settings import Settings
from tests.helpers.deploy import (
    CRD_SCHEMAS,
    DATA,
    DEPLOY,
    K8S,
    K8S_VERSIONS,
    REDIS_CONF,
    ROOT,
    all_docs,
    config_env,
    find_doc,
    load_docs,
    validate_k8s,
)

COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"


def _pod_specs() -> dict[str, dict[str, Any]]:
    return {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]
        for d in all_docs()
        if d["kind"] in ("Deployment", "StatefulSet")
    }


# ---- Kubernetes ---------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_k8s_manifests_validate_against_their_schemas(version: str) -> None:
    docs = all_docs()
    for doc in docs:
        validate_k8s(doc, version)
    crd_kinds = {d["kind"] for d in docs if (d["apiVersion"], d["kind"]) in CRD_SCHEMAS}
    # The only document not checked by kubernetes-validate, and it was checked above.
    assert crd_kinds == {"ScaledObject"}
    assert {d["kind"] for d in docs} >= {
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "HorizontalPodAutoscaler",
        "StatefulSet",
    }


def test_k8s_validators_reject_broken_documents() -> None:
    """The validators are really on: a wrong type, an unknown field, an unknown kind fail."""
    api = find_doc("Deployment", "relay-api")
    bad_type = copy.deepcopy(api)
    bad_type["spec"]["replicas"] = "two"
    misspelt = copy.deepcopy(api)
    misspelt["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    scaled = find_doc("ScaledObject", "relay-worker")
    bad_keda = copy.deepcopy(scaled)
    bad_keda["spec"]["triggers"][0]["metadata"]["threshold"] = 500  # KEDA wants a string
    for doc in (bad_type, misspelt, bad_keda):
        with pytest.raises(jsonschema.ValidationError):
            validate_k8s(doc, K8S_VERSIONS[-1])
    # A kind with no schema anywhere is an error, never a silent pass.
    unknown = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    with pytest.raises(SchemaNotFoundError):
        validate_k8s(unknown, K8S_VERSIONS[-1])


# Not applied by `kubectl apply -k deploy/k8s`, on purpose: the Secret is
# created once by hand (applying a placeholder would overwrite it), the Ingress is an
# example to copy. Everything else at the top level is applied.
NOT_APPLIED = {"secret.yaml", "ingress.example.yaml"}


def test_kustomization_lists_every_manifest() -> None:
    base = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    top = {p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"}
    assert NOT_APPLIED <= top
    assert sorted(base["resources"]) == sorted(top - NOT_APPLIED)
    keda = yaml.safe_load((K8S / "keda" / "kustomization.yaml").read_text())
    assert keda["kind"] == "Component"
    assert keda["resources"] == ["worker-scaledobject.yaml"]


@pytest.mark.parametrize("with_keda", [False, True], ids=["base", "keda"])
def test_kustomize_build_renders_valid_objects(tmp_path: Path, with_keda: bool) -> None:
    """``kubectl kustomize`` (offline, local files only) renders what ``apply -k`` applies."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(K8S, tmp_path)],
    }
    if with_keda:
        overlay["components"] = [os.path.relpath(K8S / "keda", tmp_path)]
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    out = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    for doc in docs:
        validate_k8s(doc, K8S_VERSIONS[-1])
    kinds = [d["kind"] for d in docs]
    # KEDA owns its own HPA: the component must remove the base one, never run both.
    assert kinds.count("HorizontalPodAutoscaler") == (0 if with_keda else 1)
    assert kinds.count("ScaledObject") == (1 if with_keda else 0)
    # The component swaps one object for another: the count stays that of the base.
    assert len(docs) == len(_docs_in_base())


def _docs_in_base() -> list[dict[str, Any]]:
    return [
        d
        for p in sorted(K8S.glob("*.yaml"))
        if p.name != "kustomization.yaml" and p.name not in NOT_APPLIED
        for d in load_docs(p)
    ]


def test_k8s_grace_outlasts_shutdown_grace() -> None:
    grace = parse_duration(config_env()["RELAY_SHUTDOWN_GRACE"])
    assert grace == 20
    for name in ("relay-api", "relay-worker"):
        pod = find_doc("Deployment", name)["spec"]["template"]["spec"]
        pre_stop = 0.0
        for c in pod["containers"]:
            cmd = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
            if cmd[:1] == ["sleep"]:
                pre_stop = float(cmd[1])
        # The kubelet counts the preStop hook against the same grace period.
        assert pod["terminationGracePeriodSeconds"] > grace + pre_stop, name
        assert pod["terminationGracePeriodSeconds"] == 45


def test_k8s_pods_are_locked_down_and_sized() -> None:
    pods = _pod_specs()
    # relay-redis-ha: the replicated Redis of the deploy/k8s/sentinel component
    assert set(pods) == {"relay-api", "relay-worker", "relay-redis", "relay-redis-ha"}
    for name, pod in pods.items():
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        # Service links would put RELAY_REDIS_PORT=tcp://... into relay's settings namespace.
        assert pod["enableServiceLinks"] is False, name
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False, name
            assert sc["capabilities"]["drop"] == ["ALL"], name
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(c["resources"][kind]), (name, kind)
            assert not c["image"].endswith(":latest") and ":" in c["image"], name


def test_k8s_probes_and_replicas() -> None:
    api = find_doc("Deployment", "relay-api")
    assert api["spec"]["replicas"] == 2
    (c,) = api["spec"]["template"]["spec"]["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["port"] in {p["name"] for p in c["ports"]}
    worker = find_doc("Deployment", "relay-worker")
    # the autoscaler owns the worker count (test_deploy_policies.py): none fixed here
    assert "replicas" not in worker["spec"]
    assert find_doc("HorizontalPodAutoscaler", "relay-worker")["spec"]["minReplicas"] == 3
    (w,) = worker["spec"]["template"]["spec"]["containers"]
    # The worker's only HTTP is its /metrics: that one port, no probe (see worker.yaml).
    assert w["ports"] == [{"name": "metrics", "containerPort": 9090}]
    assert not {"livenessProbe", "readinessProbe", "startupProbe"} & set(w)
    assert api["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == _dockerfile_uid()


def test_k8s_selectors_match_their_pods() -> None:
    pods = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
        for d in all_docs()
        # relay-redis-ha replaces relay-redis (deploy/k8s/sentinel): never both at once
        if d["kind"] in ("Deployment", "StatefulSet") and d["metadata"]["name"] != "relay-redis-ha"
    }

    def selects(selector: dict[str, str]) -> set[str]:
        return {n for n, labels in pods.items() if selector.items() <= labels.items()}

    assert selects(find_doc("Service", "relay-api")["spec"]["selector"]) == {"relay-api"}
    assert selects(find_doc("Service", "relay-redis")["spec"]["selector"]) == {"relay-redis"}
    for name in ("relay-api", "relay-worker"):
        pdb = find_doc("PodDisruptionBudget", name)
        assert selects(pdb["spec"]["selector"]["matchLabels"]) == {name}
    hpa = find_doc("HorizontalPodAutoscaler", "relay-worker")["spec"]
    keda = find_doc("ScaledObject", "relay-worker")["spec"]
    assert hpa["scaleTargetRef"]["name"] == keda["scaleTargetRef"]["name"] == "relay-worker"
    assert hpa["minReplicas"] == keda["minReplicaCount"] == 3
    assert hpa["maxReplicas"] == keda["maxReplicaCount"]
    assert hpa["metrics"][0]["external"]["metric"]["name"] == "relay_queue_due"
    (trigger,) = keda["triggers"]
    assert "relay_queue_due" in trigger["metadata"]["query"]
    target = hpa["metrics"][0]["external"]["target"]["averageValue"]
    assert trigger["metadata"]["threshold"] == target


def test_k8s_secret_ships_no_token_and_api_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The committed Secret is an empty placeholder: ``relay api`` must refuse it."""
    import relay.runner
    from relay.cli import main

    env = config_env()
    assert env["RELAY_API_TOKENS"] == ""
    started: list[object] = []
    monkeypatch.setattr(relay.runner, "run", lambda *a, **k: started.append(a))
    env["RELAY_REDIS_URL"] = "redis://127.0.0.1:1/0"  # never resolve the in-cluster name
    result = CliRunner().invoke(main, ["api"], env=env)
    assert result.exit_code == 2 and "RELAY_API_TOKENS is not set" in result.output
    assert started == []


def test_k8s_and_compose_settings_are_accepted_by_relay() -> None:
    settings = Settings.from_env(config_env())
    assert settings.shutdown_grace == 20
    assert settings.allow_private_networks is False
    assert settings.host == "0.0.0.0"
    for env in _compose_relay_envs().values():
        Settings.from_env(env)  # raises SettingsError on a value relay cannot use
    assert set(_compose_relay_envs()) == {"api", "worker", "receiver"}
    for name in ("api", "worker"):
        assert _compose_relay_envs()[name]["RELAY_REDIS_URL"] == "redis://redis:6379/0"


# ---- RELAY_* names ------------------------------------------------------------------


def test_every_relay_variable_in_deploy_exists_in_settings() -> None:
    known = {spec.env for _, spec in declared(Settings)}
    assert len(known) > 20
    used: dict[str, set[str]] = {}
    for path in [*DEPLOY.rglob("*"), ROOT / ".dockerignore"]:
        if path.is_file():
            for name in re.findall(r"\bRELAY_[A-Z][A-Z0-9_]*", path.read_text()):
                used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert "RELAY_SHUTDOWN_GRACE" in used
    unknown = {n: sorted(f) for n, f in used.items() if n not in known}
    assert unknown == {}


# ---- Compose ------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def _interpolate(value: str) -> str:
    """Compose's ``${VAR:-default}`` with VAR unset, as on a fresh machine."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def _compose_relay_envs() -> dict[str, dict[str, str]]:
    return {
        name: {k: _interpolate(str(v)) for k, v in svc.get("environment", {}).items()}
        for name, svc in _compose()["services"].items()
        if svc.get("image", "").startswith("relay:")
    }


def test_compose_validates_against_compose_spec() -> None:
    schema = json.loads((DATA / "compose-spec.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(_compose())
    broken = _compose()
    broken["services"]["worker"]["deploy"]["replicas"] = [3]
    broken["services"]["api"]["stop_grace_perod"] = "30s"
    assert len(list(validator.iter_errors(broken))) >= 2


def test_compose_services_and_grace() -> None:
    compose = _compose()
    services = compose["services"]
    assert set(services) == {"redis", "postgres", "api", "worker", "receiver"}
    for name in ("api", "worker"):  # the history archive is on (docs/operating/archive.md)
        url = services[name]["environment"]["RELAY_ARCHIVE_URL"]
        assert url.startswith("postgresql://relay:") and url.endswith("@postgres:5432/relay")
    assert services["worker"]["deploy"]["replicas"] == 3
    assert services["worker"]["command"] == ["worker"]
    assert services["receiver"]["command"][:1] == ["receiver"]
    assert services["api"]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in services["redis"]["volumes"]
    for name in ("api", "worker"):
        svc = services[name]
        grace = parse_duration(svc["environment"]["RELAY_SHUTDOWN_GRACE"])
        assert parse_duration(svc["stop_grace_period"]) > grace, name
    envs = _compose_relay_envs()
    # The SSRF escape hatch is for the demo worker only.
    assert [n for n, e in envs.items() if "RELAY_ALLOW_PRIVATE_NETWORKS" in e] == ["worker"]
    images = {s["image"] for s in services.values()}
    assert not any(i.endswith(":latest") or ":" not in i for i in images)
    version = relay.__version__  # pyproject.toml's version is this attribute
    k8s_images = {c["image"] for p in _pod_specs().values() for c in p["containers"]}
    assert {i for i in images | k8s_images if i.startswith("relay:")} == {f"relay:{version}"}


# ---- redis.conf ---------------------------------------------------------------------


def _redis_directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition(" ")
            out[key.lower()] = value.strip()
    return out


def test_redis_conf_durability_settings() -> None:
    conf = _redis_directives(REDIS_CONF.read_text())
    assert conf["appendonly"] == "yes"
    assert conf["appendfsync"] == "always"
    assert conf["no-appendfsync-on-rewrite"] == "no"
    assert conf["maxmemory-policy"] == "noeviction"
    # The Kubernetes copy is the same file, byte for byte.
    cm = find_doc("ConfigMap", "relay-redis-config")
    assert cm["data"]["redis.conf"] == REDIS_CONF.read_text()
    # The pod's memory limit leaves fork head-room above maxmemory.
    (c,) = _pod_specs()["relay-redis"]["containers"]
    limit = c["resources"]["limits"]["memory"]
    assert limit.endswith("Gi")
    assert conf["maxmemory"].endswith("gb")
    assert int(limit[:-2]) > int(conf["maxmemory"][:-2])


def test_redis_conf_loads_in_a_real_redis_server(tmp_path: Path) -> None:
    """redis-server accepts every directive (a typo is fatal at start) and applies them."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.fail("redis-server not found: apt-get install redis-server")
    port = free_port()
    log = tmp_path / "redis.log"
    with log.open("w") as out:
        # Same file; only bind and port are overridden, to stay on loopback.
        proc = subprocess.Popen(
            [binary, str(REDIS_CONF), "--port", str(port), "--bind", "127.0.0.1"],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    client = redis.Redis("127.0.0.1", port, socket_timeout=2, socket_connect_timeout=1)
    try:
        for _ in range(200):
            if proc.poll() is not None:
                pytest.fail(f"redis-server rejected deploy/redis.conf:\n{log.read_text()}")
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.02)  # polling for start-up, not a timing assertion
        got = {k: client.config_get(k)[k] for k in ("appendonly", "appendfsync")}
        got |= {k: client.config_get(k)[k] for k in ("maxmemory-policy", "save")}
        assert got == {
            "appendonly": "yes",
            "appendfsync": "always",
            "maxmemory-policy": "noeviction",
            "save": "",
        }
        client.set("relay-deploy-test", "1")
        assert (tmp_path / "appendonlydir").is_dir()
    finally:
        client.close()
        proc.terminate()
        proc.wait(timeout=30)


# ---- Dockerfile ---------------------------------------------------------------------


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _dockerfile_uid() -> int:
    users = [rest for op, rest in _instructions() if op == "USER"]
    return int(users[-1].split(":")[0])
