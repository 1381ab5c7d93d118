# hairline: `make demo` and `make test` set up everything they need from nothing.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# The build backend (maturin) and the tests find the venv's tools without activation.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
ENGINE_SOURCES := $(shell find engine/src -name '*.rs') engine/Cargo.toml Cargo.toml .cargo/config.toml
# System packages the tests and benchmarks talk to for real (installed when missing, as root).
SYSDEPS := nginx wrk postgresql haproxy chromium nftables bubblewrap linux-perf

.PHONY: all build bytecode wheel demo test lint typecheck rust-tests test-rust test-py test-shared test-alone sysdeps bench clean

all: build

# uv (from PyPI) installs the packages: 122 s against pip's 192 s for a fresh venv with
# nothing cached, the engine's build included (bench/RESULTS.md, "Setting up"). It compiles their bytecode
# as pip does: where PYTHONDONTWRITEBYTECODE is set, every process would compile them again.
UV := $(VENV)/bin/uv
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q 'uv>=0.5'

# The engine binary is copied into the venv at install time, so any Rust change reinstalls.
$(STAMP): $(PY) pyproject.toml $(ENGINE_SOURCES)
	$(UV) pip install -q --python $(PY) --compile-bytecode 'maturin>=1.5,<2'
	$(UV) pip install -q --python $(PY) --compile-bytecode --no-build-isolation -e '.[dev,ray]'
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

# A wheel that works without the clone (README, "Install on a lab machine"): the engine,
# the `hairline` command and every package file, the vendored browser code included
# (gitignored, so only present after $(HTMX)). The venv's maturin builds it: no download.
wheel: $(STAMP) $(HTMX)
	$(PIP) wheel --no-deps --no-build-isolation --wheel-dir dist .

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

# The Rust tests' build needs no venv: it runs beside pip's downloads and the release build
# that maturin starts (cargo's lock on target/ orders the two; they share the dependencies).
rust-tests:
	cargo test --release --quiet --no-run

test-rust: rust-tests
	cargo test --release --quiet

# Two parts (tests/conftest.py): the tests that time nothing share both CPUs (-n 2), then
# the ones that measure have the machine to themselves. pytest keeps its rewritten test
# modules as bytecode: where PYTHONDONTWRITEBYTECODE is set (this project's VMs) each of the
# three collections rewrote every one again (8 s each).
test-shared: build sysdeps
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n 2 --suite-part=shared tests

test-alone: build sysdeps
	PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q --suite-part=alone tests

test-py:
	$(MAKE) --no-print-directory test-shared
	$(MAKE) --no-print-directory test-alone

# Setup in parallel where it waits on the network or a lock; mypy (one CPU, 32 s) beside the
# tests that share the CPUs, which time nothing; then the tests that time things run alone
# on the machine.
test:
	$(MAKE) --no-print-directory -j2 --output-sync=target build rust-tests
	$(MAKE) --no-print-directory lint test-rust
	$(MAKE) --no-print-directory -j2 --output-sync=target typecheck test-shared
	$(MAKE) --no-print-directory test-alone

bench: build sysdeps
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) target .hairline
