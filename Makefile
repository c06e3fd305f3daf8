# General Agent Service — one entry point for running, generating, checking and testing.
# Everything installs into the repository (.venv, node_modules, .bin, Go module cache), so a fresh
# machine needs only python3.11, node/npm and go.

SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(CURDIR)/.bin
export GOBIN := $(BIN)
export GOFLAGS ?= -mod=mod
export PATH := $(CURDIR)/$(VENV)/bin:$(BIN):$(CURDIR)/node_modules/.bin:$(PATH)

# Pinned generator versions (runtime floors in the pyproject files match these).
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
GRPCURL_VERSION := v1.9.3
GHZ_VERSION := v0.120.0

PY_GEN_OUT := clients/python/src
PROTO_FILES := $(sort $(wildcard proto/general_agent/v1/*.proto))
SERVICE_PROTO_FILES := $(sort $(wildcard proto/general_agent/v1/*_service.proto))
# grpc_tools' protoc, so the gencode matches the protobuf runtime exactly.
PROTOC = $(PY) -m grpc_tools.protoc -I proto -I third_party/googleapis \
	-I $$($(PY) -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')
GOOGLEAPIS_PROTOS := google/api/field_behavior.proto google/rpc/status.proto google/rpc/error_details.proto
BREAKING_AGAINST ?= .git\#branch=main
PYTEST_ARGS ?=
# Test processes for the parallel part of `make test` (pytest-xdist): one more than the cores, since the e2e tests
# spend part of their time waiting on server processes (2 cores: 1,028 s with 2, 747 s with 3). Tests marked
# `serial` run after it, alone.
TEST_WORKERS ?= $(shell python3 -c 'import os; print((os.cpu_count() or 1) + 1)')

.PHONY: help
help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | column -t -s $$'\t'

# ---------------------------------------------------------------- installs
$(VENV)/.installed: requirements-dev.txt server/pyproject.toml clients/python/pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q -e 'clients/python[testing]' -e server
	@touch $@

node_modules/.installed: package.json package-lock.json clients/ts/package.json clients/ts/package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	cd clients/ts && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

$(BIN)/protoc-gen-go:
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc:
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/grpcurl:
	go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
$(BIN)/ghz:
	go install github.com/bojand/ghz/cmd/ghz@$(GHZ_VERSION)

# PostgreSQL for the store's tests and the scaleout benchmark (tests/support/pg_cluster.py starts a throwaway cluster from these binaries).
.PHONY: postgres
postgres: ## Install PostgreSQL (Debian's postgresql package) when initdb is not on PATH nor under /usr/lib/postgresql.
	@if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "postgres: initdb found"; \
	else \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q postgresql; \
	fi

.PHONY: install
install: $(VENV)/.installed node_modules/.installed $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/grpcurl $(BIN)/ghz ## Install every dependency into the repository.

# ---------------------------------------------------------------- run
.PHONY: run
run: $(VENV)/.installed ## Install what is needed and start the server on 127.0.0.1:50051.
	$(VENV)/bin/general-agent serve $(ARGS)

# ---------------------------------------------------------------- protos
.PHONY: vendor-protos
vendor-protos: $(VENV)/.installed ## Copy the googleapis protos from the googleapis-common-protos wheel.
	@site=$$($(PY) -c 'import google.api, os; print(os.path.dirname(os.path.dirname(google.api.__path__[0])))'); \
	for f in $(GOOGLEAPIS_PROTOS); do mkdir -p third_party/googleapis/$$(dirname $$f); cp $$site/$$f third_party/googleapis/$$f; done

.PHONY: generate
generate: $(VENV)/.installed node_modules/.installed $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc vendor-protos ## Regenerate the Python, Go and TypeScript code.
	rm -rf $(PY_GEN_OUT)/general_agent/v1/*_pb2*.py* clients/go/gen clients/ts/src/gen
	$(PROTOC) --python_out=$(PY_GEN_OUT) --mypy_out=$(PY_GEN_OUT) $(patsubst proto/%,%,$(PROTO_FILES))
	$(PROTOC) --grpc_python_out=$(PY_GEN_OUT) --mypy_grpc_out=$(PY_GEN_OUT) $(patsubst proto/%,%,$(SERVICE_PROTO_FILES))
	buf generate --path proto/general_agent
	buf generate --template buf.gen.ts-errors.yaml --path third_party/googleapis/google/rpc/error_details.proto
	cd clients/go && go mod tidy

.PHONY: check-generated
check-generated: generate ## Fail when committed generated code is stale.
	@git add -N $(PY_GEN_OUT)/general_agent/v1 clients/go/gen clients/ts/src/gen 2>/dev/null || true
	@git diff --exit-code --stat -- $(PY_GEN_OUT)/general_agent/v1 clients/go clients/ts/src/gen third_party \
		|| (echo "generated code is stale: run 'make generate' and commit" && exit 1)

.PHONY: lint-proto
lint-proto: node_modules/.installed ## buf lint (STANDARD and COMMENTS) and buf format.
	buf lint
	buf format --diff --exit-code proto

.PHONY: breaking
breaking: node_modules/.installed ## buf breaking (WIRE_JSON) against main, once main has the proto.
	@if git cat-file -e "$$(echo '$(BREAKING_AGAINST)' | sed -E 's/.*branch=([^,]*).*/\1/'):proto/general_agent/v1" 2>/dev/null; then \
		buf breaking --against '$(BREAKING_AGAINST)'; \
	else echo "breaking: the base has no proto yet; nothing to compare"; fi

.PHONY: docs
docs: $(VENV)/.installed ## Regenerate docs/configuration.md from the settings table.
	$(VENV)/bin/general-agent settings --page > docs/configuration.md

# ---------------------------------------------------------------- checks
.PHONY: lint
lint: $(VENV)/.installed ## ruff (hand-written code only).
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

.PHONY: typecheck
typecheck: $(VENV)/.installed ## mypy --strict on the hand-written packages.
	$(VENV)/bin/mypy

.PHONY: test
test: install postgres ## Install everything (PostgreSQL too) and run the whole test suite.
	$(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal -m 'not serial' $(PYTEST_ARGS)
	$(PY) -m pytest -m serial $(PYTEST_ARGS) || [ $$? -eq 5 ]  # 5: PYTEST_ARGS selected no serial test

.PHONY: bench
bench: install ## Run the benchmarks and print ratios against the bare SDK.
	$(PY) -m bench

.PHONY: ci
ci: lint typecheck lint-proto breaking check-generated test ## Everything CI runs.

.PHONY: clean
clean: ## Remove installs and caches (not state).
	rm -rf $(VENV) node_modules clients/ts/node_modules $(BIN) .pytest_cache .mypy_cache .ruff_cache
