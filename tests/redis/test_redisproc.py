"""Tests for relay.redisproc: real redis-server processes, crash/restart, cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis.cluster import RedisCluster as ClusterClient

from relay.redisproc import (
    RedisBinaryMissing,
    RedisCluster,
    RedisServer,
    free_port,
    redis_binary,
)

needs_redis = pytest.mark.skipif(redis_binary() is None, reason="redis-server not installed")


def test_free_port_is_bindable() -> None:
    port = free_port()
    assert 1024 <= port <= 65535


def test_missing_binary_raises_with_install_hint(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, binary="/nonexistent/redis-server")
    with pytest.raises(RedisBinaryMissing) as excinfo:
        server.start()
    assert "apt-get install redis-server" in str(excinfo.value)
    assert isinstance(excinfo.value, RuntimeError)
    assert not server.running


@needs_redis
def test_key_survives_sigkill_and_restart(tmp_path: Path) -> None:
    with RedisServer(data_dir=tmp_path) as server:
        assert server.running
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        port, first_pid = server.port, server.pid

        with redis.Redis.from_url(server.url) as client:
            client.set("relay:crash", "survived")
            client.rpush("relay:list", "a", "b", "c")

        server.kill()
        assert not server.running

        server.restart()
        assert server.running
        assert server.port == port
        assert server.pid != first_pid

        with redis.Redis.from_url(server.url, decode_responses=True) as client:
            assert client.get("relay:crash") == "survived"
            assert client.lrange("relay:list", 0, -1) == ["a", "b", "c"]

    assert not server.running
    assert (tmp_path / "redis.log").exists()


@needs_redis
def test_stop_is_graceful_and_idempotent(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, appendonly=False)
    server.start()
    server.stop()
    assert not server.running
    server.stop()
    server.kill()


@needs_redis
def test_start_failure_reports_log_tail(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, extra_args=["--no-such-option", "1"])
    with pytest.raises(RuntimeError, match="exited"):
        server.start(timeout=5.0)
    assert not server.running


@needs_redis
def test_three_master_cluster(tmp_path: Path) -> None:
    with RedisCluster(data_dir=tmp_path) as cluster:
        assert len(cluster.nodes) == 3
        assert len(cluster.startup_nodes) == 3
        assert cluster.url == f"redis://127.0.0.1:{cluster.nodes[0].port}/0"

        host, port = cluster.startup_nodes[0]
        client = ClusterClient(host=host, port=port, decode_responses=True)
        try:
            keys = [f"key:{i}" for i in range(30)]
            slots = {client.keyslot(k) for k in keys}
            owners = {client.get_node_from_key(k).port for k in keys}
            assert len(slots) > 3
            assert len(owners) == 3  # keys really spread over all masters
            for k in keys:
                client.set(k, k.upper())
            for k in keys:
                assert client.get(k) == k.upper()
        finally:
            client.close()

    assert all(not node.running for node in cluster.nodes)
