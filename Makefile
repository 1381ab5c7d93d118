# hairline: `make demo` and `make test` set up everything they need from nothing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# The build backend (maturin) and the tests find the venv's tools without activation.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
ENGINE_SOURCES := $(shell find engine/src -name '*.rs') engine/Cargo.toml Cargo.toml
# System packages the tests and benchmarks talk to for real (installed when missing, as root).
SYSDEPS := nginx wrk postgresql haproxy chromium nftables

.PHONY: all build bytecode demo test lint typecheck test-rust test-py sysdeps bench clean

all: build

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# The engine binary is copied into the venv at install time, so any Rust change reinstalls.
$(STAMP): $(PY) pyproject.toml $(ENGINE_SOURCES)
	$(PIP) install -q 'maturin>=1.5,<2'
	$(PIP) install -q --no-build-isolation -e '.[dev,ray]'
	@touch $(STAMP)

# The dashboard's browser code: pinned in web/package-lock.json, installed from npm and copied
# beside the static files (gitignored: third-party code is never committed nor loaded from a CDN).
# Swagger UI is the API docs page's (/api/v1/docs), served from the package so that a lab
# without internet sees it.
VENDOR_DIR := python/hairline/web/static/vendor
HTMX := $(VENDOR_DIR)/htmx.min.js
$(HTMX): web/package.json web/package-lock.json
	npm ci --prefix web --ignore-scripts --no-audit --no-fund --silent
	mkdir -p $(VENDOR_DIR)
	cp web/node_modules/swagger-ui-dist/swagger-ui-bundle.js web/node_modules/swagger-ui-dist/swagger-ui.css $(VENDOR_DIR)/
	cp web/node_modules/htmx.org/dist/htmx.min.js $(HTMX)

# The package's bytecode, written ahead: where PYTHONDONTWRITEBYTECODE is set (as on this
# project's VMs) every command would compile its 245 modules again at each start (0.45 s).
# compileall skips what is up to date; a module edited later is compiled in memory.
bytecode: $(STAMP)
	@$(PY) -m compileall -q python/hairline

build: $(STAMP) $(HTMX) bytecode

sysdeps:
	@missing=""; for p in $(SYSDEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing:$$missing"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing system packages:$$missing (install them, or some tests will skip)"; fi; \
	fi

demo: build
	$(VENV)/bin/hairline demo

lint: build
	$(VENV)/bin/ruff check python tests bench
	$(VENV)/bin/ruff format --check python tests bench
	PYTHONPATH=python $(VENV)/bin/lint-imports --no-cache

typecheck: build
	$(VENV)/bin/mypy

test-rust:
	cargo test --release --quiet

test-py: build sysdeps
	$(PY) -m pytest -q tests

test: lint typecheck test-rust test-py

bench: build sysdeps
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) target .hairline
