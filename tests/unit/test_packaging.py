"""What the distribution declares about itself: its license (in the files, the package
metadata and the OpenAPI document alike), its name, classifiers and version.

Built and installed, the same metadata is checked in tests/system/test_wheel.py."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

import trove_classifiers

import relay
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


def test_the_distribution_name_is_not_the_index_s_relay() -> None:
    """``relay`` on the package index is an unrelated project: ``pip install relay`` must
    never be the way to install this one. The import name and the command stay ``relay``."""
    project = _project()
    assert project["name"] == "relay-webhooks"
    assert project["scripts"] == {"relay": "relay.cli:main"}
    assert project["readme"] == "README.md"


def test_classifiers_are_ones_the_index_accepts() -> None:
    classifiers = _project()["classifiers"]
    assert classifiers and sorted(set(classifiers)) == sorted(classifiers)
    unknown = [c for c in classifiers if c not in trove_classifiers.classifiers]
    assert unknown == []
    assert not [c for c in classifiers if c in trove_classifiers.deprecated_classifiers]


def test_the_version_is_the_changelog_s_newest_release() -> None:
    assert _project()["dynamic"] == ["version"]
    released = re.findall(
        r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", (ROOT / "CHANGELOG.md").read_text(), re.M
    )
    assert released[0] == relay.__version__
