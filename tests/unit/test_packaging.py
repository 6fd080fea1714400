"""What the distribution declares about itself: its license, in the files, the package
metadata and the OpenAPI document alike."""

from __future__ import annotations

import hashlib
import tomllib
from pathlib import Path
from typing import Any

from relay.api.ops import openapi_document

ROOT = Path(__file__).resolve().parents[2]
# sha256 of the Apache License 2.0 as the ASF publishes it (LICENSE-2.0.txt), byte for byte
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def _project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_license_file_is_the_apache_license_verbatim() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_SHA256


def test_pyproject_declares_the_license_as_an_spdx_expression() -> None:
    project = _project()
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    # PEP 639: the expression replaces the license classifiers; setuptools refuses both.
    assert not [c for c in project.get("classifiers", []) if c.startswith("License ::")]


def test_openapi_info_names_the_same_license() -> None:
    info = openapi_document()["info"]
    assert info["license"] == {"name": "Apache-2.0", "identifier": _project()["license"]}
