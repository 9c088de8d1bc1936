# rocketq: `make run` and `make test` are the two set-up commands (see README.md).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: run test lint typecheck unit fast bench bench-peers chaos clean proto browser-deps dashboard-test

# setup.py builds src/rocketq/_speedups.c (optional); an editable install rebuilds it only when run again
$(VENV)/.installed: pyproject.toml setup.py src/rocketq/_speedups.c
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(VENV)/.installed-bench: $(VENV)/.installed pyproject.toml
	$(PY) -m pip install -q -e '.[bench]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/rocketq serve

lint: $(VENV)/.installed-test
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench

typecheck: $(VENV)/.installed-test
	$(PY) -m mypy

test: lint typecheck browser-deps
	$(PY) -m pytest -q

# the web console's browser tests (tests/browser) drive Debian's chromium through chromedriver:
# installed with apt-get when running as root where apt-get exists; elsewhere those tests skip
# and say why
browser-deps:
	@if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  apt-get install -y -qq chromium chromium-driver >/dev/null \
	  || { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; } \
	  || echo "could not install chromium: the browser tests will skip"; \
	else echo "chromium/chromedriver missing and apt-get not usable here: the browser tests will skip"; fi

# the console: its JSON API against an in-process cluster, then its pages in headless Chromium
dashboard-test: $(VENV)/.installed-test browser-deps
	$(PY) -m pytest -q tests/integration/test_dashboard_api.py tests/unit/test_dashboard_http.py tests/browser

unit: $(VENV)/.installed-test
	$(PY) -m pytest -q tests/unit tests/property

# the quick tier: unit, property and in-process integration tests, without the ones marked slow
# (processes killed, groups of broker processes, long timer waits) or spark, and with a quarter of
# each property test's examples (the fast Hypothesis profile, tests/_support/examples.py);
# tests/crash (kill loops), tests/interop (Node) and tests/spark stay out. No lint, no typecheck.
# Two pytest-xdist workers (the suite is CPU-bound; make test stays in one process).
fast: $(VENV)/.installed-test
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not spark" --hypothesis-profile=fast tests/unit tests/property tests/integration

bench: $(VENV)/.installed
	$(PY) bench/store_write.py
	$(PY) bench/store_read.py

# rocketq beside Redis Streams and NATS JetStream (bench/peers.py, about 20 minutes; PEERS_ARGS=--quick
# for a smoke run). A missing redis-server or nats-server is installed with apt-get when running as
# root on Debian; otherwise bench/peers.py leaves that peer out and says why.
bench-peers: $(VENV)/.installed-bench
	@for s in redis-server nats-server; do \
	  PATH="$$PATH:/usr/sbin:/sbin" command -v $$s >/dev/null 2>&1 && continue; \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y $$s || { apt-get update && apt-get install -y $$s; } || echo "could not install $$s"; \
	  else echo "$$s missing and apt-get not usable here: bench/peers.py will skip it"; fi; \
	done
	$(PY) bench/peers.py $(PEERS_ARGS)

# the chaos campaign (docs/chaos.md): randomized runs of a 3-broker DLedger group under every
# nemesis, checked for lost, duplicated, reordered and inconsistent messages and Raft safety; the
# results go into docs/chaos.md, a chart per run into docs/chaos/. About 75 minutes with the
# default CHAOS_ARGS; a failing run keeps its files and prints its seed.
CHAOS_ARGS ?= --runs 30 --seconds 120
chaos: $(VENV)/.installed-test
	$(PY) -m rocketq.testing.chaos.run $(CHAOS_ARGS) --charts docs/chaos --markdown docs/chaos.md

# regenerate the checked-in gRPC stubs of the RocketMQ 5 endpoint from src/rocketq/proxy/v2/*.proto
proto: $(VENV)/.installed-test
	$(PY) -m grpc_tools.protoc -Isrc --python_out=src --pyi_out=src --grpc_python_out=src src/rocketq/proxy/v2/*.proto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist src/rocketq/_speedups*.so
