"""MkDocs hooks of relay's documentation site (``mkdocs.yml``): pages made from the code.

* ``reference/http-api.md`` from the OpenAPI document (``relay.api.openapi``), and the
  document itself as ``reference/openapi.json``;
* ``reference/settings.md`` from ``relay.settings.reference_markdown()``, unless ``docs/``
  holds that page already;
* ``changelog.md`` from ``CHANGELOG.md``;
* a page the nav names that ``docs/`` does not hold comes from ``tools/docs_fallback/``.

The CLI reference is mkdocs-click's, from the click commands themselves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
FALLBACK = Path(__file__).resolve().parent / "docs_fallback"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from relay.api.openapi import openapi_document
    from relay.settings import reference_markdown

    doc = openapi_document()
    pages = {
        "reference/http-api.md": api_markdown(doc),
        "reference/openapi.json": json.dumps(doc, indent=2) + "\n",
        "changelog.md": (ROOT / "CHANGELOG.md").read_text(),
    }
    settings = reference_markdown()
    if not settings.lstrip().startswith("# "):
        settings = "# Settings\n\n" + settings
    pages.setdefault("reference/settings.md", settings)
    for path in sorted(FALLBACK.rglob("*.md")):
        pages.setdefault(path.relative_to(FALLBACK).as_posix(), path.read_text())
    for uri, content in pages.items():
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, content=content))
    return files


# ---------------------------------------------------------------------- the HTTP API page


def api_markdown(doc: dict[str, Any]) -> str:
    """The HTTP API reference: every operation by tag, then every schema."""
    out = [
        "# HTTP API",
        "",
        "Generated from relay's OpenAPI document, which `relay api` serves at "
        "`/openapi.json` ([a copy of it](openapi.json)). Clients can be generated from it "
        "(openapi-python-client makes one function per operation).",
        "",
        doc["info"]["description"],
        "",
    ]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            by_tag.setdefault(op["tags"][0], []).append((method.upper(), path, op))
    for tag in doc["tags"]:
        out += [f"## {tag['name']}", "", tag["description"], ""]
        for method, path, op in by_tag.get(tag["name"], []):
            out += operation_markdown(method, path, op)
    out += ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        out += [f"### {name} {{#{name}}}", ""]
        if schema.get("description"):
            out += [schema["description"], ""]
        out += fields_table(schema)
    return "\n".join(out) + "\n"


def operation_markdown(method: str, path: str, op: dict[str, Any]) -> list[str]:
    out = [f"### {op['summary']} {{#{op['operationId']}}}", "", f"`{method} {path}`", ""]
    out += [op["description"], ""]
    if not op["security"]:
        out += ["Open: no token.", ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | meaning |", "| --- | --- | --- | --- |"]
        for p in params:
            required = "" if p["required"] else " (optional)"
            out.append(
                f"| `{p['name']}` | {p['in']} | {type_of(p['schema'])} | "
                f"{cell(p.get('description', ''))}{required} |"
            )
        out.append("")
    body = op.get("requestBody")
    if body:
        content = body["content"]["application/json"]
        optional = "" if body["required"] else " (optional)"
        out += [f"Body{optional}: {type_of(content['schema'])}", ""]
        for example in content.get("examples", {}).values():
            out += [
                f'```json title="{example["summary"]}"',
                json.dumps(example["value"], indent=2),
                "```",
                "",
            ]
    out += ["| status | answer |", "| --- | --- |"]
    for status, response in op["responses"].items():
        media = response.get("content", {})
        schemas = ", ".join(type_of(m["schema"]) for m in media.values())
        examples = media.get("application/json", {}).get("examples", {})
        if examples:  # an error: its codes
            codes = "<br>".join(f"`{code}`: {cell(e['summary'])}" for code, e in examples.items())
            out.append(f"| {status} | {codes} |")
        else:
            out.append(f"| {status} | {response['description']} {schemas} |")
    return [*out, ""]


def fields_table(schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties")
    if not properties:
        return [f"{type_of(schema)}", ""]
    required = set(schema.get("required", []))
    out = ["| field | type | meaning |", "| --- | --- | --- |"]
    for name, prop in properties.items():
        mark = " (required)" if name in required else ""
        out.append(f"| `{name}`{mark} | {type_of(prop)} | {cell(prop.get('description', ''))} |")
    return [*out, ""]


def type_of(schema: dict[str, Any] | bool) -> str:
    """A JSON Schema as a short phrase: ``string``, ``array of EndpointOut``, ``a or null``."""
    if not isinstance(schema, dict):
        return "any"
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name})"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " or ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(type_of(s) for s in schema[key])
    kind = schema.get("type")
    if kind == "array":
        return f"array of {type_of(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {type_of(schema['additionalProperties'])}"
    if isinstance(kind, list):
        return " or ".join(kind)
    return str(kind or "any")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
