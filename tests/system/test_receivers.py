"""The receivers the README and the receiving guide show verify what relay sends.

Each marked block (``<!-- verify-python: ... -->``, ``<!-- verify-node: ... -->``) runs as
written, given the endpoint's secret in ``WEBHOOK_SECRET``, on a request signed the way
relay's worker signs one (``relay.domain.signing``): it answers 204 when the request is
relay's, 400 when it was signed with another secret or its body was changed.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from relay.domain import signing

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "docs" / "guides" / "receiving.md"]
NODE_MODULES = ROOT / "tools" / "node_modules"


def block(page: Path, marker: str, language: str) -> str:
    text = page.read_text()
    start = text.index(f"<!-- {marker}:")
    found = re.search(rf"```{language}\n(.*?)```", text[start:], re.S)
    assert found is not None, f"{page.name}: no {language} block after {marker}"
    return found.group(1)


def signed_request(secret: str) -> tuple[bytes, dict[str, str]]:
    body = signing.build_body("evt_01M8NRGJEW00N08E236MWQ7500", "order.paid", 1, b'{"n":1}')
    headers = signing.signed_headers(
        secret_keys=[signing.secret_bytes(secret)],
        msg_id="evt_01M8NRGJEW00N08E236MWQ7500",
        timestamp=int(time.time()),
        body=body,
        delivery_id="dlv_01M8NRGJEW00N08E236MWQ7500",
        attempt=1,
        user_agent="relay/test",
    )
    return body, headers


CASES = ["relay's request", "another secret", "a changed body"]
EXPECTED = {"relay's request": 204, "another secret": 400, "a changed body": 400}


def requests(secret: str) -> list[tuple[bytes, dict[str, str]]]:
    body, headers = signed_request(secret)
    _, forged = signed_request(signing.generate_secret())
    return [(body, headers), (body, forged), (body.replace(b"1}", b"2}"), headers)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_python_receiver_verifies_relays_requests(
    page: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    secret = signing.generate_secret()
    monkeypatch.setenv("WEBHOOK_SECRET", secret)
    scope: dict[str, Any] = {}
    exec(compile(block(page, "verify-python", "python"), page.name, "exec"), scope)
    answers = [scope["receive"](body, headers) for body, headers in requests(secret)]
    assert dict(zip(CASES, answers, strict=True)) == EXPECTED
    assert 'order.paid {"n": 1}' in capsys.readouterr().out.replace("'n'", '"n"')


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_the_node_receiver_verifies_relays_requests(page: Path, tmp_path: Path) -> None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not installed: the Node receiver cannot run")
    assert (NODE_MODULES / "standardwebhooks").exists(), "`make setup` runs npm ci in tools/"
    secret = signing.generate_secret()
    driver = tmp_path / "receiver.js"
    driver.write_text(
        block(page, "verify-node", "js")
        + "\nconst cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
        "console.log(JSON.stringify(cases.map(([body, headers]) =>\n"
        "  receive(Buffer.from(body, 'base64'), headers))));\n"
    )
    cases = [(base64.b64encode(b).decode(), h) for b, h in requests(secret)]
    env = {**os.environ, "WEBHOOK_SECRET": secret, "NODE_PATH": str(NODE_MODULES)}
    run = subprocess.run(
        ["node", str(driver)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    *printed, answers = run.stdout.strip().splitlines()
    assert dict(zip(CASES, json.loads(answers), strict=True)) == EXPECTED
    assert printed == ["order.paid { n: 1 }"]
