"""The replicated topology of ``deploy/``: Compose override, Kubernetes component, and
the start script both use (``deploy/redis-ha.sh``), the script run for real.

The script test starts 3 Redis nodes and 3 Sentinels through ``redis-ha.sh`` itself
(``redis-server`` processes on free loopback ports in a temp dir, ``deploy/redis.conf``
with only bind and dir overridden), SIGKILLs the primary, waits for the Sentinels to
promote a replica, and starts the killed node again through the script: it must come
back as a replica of the new primary, not as a second primary. Fails with the script's
Sentinel question removed (every start trusting ``FIRST_PRIMARY``): the restarted node
comes back as a primary beside the promoted one.

The script and redis.conf run from a checkout of their own, as on a machine: after the
failover (Sentinel's CONFIG REWRITE on every node it reconfigures, and each Sentinel
rewriting its file) both are byte-identical, the rewrites having landed in each node's
and each Sentinel's own copy, none readable by others. Run as root (as here), the test
gives the script a user (``RUN_AS``) and every ``redis-server`` runs as that user, never
as root. It runs twice: without a password, and with ``REDIS_PASSWORD`` (the nodes refuse
a client without it, replicas and Sentinels use it, no process shows it on its command
line, and relay reaches the new primary through the Sentinels with it in its URL).
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import redis
import yaml

from relay.queue.base import connect
from relay.redisproc import free_port
from relay.settings import Settings
from tests.helpers.deploy import (
    DATA,
    DEPLOY,
    K8S,
    K8S_VERSIONS,
    REDIS_CONF,
    render_kustomization,
    validate_k8s,
)

SCRIPT = DEPLOY / "redis-ha.sh"
OVERRIDE = DEPLOY / "docker-compose.sentinel.yml"
COMPONENT = K8S / "sentinel"


def _render(tmp_path: Path) -> list[dict[str, Any]]:
    overlay = {
        "resources": [os.path.relpath(K8S, tmp_path)],
        "components": [os.path.relpath(COMPONENT, tmp_path)],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    return render_kustomization(tmp_path)


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name, len(found))
    return found[0]


# ---- Kubernetes ----------------------------------------------------------------------


def test_k8s_component_swaps_the_single_redis_for_the_replicated_one(tmp_path: Path) -> None:
    docs = _render(tmp_path)
    for version in K8S_VERSIONS:
        for doc in docs:
            validate_k8s(doc, version)
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("StatefulSet", "relay-redis") not in names
    assert ("Service", "relay-redis") not in names
    assert ("NetworkPolicy", "relay-redis") not in names
    sts = _one(docs, "StatefulSet", "relay-redis-ha")
    assert sts["spec"]["replicas"] == 3
    service = _one(docs, "Service", "relay-redis-ha")
    assert sts["spec"]["serviceName"] == "relay-redis-ha"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert {p["port"] for p in service["spec"]["ports"]} == {6379, 26379}
    # The script in the ConfigMap is the tested file, byte for byte.
    script = _one(docs, "ConfigMap", "relay-redis-ha-script")
    assert script["data"]["redis-ha.sh"] == SCRIPT.read_text()
    # Every node runs redis.conf from the base's ConfigMap, still rendered.
    _one(docs, "ConfigMap", "relay-redis-config")

    env = dict(_one(docs, "ConfigMap", "relay-config")["data"])
    settings = Settings.from_env({**env, "RELAY_API_TOKENS": "t" * 32})
    assert settings.ack_replicas == 1
    pods = [f"relay-redis-ha-{n}.relay-redis-ha" for n in range(sts["spec"]["replicas"])]
    assert env["RELAY_REDIS_SENTINELS"] == ",".join(f"{p}:26379" for p in pods)
    for c in sts["spec"]["template"]["spec"]["containers"]:
        got = {e["name"]: e.get("value") for e in c["env"]}
        assert got["SENTINELS"] == " ".join(f"{p}:26379" for p in pods), c["name"]
        assert got["FIRST_PRIMARY"] == pods[0]
        assert got["MASTER_NAME"] == settings.redis_sentinel_master


def test_k8s_component_agrees_with_kubectl(tmp_path: Path) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:  # as in test_deploy*.py: the offline resolver above still runs
        pytest.skip("kubectl (with its built-in kustomize) is not installed")
    docs = _render(tmp_path)
    out = subprocess.run(
        [kubectl, "kustomize", str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    rendered = [d for d in yaml.safe_load_all(out.stdout) if d]
    key = lambda d: (d["kind"], d["metadata"]["name"])  # noqa: E731
    assert sorted(map(key, rendered)) == sorted(map(key, docs))
    by_key = {key(d): d for d in rendered}
    assert by_key[("ConfigMap", "relay-config")] == _one(docs, "ConfigMap", "relay-config")


# ---- Compose -------------------------------------------------------------------------


def test_compose_override_validates_and_points_relay_at_the_sentinels() -> None:
    schema = json.loads((DATA / "compose-spec.json").read_text())
    override = yaml.safe_load(OVERRIDE.read_text())
    jsonschema.Draft202012Validator(schema).validate(override)
    services = override["services"]
    sentinels = sorted(n for n in services if n.startswith("sentinel-"))
    nodes = sorted(n for n in services if n.startswith("redis"))
    assert len(sentinels) == 3 and nodes == ["redis", "redis-2", "redis-3"]
    for name in ("api", "worker"):
        env = {k: str(v) for k, v in services[name]["environment"].items()}
        base = {"RELAY_REDIS_URL": "redis://redis:6379/0", "RELAY_API_TOKENS": "t" * 32}
        settings = Settings.from_env({**base, **env})
        assert settings.ack_replicas == 1
        assert env["RELAY_REDIS_SENTINELS"] == ",".join(f"{s}:26379" for s in sentinels)
    for name in nodes + sentinels:
        env = services[name]["environment"]
        # started as root by the image, the script hands the data folder to the image's
        # redis user and runs redis-server as it
        assert env["RUN_AS"] == "redis" and "user" not in services[name], name
        assert env["SELF_HOST"] == name
        assert env["SENTINELS"] == " ".join(f"{s}:26379" for s in sentinels)
        assert env["FIRST_PRIMARY"] == "redis"
        assert "./redis-ha.sh:/usr/local/bin/redis-ha.sh:ro" in services[name]["volumes"]
    for name in nodes:
        assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in services[name]["volumes"]


# ---- the script, run -----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["redis", "sentinel"])
def test_script_refuses_to_run_redis_as_root(tmp_path: Path, mode: str) -> None:
    """Started as root without RUN_AS, the script starts nothing and says why."""
    if os.geteuid() != 0:
        pytest.skip("only a run as root can show the refusal")
    env = {
        "PATH": os.environ["PATH"],
        "SELF_HOST": "127.0.0.1",
        "FIRST_PRIMARY": "127.0.0.1",
        "FIRST_PRIMARY_PORT": str(free_port()),
        "SENTINELS": f"127.0.0.1:{free_port()}",
        "REDIS_PORT": str(free_port()),
        "SENTINEL_PORT": str(free_port()),
        "REDIS_CONF": str(REDIS_CONF),
        "DATA_DIR": str(tmp_path / "data"),
        "SENTINEL_DIR": str(tmp_path / "sentinel"),
    }
    out = subprocess.run(
        ["sh", str(SCRIPT), mode],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2 and "RUN_AS" in out.stderr, out.stderr
    assert list(tmp_path.iterdir()) == []


class _HA:
    """3 nodes and 3 Sentinels on loopback, each started through redis-ha.sh from a
    checkout (``root/checkout``: the script and redis.conf), with a data folder each;
    as ``nobody`` when the test runs as root; with REDIS_PASSWORD ``password`` if any."""

    def __init__(self, root: Path, password: str) -> None:
        self.root = root
        self.password = password
        self.node_ports = [free_port() for _ in range(3)]
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.checkout = root / "checkout"
        self.checkout.mkdir()
        self.script = self.checkout / "redis-ha.sh"
        self.conf = self.checkout / "redis.conf"
        shutil.copyfile(SCRIPT, self.script)
        shutil.copyfile(REDIS_CONF, self.conf)
        self.pristine = {p: p.read_bytes() for p in (self.script, self.conf)}
        self.logs = root / "logs"
        self.logs.mkdir()
        self.run_as = "nobody" if os.geteuid() == 0 else None
        self.uid = pwd.getpwnam("nobody").pw_uid if self.run_as else os.getuid()

    def _env(self, port: int) -> dict[str, str]:
        return {
            "PATH": os.environ["PATH"],
            "SELF_HOST": "127.0.0.1",
            "FIRST_PRIMARY": "127.0.0.1",
            "FIRST_PRIMARY_PORT": str(self.node_ports[0]),
            "SENTINELS": " ".join(f"127.0.0.1:{p}" for p in self.sentinel_ports),
            "MASTER_NAME": "relay",
            "REDIS_PORT": str(port),
            "REDIS_CONF": str(self.conf),
            **({"RUN_AS": self.run_as} if self.run_as else {}),
            **({"REDIS_PASSWORD": self.password} if self.password else {}),
            # Not 1 s: on a loaded machine a promoted node busy with its first resyncs can
            # miss a second of PINGs and be failed over again (seen: two switches).
            "DOWN_AFTER_MS": "3000",
            "FAILOVER_TIMEOUT_MS": "6000",
        }

    def start_node(self, n: int) -> None:
        port = self.node_ports[n]
        log = (self.logs / f"node{n}.log").open("ab")
        self.procs[f"node{n}"] = subprocess.Popen(
            ["sh", str(self.script), "redis", "--bind", "127.0.0.1"],
            env=self._env(port) | {"DATA_DIR": str(self.root / f"node{n}")},
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _until(lambda: _ping(port, self.password), f"node {n} up")

    def start_sentinel(self, n: int) -> None:
        port = self.sentinel_ports[n]
        d = self.root / f"sentinel{n}"
        env = self._env(self.node_ports[0]) | {
            "SENTINEL_PORT": str(port),
            "SENTINEL_DIR": str(d),
        }
        log = (self.logs / f"sentinel{n}.log").open("ab")
        self.procs[f"sentinel{n}"] = subprocess.Popen(
            ["sh", str(self.script), "sentinel", "--bind", "127.0.0.1"],
            env=env,
            cwd=self.root,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        _until(lambda: _ping(port, ""), f"sentinel {n} up")

    def node(self, port: int) -> redis.Redis:
        return redis.Redis("127.0.0.1", port, password=self.password or None)

    def role(self, port: int) -> tuple[str, int | None]:
        """``("master", None)``, or ``("slave", primary port)`` once its link is up."""
        with redis.Redis(
            "127.0.0.1", port, password=self.password or None, decode_responses=True
        ) as c:
            info = c.info("replication")
        if info["role"] == "slave" and info.get("master_link_status") != "up":
            return "syncing", info.get("master_port")
        return info["role"], info.get("master_port")

    def master(self, sentinel: int) -> int | None:
        with redis.Redis("127.0.0.1", self.sentinel_ports[sentinel], socket_timeout=2) as c:
            got = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "relay")
        return None if not got else int(got[1])

    def assert_not_root(self) -> None:
        """Every process started is redis-server (the script exec'd it), running as the
        test's user or, under root, as RUN_AS: uids, gids and groups."""
        user = pwd.getpwuid(self.uid)
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            status = dict(
                line.split(":", 1)
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            )
            assert status["Name"].strip() == "redis-server", (name, status["Name"])
            assert set(status["Uid"].split()) == {str(self.uid)}, (name, status["Uid"])
            assert set(status["Gid"].split()) == {str(user.pw_gid)}, (name, status["Gid"])
            assert self.uid != 0 and "0" not in status["Groups"].split(), name
            if self.password:
                cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()
                assert self.password.encode() not in cmdline, name

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def _ping(port: int, password: str) -> bool:
    try:
        with redis.Redis(
            "127.0.0.1",
            port,
            password=password or None,
            socket_timeout=1,
            socket_connect_timeout=1,
        ) as c:
            return bool(c.ping())
    except redis.RedisError:
        return False


def _until(check: Any, what: str, timeout: float = 30.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.1)  # polling a real server, not a timing assertion
    pytest.fail(f"timed out: {what}")


@pytest.fixture(params=["", "ha-" + "c3" * 16], ids=["no-password", "password"])
def ha(request: pytest.FixtureRequest) -> Iterator[_HA]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.fail("redis-server and redis-cli are needed: apt-get install redis-server")
    # Not pytest's tmp_path: its parent is private to the test's user, and RUN_AS's user
    # must reach its data folders.
    root = Path(tempfile.mkdtemp(prefix="relay-ha-"))
    root.chmod(0o755)
    topo = _HA(root, request.param)
    try:
        yield topo
    finally:
        topo.stop()
        shutil.rmtree(root)


@pytest.mark.realredis
def test_script_builds_the_topology_and_a_killed_primary_rejoins_as_a_replica(ha: _HA) -> None:
    p0, p1, p2 = ha.node_ports
    for n in range(3):
        ha.start_node(n)
    assert ha.role(p0) == ("master", None)
    _until(lambda: ha.role(p1) == ("slave", p0) and ha.role(p2) == ("slave", p0), "replicas")
    for n in range(3):
        ha.start_sentinel(n)
    assert {ha.master(n) for n in range(3)} == {p0}
    ha.assert_not_root()
    with ha.node(p0) as c:
        c.set("acked", "1")
        assert c.wait(2, 2000) == 2

    ha.procs["node0"].kill()
    ha.procs["node0"].wait(timeout=10)

    def settled() -> int:
        """The port every Sentinel names, once it is one replica that has taken the
        primary role and the naming holds for 2 s (0 until then)."""
        named = {ha.master(n) for n in range(3)}
        if len(named) != 1 or None in named or p0 in named:
            return 0
        (port,) = named
        if ha.role(port)[0] != "master":
            return 0
        for _ in range(20):
            time.sleep(0.1)
            if {ha.master(n) for n in range(3)} != {port}:
                return 0
        return int(port)

    new = _until(settled, "a replica promoted, and the Sentinels agreeing on it", 60.0)
    assert new in (p1, p2)

    log = ha.logs / "node0.log"
    seen = log.stat().st_size
    ha.start_node(0)  # the script asks the Sentinels: the old primary rejoins as a replica
    _until(lambda: ha.role(p0) == ("slave", new), "old primary back as a replica of the new")
    # ... because it started as one, not because a Sentinel had to demote a stale primary
    # (Sentinel does that too, moments later, but meanwhile that node takes writes the
    # next resync throws away): no runtime REPLICAOF in its log since the restart.
    restarted = log.read_bytes()[seen:].decode()
    assert "REPLICAOF" not in restarted and "user request" not in restarted, restarted
    assert f"Connecting to MASTER 127.0.0.1:{new}" in restarted
    with ha.node(new) as c:
        assert c.get("acked") == b"1"
        c.set("after", "1")
        assert c.wait(2, 5000) == 2
    with ha.node(p0) as c:
        assert c.get("after") == b"1"
    ha.assert_not_root()

    # Sentinel's rewrites went to the copies in the data folders, never to the checkout.
    assert {p: p.read_bytes() for p in ha.pristine} == ha.pristine
    rewritten = "# Generated by CONFIG REWRITE"
    for n in range(3):
        sentinel_conf = ha.root / f"sentinel{n}" / "sentinel.conf"
        assert rewritten in sentinel_conf.read_text(), n
    node_confs = [ha.root / f"node{n}" / "redis-node.conf" for n in range(3)]
    # the promoted node and the replica Sentinel pointed at it were rewritten
    assert sum(rewritten in conf.read_text() for conf in node_confs) >= 2
    # ...and none of them is for others to read: they may hold the password
    for conf in node_confs + [ha.root / f"sentinel{n}" / "sentinel.conf" for n in range(3)]:
        assert conf.stat().st_mode & 0o077 == 0, conf
    if ha.password:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis("127.0.0.1", new).ping()
        # relay finds the primary through the Sentinels and gets in with the URL's password
        assert _relay_round_trip(ha) == "1"


def _relay_round_trip(ha: _HA) -> str:
    """SET then GET through relay's own client, configured as the sentinel component does."""
    env = {
        "RELAY_REDIS_URL": f"redis://:{ha.password}@relay-redis-ha:6379/0",
        "RELAY_REDIS_SENTINELS": ",".join(f"127.0.0.1:{p}" for p in ha.sentinel_ports),
        "RELAY_REDIS_SENTINEL_MASTER": "relay",
    }

    async def round_trip() -> str:
        client = connect(Settings.from_env(env))
        try:
            await client.set("relay-ha-test", "1")
            return str(await client.get("relay-ha-test"))
        finally:
            await client.aclose()

    return asyncio.run(round_trip())
