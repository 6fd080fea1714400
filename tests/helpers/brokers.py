"""The customer's brokers for the destination tests: each a private server on a free
loopback port in a temp dir, never the machine's own services, with a kit that reads what
arrived in it, stops and starts it, and makes the urls the tests create endpoints with.

A kit's ``dest`` names one test's own place in the broker: a stream (Redis), a subject
prefix with its JetStream stream (NATS), a queue bound to an exchange (RabbitMQ).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from relay.redisproc import RedisServer, free_port

PASSWORD = "s3cret-Broker-Pw"  # a broker password the tests look for in answers and logs
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"
EPMD = shutil.which("epmd") or "/usr/bin/epmd"
RABBITMQ_SERVER = shutil.which("rabbitmq-server") or "/usr/sbin/rabbitmq-server"


@dataclass
class Got:
    """One message as a consumer reads it: its three webhook values and its body."""

    headers: dict[str, str]
    body: bytes


class RedisKit:
    """A customer Redis (``redis-server`` with ``requirepass``), streams as destinations."""

    kind = "redis"

    def __init__(self, data_dir: Path) -> None:
        self.server = RedisServer(data_dir=data_dir, appendonly=True, appendfsync="everysec")
        self.port = 0

    def start(self) -> None:
        self.server.start()
        self.port = self.server.port or 0
        self._admin_sync("CONFIG", "SET", "requirepass", PASSWORD)

    def _admin_sync(self, *args: str) -> None:
        import redis

        with redis.Redis("127.0.0.1", self.port) as client:
            client.execute_command(*args)

    def client(self) -> aioredis.Redis:
        return aioredis.Redis(host="127.0.0.1", port=self.port, password=PASSWORD)

    def url(self, dest: str, *, password: str = PASSWORD, port: int | None = None) -> str:
        return f"redis://:{password}@127.0.0.1:{port or self.port}/0?stream={dest}&maxlen=100000"

    async def prepare(self, dest: str) -> None:
        """Nothing: ``XADD`` makes the stream."""

    async def misconfigure(self, dest: str) -> str:
        """A url the broker refuses: the stream's key holds a string (WRONGTYPE)."""
        async with self.client() as client:
            await client.set(dest, "not a stream")
        return self.url(dest)

    async def count(self, dest: str) -> int:
        async with self.client() as client:
            return int(await client.xlen(dest))

    async def messages(self, dest: str) -> list[Got]:
        async with self.client() as client:
            entries = await client.xrange(dest)
        out = []
        for _, fields in entries:
            text = {k.decode(): v for k, v in fields.items()}
            body = text.pop("body")
            out.append(Got({k: v.decode() for k, v in text.items()}, body))
        return out

    async def down(self) -> None:
        await asyncio.to_thread(self.server.stop)

    async def up(self) -> None:
        # not in a thread: redis-server dies with the thread that started it (PDEATHSIG)
        self.start()

    def stop(self) -> None:
        self.server.stop()


def listening(port: int) -> bool:
    """Something accepts connections on the loopback ``port``."""
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


class ProcessKit:
    """A broker process on 127.0.0.1 started from ``command()``, ready when its port
    accepts a connection; stopped with SIGTERM and started again on the same port and
    data dir (what it persisted survives)."""

    name = "broker"

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str] | None:
        return None

    def start(self, within: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        log = (self.data_dir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(
            self.command(), stdout=log, stderr=log, env=self.env(), start_new_session=True
        )
        deadline = time.monotonic() + within
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.name} did not start; see {self.data_dir}")
            time.sleep(0.1)

    def ready(self) -> bool:
        return listening(self.port)

    def stop(self) -> None:
        """SIGTERM to its whole process group (a start script's children too), and wait
        until its port is closed."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        deadline = time.monotonic() + 30
        while listening(self.port) and time.monotonic() < deadline:
            time.sleep(0.1)

    async def down(self) -> None:
        await asyncio.to_thread(self.stop)

    async def up(self) -> None:
        await asyncio.to_thread(self.start)


class NatsKit(ProcessKit):
    """``nats-server -js`` with a user and password; a JetStream stream per ``dest``
    takes the subjects ``dest.>``."""

    kind = name = "nats"
    user = "relay"

    def command(self) -> list[str]:
        return [
            NATS_SERVER,
            *("-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.data_dir)),
            *("--user", self.user, "--pass", PASSWORD),
        ]

    def url(self, dest: str, *, password: str = PASSWORD, port: int | None = None) -> str:
        where = f"127.0.0.1:{port or self.port}"
        return f"nats://{self.user}:{password}@{where}/{dest}.{{type}}"

    @contextlib.asynccontextmanager
    async def js(self) -> AsyncIterator[Any]:
        import nats

        client = await nats.connect(
            f"nats://127.0.0.1:{self.port}", user=self.user, password=PASSWORD
        )
        try:
            yield client.jetstream()
        finally:
            await client.close()

    async def prepare(self, dest: str) -> None:
        async with self.js() as js:
            await js.add_stream(name=dest, subjects=[f"{dest}.>"])

    async def misconfigure(self, dest: str) -> str:
        """A subject no stream takes."""
        return self.url(dest)

    async def count(self, dest: str) -> int:
        async with self.js() as js:
            return int((await js.stream_info(dest)).state.messages)

    async def messages(self, dest: str) -> list[Got]:
        async with self.js() as js:
            info = await js.stream_info(dest)
            out: list[Got] = []
            if not info.state.messages:
                return out
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                msg = await js.get_msg(dest, seq)
                out.append(Got(dict(msg.headers or {}), msg.data or b""))
            return out


class RabbitKit(ProcessKit):
    """``rabbitmq-server`` as a node of its own (its name, ports, epmd, files and cookie
    in the temp dir; no plugins), user ``relay``; a queue ``dest`` bound to the topic
    exchange ``relay-test`` with ``dest.#``."""

    kind = name = "amqp"
    user = "relay"
    exchange = "relay-test"

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.node = f"relay{uuid.uuid4().hex[:8]}@localhost"
        self.dist_port = self.epmd_port = 0
        self.epmd: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [RABBITMQ_SERVER]

    def start(self, within: float = 120.0) -> None:
        if self.epmd is None:  # its own, in the foreground: the node would start a daemon
            self.epmd_port = free_port()
            cmd = [EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"]
            null = subprocess.DEVNULL
            self.epmd = subprocess.Popen(cmd, stdout=null, stderr=null, start_new_session=True)
        super().start(within)

    def stop(self) -> None:
        """SIGTERM to the node itself (its start script runs it in a session of its own,
        as user rabbitmq), then to the script; wait until it has exited."""
        pid_file = self.data_dir / "rabbit.pid"
        if pid_file.exists():
            pid = int(pid_file.read_text().strip() or 0)
            pid_file.unlink()
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                deadline = time.monotonic() + 30
                while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
                    time.sleep(0.1)
                os.kill(pid, signal.SIGKILL)
        super().stop()

    def close(self) -> None:
        """Stop the node and its epmd."""
        self.stop()
        if self.epmd is not None:
            self.epmd.terminate()
            self.epmd.wait()

    def env(self) -> dict[str, str]:
        d = self.data_dir
        self.dist_port = self.dist_port or free_port()
        d.chmod(0o777)  # run as root, Debian's scripts start the node as user rabbitmq
        (d / "enabled_plugins").write_text("[].\n")
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            f"default_user = {self.user}\ndefault_pass = {PASSWORD}\n"
            "loopback_users = none\n"
        )
        return {
            **os.environ,
            "HOME": str(d),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "rabbit.pid"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
        }

    def ready(self) -> bool:
        if not super().ready():
            return False
        try:
            asyncio.run(self._declare_exchange())
        except Exception:
            return False
        return True

    async def _declare_exchange(self) -> None:
        async with self.channel() as channel:
            await channel.declare_exchange(self.exchange, "topic", durable=True)

    @contextlib.asynccontextmanager
    async def channel(self) -> AsyncIterator[Any]:
        import aio_pika

        connection = await aio_pika.connect(
            host="127.0.0.1", port=self.port, login=self.user, password=PASSWORD
        )
        try:
            yield await connection.channel()
        finally:
            await connection.close()

    def url(self, dest: str, *, password: str = PASSWORD, port: int | None = None) -> str:
        where = f"127.0.0.1:{port or self.port}"
        query = f"exchange={self.exchange}&routing_key={dest}.{{type}}"
        return f"amqp://{self.user}:{password}@{where}/%2F?{query}"

    async def prepare(self, dest: str) -> None:
        async with self.channel() as channel:
            queue = await channel.declare_queue(dest, durable=True)
            await queue.bind(self.exchange, f"{dest}.#")

    async def misconfigure(self, dest: str) -> str:
        """A routing key no queue is bound to (mandatory: returned unroutable)."""
        return self.url(dest)

    async def count(self, dest: str) -> int:
        async with self.channel() as channel:
            queue = await channel.declare_queue(dest, durable=True, passive=True)
            return int(queue.declaration_result.message_count or 0)

    async def messages(self, dest: str) -> list[Got]:
        """Every message in the queue, in order (read and put back: not acknowledged)."""
        out = []
        async with self.channel() as channel:
            queue = await channel.declare_queue(dest, durable=True, passive=True)
            while (msg := await queue.get(no_ack=False, fail=False)) is not None:
                headers = {k: str(v) for k, v in (msg.headers or {}).items()}
                out.append(Got(headers, msg.body))
        return out  # the channel closes unacknowledged: the messages go back in order


def unused_port() -> int:
    """A loopback port nothing listens on (for unreachable destinations)."""
    return free_port()


Kit = Any  # RedisKit, NatsKit or RabbitKit: the same methods
