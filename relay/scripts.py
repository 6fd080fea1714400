"""The Lua scripts in ``lua/``, one per state transition, registered once at start.

redis-py's ``register_script`` computes each SHA locally and its call runs ``EVALSHA``,
falling back to ``SCRIPT LOAD`` on ``NOSCRIPT`` (a Redis restart or ``SCRIPT FLUSH``),
so scripts are never re-sent inline on the hot path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LUA_DIR = Path(__file__).resolve().parent.parent / "lua"
NAMES = (
    "publish",
    "claim",
    "record",
    "extend",
    "release",
    "reclaim",
    "replay",
    "endpoint_put",
    "endpoint_delete",
    "endpoints_for_app",
    "admit",
    "settle",
    "hold",
    "resume",
)


class Scripts:
    """Name -> redis-py script object, for one client."""

    def __init__(self, client: Any, lua_dir: Path = LUA_DIR) -> None:
        self._client = client
        self._sources = {name: (lua_dir / f"{name}.lua").read_text() for name in NAMES}
        self._scripts = {name: client.register_script(src) for name, src in self._sources.items()}

    def __getattr__(self, name: str) -> Any:
        try:
            return self._scripts[name]
        except KeyError:
            raise AttributeError(name) from None

    async def load(self) -> None:
        """``SCRIPT LOAD`` every script once (on every primary, for a cluster)."""
        for name, src in self._sources.items():
            sha = await self._client.script_load(src)
            if isinstance(sha, dict):  # a cluster answers per node
                sha = next(iter(sha.values()))
            self._scripts[name].sha = sha
