# relay: `make run` starts it, `make test` proves it. Both set themselves up.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: run test test-long test-unit test-redis test-system lint docs setup crash bench screenshots clean dist lock image

$(STAMP): pyproject.toml tools/package-lock.json
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet -e '.[test,docs]'
	@# Redocly's OpenAPI linter (tests/system/test_openapi.py), pinned in tools/package-lock.json
	@if command -v npm >/dev/null 2>&1; then npm ci --prefix tools --no-audit --no-fund --silent; \
	else echo "npm not found: tests/system/test_openapi.py will skip Redocly's lint"; fi
	@touch $(STAMP)

setup: $(STAMP)

# `make run PRIVATE_REDIS=1`: a private redis-server even when one answers on 6379
run: $(STAMP)
	$(BIN)/relay dev $(if $(filter 1,$(PRIVATE_REDIS)),--private-redis)

lint: $(STAMP)
	$(BIN)/ruff check relay tests bench scripts
	$(BIN)/ruff format --check relay tests bench scripts
	$(BIN)/mypy relay
	$(BIN)/python scripts/lint_comments.py relay tests

# the documentation site, from docs/ (mkdocs.yml); any warning fails it
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# every tier (tests/README.md), test files spread over PYTEST_WORKERS processes; tests
# marked `long` are left to `make test-long`. `make test-unit` and the like run one tier.
PYTEST_WORKERS ?= 3
PYTEST := $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: $(STAMP) lint docs
	$(PYTEST) -m "not long"

test-long: $(STAMP)
	$(PYTEST) -m long

test-unit test-redis test-system: test-%: $(STAMP)
	$(PYTEST) -m "not long" tests/$*

# requirements.lock (docs/operating/image.md): every runtime dependency of pyproject.toml,
# transitive ones too, pinned with the hashes of its files; the image installs only that.
# Run it on Linux with CPython 3.11, as the image is. It keeps the pins it has unless
# pyproject.toml moves them; `make lock UPGRADE=1` takes the newest of the others.
lock: $(STAMP)
	$(BIN)/pip install --quiet -e '.[lock]'
	CUSTOM_COMPILE_COMMAND="make lock" $(BIN)/pip-compile --quiet --generate-hashes \
	  --strip-extras --no-emit-index-url --no-emit-find-links $(if $(filter 1,$(UPGRADE)),--upgrade) \
	  --output-file requirements.lock pyproject.toml

# the image of deploy/Dockerfile (docs/operating/image.md), tagged relay:VERSION, with
# docker when its daemon answers, else podman; BUILDER=docker|podman picks one. podman
# builds OCI images unless told --format docker, and an OCI image has no HEALTHCHECK.
VERSION := $(shell sed -n 's/^__version__ = "\([^"]*\)".*/\1/p' relay/__init__.py)
IMAGE   ?= relay:$(VERSION)
BUILDER ?= $(shell if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; \
	then echo docker; elif command -v podman >/dev/null 2>&1; then echo podman; fi)

image:
	@test -n "$(BUILDER)" || { echo "make image: no docker daemon answers and podman is not installed" >&2; exit 1; }
	$(BUILDER) build $(if $(filter podman,$(BUILDER)),--format docker) \
	  -f deploy/Dockerfile -t $(IMAGE) .

# the sdist and the wheel of relay-webhooks, in dist/ (docs/operating/image.md)
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .

screenshots: $(STAMP)
	RELAY_SCREENSHOTS=$(CURDIR)/docs/screenshots $(BIN)/pytest -q \
	  tests/system/test_browser.py tests/system/test_browser_types.py \
	  tests/system/test_portal_browser.py tests/system/test_browser_events.py \
	  tests/system/test_browser_portal_events.py

crash: $(STAMP)
	$(BIN)/python scripts/crash.py
	$(BIN)/python scripts/crash_failover.py

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/run.py
	$(BIN)/python bench/outbox.py
	$(BIN)/python bench/ack.py
	$(BIN)/python bench/filters.py
	$(BIN)/python bench/hostile.py
	$(BIN)/python bench/crypto.py
	$(BIN)/python bench/tracing.py
	$(BIN)/python bench/apiauth.py
	$(BIN)/python bench/ops_flood.py
	$(BIN)/python bench/pool.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/destinations.py
	$(BIN)/python bench/archive.py
	$(BIN)/python bench/cluster_placement.py

clean:
	rm -rf $(VENV) .relay .pytest_cache .mypy_cache .ruff_cache build/site tools/node_modules dist
