"""Print the schema of one version of a CustomResourceDefinition, as tests/data/crds/ keeps it.

The ``openAPIV3Schema`` of VERSION, with every ``description`` removed (the schema is
for validation, the CRD keeps the prose), as sorted, indented JSON:

    python scripts/crd_schema.py CRD.yaml VERSION > tests/data/crds/KIND.json

tests/data/crds/README.md names the release and file each schema was taken from.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import yaml


def without_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main(path: str, version: str) -> None:
    with open(path, encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    (found,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = without_descriptions(found["schema"]["openAPIV3Schema"])
    json.dump(schema, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
