"""Secrets in ``deploy/k8s``: none in a ConfigMap, the Redis URL from a Secret, and the
Redis password and TLS paths of docs/operating/kubernetes.md run for real.

Each render (the base, each component, the documented overlay) is checked for secret
values in ConfigMaps: a key that is a secret setting of relay (``RELAY_REDIS_URL`` can
hold a password, ``RELAY_API_TOKENS``, ...), a URL with a password, a literal Redis
password directive. The password path starts the bundled Redis's own command (from
``redis.yaml``) with the password the Secret gives it, and relay connects with the URL
the Secret holds; the TLS path starts a TLS-only ``redis-server`` with a certificate
from a CA made here, and relay connects with the documented ``rediss://`` URL, its CA
file read from where the Deployments mount the CA Secret.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest
import redis

from relay.domain.settingspec import declared
from relay.queue.base import connect
from relay.redisproc import free_port
from relay.settings import Settings
from tests.helpers.deploy import (
    REDIS_CONF,
    ROOT,
    config_env,
    documented_overlay,
    find_doc,
    kubectl_render,
    render_kustomization,
    write_overlay,
)

GUIDE = ROOT / "docs" / "operating" / "kubernetes.md"
RENDERS = ["base", "keda", "sentinel", "documented"]
SECRET_SETTINGS = {spec.env for _, spec in declared(Settings) if spec.secret}
URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s@:]*:[^/\s@]+@", re.I)
# a Redis password written out in a config: requirepass/masterauth/auth-pass with a
# value that is not a shell variable
LITERAL_PASSWORD = re.compile(r"^(requirepass|masterauth|sentinel\s+auth-pass\s+\S+)\s+[^$\s]")


def _renders(tmp_path: Path, which: str) -> list[list[dict[str, Any]]]:
    """The offline render, and kubectl's when it is installed."""
    if which == "documented":
        folder = documented_overlay(tmp_path)
    else:
        folder = write_overlay(tmp_path, [] if which == "base" else [which])
    by_kubectl = kubectl_render(folder)
    return [render_kustomization(folder), *([by_kubectl] if by_kubectl is not None else [])]


def _secrets_in_configmaps(docs: list[dict[str, Any]]) -> list[str]:
    found = []
    for doc in docs:
        if doc["kind"] != "ConfigMap":
            continue
        for key, value in doc.get("data", {}).items():
            where = f"ConfigMap/{doc['metadata']['name']} {key}"
            if key in SECRET_SETTINGS:
                found.append(f"{where}: a secret setting")
            for line in str(value).splitlines():
                line = line.strip()
                if line.startswith("#"):
                    continue
                if URL_WITH_PASSWORD.search(line) or LITERAL_PASSWORD.match(line):
                    found.append(f"{where}: {line}")
    return found


def test_the_checker_finds_secrets() -> None:
    """The check below is really on: each kind of secret it looks for is found."""
    docs = [
        {"kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"RELAY_API_TOKENS": "t"}},
        {"kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"X": "rediss://:pw@h:1/0"}},
        {"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"c": "requirepass s3cret\n"}},
    ]
    assert len(_secrets_in_configmaps(docs)) == 3
    assert "RELAY_REDIS_URL" in SECRET_SETTINGS and "RELAY_OUTBOX_DSN" in SECRET_SETTINGS
    harmless = {"c": "# requirepass s3cret\nrequirepass $REDIS_PASSWORD\n"}
    assert _secrets_in_configmaps([{**docs[2], "data": harmless}]) == []


@pytest.mark.parametrize("which", RENDERS)
def test_no_secret_value_in_any_configmap(tmp_path: Path, which: str) -> None:
    """Fails with RELAY_REDIS_URL in relay-config (the base, or the sentinel component's
    patch of it)."""
    for docs in _renders(tmp_path, which):
        assert [d for d in docs if d["kind"] == "ConfigMap"]
        assert _secrets_in_configmaps(docs) == []


REDIS_URL_ENV = {
    "name": "RELAY_REDIS_URL",
    "valueFrom": {"secretKeyRef": {"name": "relay-redis", "key": "RELAY_REDIS_URL"}},
}


@pytest.mark.parametrize("which", RENDERS)
def test_api_and_worker_read_the_redis_url_from_the_secret(tmp_path: Path, which: str) -> None:
    """Both take RELAY_REDIS_URL from Secret relay-redis (required: a pod without it does
    not start), and ``apply -k`` carries no Secret that could overwrite it."""
    for docs in _renders(tmp_path, which):
        assert [d for d in docs if d["kind"] == "Secret"] == []
        for name in ("relay-api", "relay-worker"):
            (dep,) = [
                d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name
            ]
            (c,) = dep["spec"]["template"]["spec"]["containers"]
            assert REDIS_URL_ENV in c["env"], name
        config = next(d for d in docs if d["metadata"]["name"] == "relay-config")
        env = {**config["data"], "RELAY_API_TOKENS": "t" * 32}
        env["RELAY_REDIS_URL"] = find_doc("Secret", "relay-redis")["stringData"]["RELAY_REDIS_URL"]
        settings = Settings.from_env(env)
        assert bool(settings.redis_sentinels) == (which in ("sentinel", "documented"))


ARCHIVE_URL_ENV = {
    "name": "RELAY_ARCHIVE_URL",
    "valueFrom": {
        "secretKeyRef": {"name": "relay-archive", "key": "RELAY_ARCHIVE_URL", "optional": True}
    },
}


@pytest.mark.parametrize("which", RENDERS)
def test_api_and_worker_read_the_archive_dsn_from_its_secret(tmp_path: Path, which: str) -> None:
    """Both take RELAY_ARCHIVE_URL from Secret relay-archive (optional: without it the
    history stays in Redis), never from the ConfigMap; the template's empty DSN leaves
    the archive off and a filled one turns it on."""
    for docs in _renders(tmp_path, which):
        for name in ("relay-api", "relay-worker"):
            (dep,) = [
                d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name
            ]
            (c,) = dep["spec"]["template"]["spec"]["containers"]
            assert ARCHIVE_URL_ENV in c["env"], name
        config = next(d for d in docs if d["metadata"]["name"] == "relay-config")
        assert "RELAY_ARCHIVE_URL" not in config["data"]
    template = find_doc("Secret", "relay-archive")["stringData"]["RELAY_ARCHIVE_URL"]
    assert template == "" and Settings.from_env({"RELAY_ARCHIVE_URL": template}).archive_url == ""
    dsn = "postgresql://relay:pw@pg:5432/relay"
    assert Settings.from_env({"RELAY_ARCHIVE_URL": dsn}).archive_url == dsn


def test_the_guide_creates_the_redis_secret() -> None:
    """The first deploy creates Secret relay-redis with the URL of the bundled Redis; the
    template in secret.yaml holds the same URL, and its host is the base's Service."""
    text = GUIDE.read_text()
    assert "kubectl create secret generic relay-redis" in text
    urls = [u.strip("'\"") for u in re.findall(r"--from-literal=RELAY_REDIS_URL=(\S+)", text)]
    template = config_env()["RELAY_REDIS_URL"]
    assert urls and urls[0] == template
    host = urlsplit(template).hostname
    assert find_doc("Service", "relay-redis")["metadata"]["name"] == host
    assert "--from-literal=REDIS_PASSWORD=" in text


# ---- the password path, run ----------------------------------------------------------


def _until_up(proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            pytest.fail(f"redis-server exited:\n{log.read_text()}")
        try:
            with redis.Redis("127.0.0.1", port, socket_timeout=1) as c:
                c.ping()
            return
        except redis.AuthenticationError:
            return
        except redis.ConnectionError:
            time.sleep(0.05)  # polling for start-up, not a timing assertion
    pytest.fail(f"redis-server did not answer:\n{log.read_text()}")


@contextmanager
def _run(
    argv: list[str], env: dict[str, str], cwd: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    log = cwd / "redis.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc, log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ping(url: str) -> bool:
    """PING through relay's own client for ``RELAY_REDIS_URL=url``."""

    async def ping() -> bool:
        client = connect(Settings.from_env({"RELAY_REDIS_URL": url}))
        try:
            return bool(await client.ping())
        finally:
            await client.aclose()

    return asyncio.run(ping())


def _redis_container() -> dict[str, Any]:
    sts = find_doc("StatefulSet", "relay-redis")
    (c,) = sts["spec"]["template"]["spec"]["containers"]
    return dict(c)


# a space and a "$" in it: the command must pass it on as one word, unexpanded
@pytest.mark.parametrize("password", ["", "pw $HOME " + "a1" * 16], ids=["none", "from-secret"])
def test_bundled_redis_takes_its_password_from_the_secret(tmp_path: Path, password: str) -> None:
    """The relay-redis container's own command, its env from Secret relay-redis (the key
    optional: without it Redis starts as before, with no password). With REDIS_PASSWORD,
    relay gets in with the password in RELAY_REDIS_URL and not without it."""
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server not found: apt-get install redis-server")
    c = _redis_container()
    from_secret = {"name": "relay-redis", "key": "REDIS_PASSWORD", "optional": True}
    env_refs = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in c["env"]}
    # REDISCLI_AUTH: the probes' redis-cli authenticates with it
    assert env_refs == {"REDIS_PASSWORD": from_secret, "REDISCLI_AUTH": from_secret}
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == "config")
    port = free_port()
    conf = tmp_path / "redis.conf"
    text = REDIS_CONF.read_text()
    text = text.replace("\nport 6379\n", f"\nport {port}\n").replace("\nbind * -::*\n", "\n")
    conf.write_text(text + "bind 127.0.0.1\n")
    argv = [a.replace(f"{mount}/redis.conf", str(conf)) for a in c["command"]]
    assert argv != c["command"]
    env = {"PATH": os.environ["PATH"]}
    if password:
        env["REDIS_PASSWORD"] = password
    with _run(argv, env, tmp_path) as (proc, log):
        _until_up(proc, port, log)
        if not password:
            assert _ping(f"redis://127.0.0.1:{port}/0")
            return
        assert _ping(f"redis://:{quote(password, safe='')}@127.0.0.1:{port}/0")
        with pytest.raises(redis.AuthenticationError):
            _ping(f"redis://127.0.0.1:{port}/0")
        # exec'd by sh: this is redis-server, which overwrites its command line
        assert password.encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes()


# ---- the TLS path, run ---------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    out = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _make_certs(d: Path) -> None:
    """A CA and a server certificate it signed for 127.0.0.1."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=relay test CA", "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "2", "-extfile", "san.ext",
             "-out", "server.crt", cwd=d)  # fmt: skip


def _ca_mount(name: str) -> str:
    """Where Deployment ``name`` mounts Secret relay-redis-ca (optional: no CA, no files)."""
    spec = find_doc("Deployment", name)["spec"]["template"]["spec"]
    (vol,) = [
        v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == "relay-redis-ca"
    ]
    assert vol["secret"]["optional"] is True
    (c,) = spec["containers"]
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == vol["name"]]
    assert mount["readOnly"] is True
    return str(mount["mountPath"])


def test_documented_rediss_url_with_the_mounted_ca(tmp_path: Path) -> None:
    """The guide's ``rediss://`` URL (password, CA file where the Deployments mount Secret
    relay-redis-ca) reaches a TLS-only Redis whose certificate that CA signed; without
    the CA file the same URL fails the certificate check."""
    if shutil.which("redis-server") is None or shutil.which("openssl") is None:
        pytest.fail("redis-server and openssl are needed: apt-get install redis-server openssl")
    mount = _ca_mount("relay-api")
    assert _ca_mount("relay-worker") == mount
    text = GUIDE.read_text()
    assert "kubectl create secret generic relay-redis-ca --from-file=ca.crt=" in text
    (doc_url,) = set(re.findall(r"rediss://[^\s`'\"]+ssl_ca_certs=[^\s`'\"]+", text))
    parts = urlsplit(doc_url)
    assert parts.password and f"ssl_ca_certs={mount}/ca.crt" in parts.query
    certs = tmp_path / "certs"
    certs.mkdir()
    _make_certs(certs)
    port = free_port()
    password = "tls-" + "b2" * 16
    argv = ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1",
            "--tls-cert-file", str(certs / "server.crt"), "--tls-key-file",
            str(certs / "server.key"), "--tls-ca-cert-file", str(certs / "ca.crt"),
            "--tls-auth-clients", "no", "--requirepass", password, "--save", "",
            "--dir", str(tmp_path)]  # fmt: skip
    netloc = f":{password}@127.0.0.1:{port}"
    url = urlunsplit(parts._replace(netloc=netloc, query=parts.query.replace(mount, str(certs))))
    with _run(argv, {"PATH": os.environ["PATH"]}, tmp_path) as (proc, log):
        for _ in range(300):
            if proc.poll() is not None:
                pytest.fail(f"redis-server exited:\n{log.read_text()}")
            if _port_open(port):
                break
            time.sleep(0.05)  # polling for start-up, not a timing assertion
        else:
            pytest.fail(f"redis-server did not listen:\n{log.read_text()}")
        assert _ping(url)
        without_ca = urlunsplit(parts._replace(netloc=netloc, query=""))
        with pytest.raises(redis.ConnectionError, match="certificate verify failed"):
            _ping(without_ca)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False
