# miniplane: build, image and the docker compose deployment.
#
#   make build         static binary in _output/bin/miniplane
#   make image         the FROM scratch image $(IMAGE) from that binary (nothing is pulled)
#   make compose-up    image + `docker-compose up -d`, then wait until every service is healthy;
#                      the admin kubeconfig is $(COMPOSE_DIR)/kubeconfig (https://127.0.0.1:6443)
#   make compose-ps    list the services and their health
#   make compose-logs  follow the logs
#   make compose-down  remove the containers, network, etcd volumes and $(COMPOSE_DIR)
#   make compose-test  the fault-test suite (test/compose): builds, brings up its own stack
#                      under a unique project name, runs the faults, removes everything
#   make conformance   upstream's e2e specs (FOCUS, default '\[sig-apps\] Daemon set'; or
#                      PROFILE=conformance: the applicable [Conformance] specs of sig-apps,
#                      sig-api-machinery, sig-auth's ServiceAccounts and sig-instrumentation's
#                      Events) against `miniplane up --nodes $(NODES)`; builds
#                      upstream's e2e binary once (long). Not part of CI; see
#                      test/conformance/run.sh --help and docs/conformance.md
#   make bench         the scale benchmark (docs/performance.md): `miniplane up --nodes 0` and
#                      `miniplane kubeletstub --nodes N` as two processes, a DaemonSet rolled
#                      out and updated over N nodes, for each N of NODES_LIST (default
#                      1000,5000); prints times, pods/s, peak RSS and CPU per process and the
#                      raw etcd write rate. BENCH_ARGS adds flags (e.g. -bench.up-args=...;
#                      -bench.in-process runs `miniplane up --nodes N` as one process)

SHELL := /bin/bash
GO ?= go
IMAGE ?= miniplane:latest
# docker-compose (v1) when installed, else the docker compose plugin (v2).
COMPOSE ?= $(shell command -v docker-compose >/dev/null 2>&1 && echo docker-compose || echo docker compose)
COMPOSE_PROJECT ?= miniplane
COMPOSE_DIR ?= $(CURDIR)/.miniplane-compose
COMPOSE_PORT ?= 6443
# Seconds compose-up waits for every service to report healthy.
COMPOSE_WAIT ?= 120

BIN_DIR := _output/bin
IMAGE_CONTEXT := _output/image

export MINIPLANE_IMAGE := $(IMAGE)
export MINIPLANE_COMPOSE_DIR := $(COMPOSE_DIR)
export MINIPLANE_COMPOSE_PORT := $(COMPOSE_PORT)
# The containers run as root; the certs service hands what it writes to the calling user.
export MINIPLANE_UID := $(shell id -u)
export MINIPLANE_GID := $(shell id -g)

COMPOSE_CMD = $(COMPOSE) -f docker-compose.yml -p $(COMPOSE_PROJECT)

# Fleet sizes of `make bench`.
NODES_LIST ?= 1000,5000
BENCH_ARGS ?=

.PHONY: build image compose-up compose-ps compose-logs compose-down compose-test conformance bench

# Same compile mode as `CGO_ENABLED=0 go test` (no -trimpath), so the build cache is shared.
build:
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o $(BIN_DIR)/miniplane ./cmd/miniplane

# The build context holds only the binary, so nothing else of the tree is sent to docker.
# The image this tag pointed to before is removed when nothing else uses it, so rebuilding
# does not pile up 70 MB dangling images.
image: build
	@mkdir -p $(IMAGE_CONTEXT)
	cp $(BIN_DIR)/miniplane $(IMAGE_CONTEXT)/miniplane
	@old=$$(docker image ls -q $(IMAGE)); \
	docker build -q -f Dockerfile -t $(IMAGE) $(IMAGE_CONTEXT) || exit 1; \
	new=$$(docker image ls -q $(IMAGE)); \
	if [ -n "$$old" ] && [ "$$old" != "$$new" ]; then docker rmi $$old >/dev/null 2>&1 || true; fi; \
	echo "image $(IMAGE) ($$new)"

compose-up: image
	@mkdir -p $(COMPOSE_DIR)
	@start=$$(date +%s); \
	$(COMPOSE_CMD) up -d --remove-orphans || exit 1; \
	echo "waiting for every service to be healthy (at most $(COMPOSE_WAIT)s)..."; \
	while :; do \
	  ids=$$(docker ps -aq --filter label=com.docker.compose.project=$(COMPOSE_PROJECT)); \
	  pending=0; failed=""; \
	  for id in $$ids; do \
	    read -r name state health code < <(docker inspect -f '{{.Name}} {{.State.Status}} {{with index .State "Health"}}{{index . "Status"}}{{else}}none{{end}} {{.State.ExitCode}}' $$id); \
	    case "$$state/$$health/$$code" in \
	      exited/none/0) ;; \
	      running/healthy/*) ;; \
	      running/starting/*) pending=$$((pending+1)) ;; \
	      *) failed="$$failed $${name#/}($$state/$$health/$$code)" ;; \
	    esac; \
	  done; \
	  if [ -n "$$failed" ]; then echo "failed:$$failed; see 'make compose-logs'" >&2; exit 1; fi; \
	  if [ -n "$$ids" ] && [ $$pending -eq 0 ]; then break; fi; \
	  if [ $$(( $$(date +%s) - start )) -ge $(COMPOSE_WAIT) ]; then echo "$$pending services still starting after $(COMPOSE_WAIT)s" >&2; exit 1; fi; \
	  sleep 1; \
	done; \
	echo "all $$(echo $$ids | wc -w) services ready (healthy, or done for the one-shot certs) in $$(( $$(date +%s) - start ))s"; \
	echo; \
	echo "  export KUBECONFIG=$(COMPOSE_DIR)/kubeconfig"; \
	echo "  kubectl get nodes"; \
	echo; \
	echo "stop and remove everything with: make compose-down"

compose-ps:
	$(COMPOSE_CMD) ps

compose-logs:
	$(COMPOSE_CMD) logs -f --tail=100

compose-down:
	$(COMPOSE_CMD) down -v --remove-orphans
	rm -rf -- "$(COMPOSE_DIR)"

compose-test:
	MINIPLANE_COMPOSE_TEST=1 CGO_ENABLED=0 $(GO) test -count=1 -timeout 30m -v ./test/compose/

conformance:
	test/conformance/run.sh

# Held under a lock so that benchmark runs of different users of this machine do not overlap.
bench:
	flock /tmp/miniplane-bench.lock env CGO_ENABLED=0 $(GO) test -run '^$$' -bench '^BenchmarkProcessRollout$$' -benchtime 1x \
	  -timeout 60m ./test/bench/ -bench.nodes $(NODES_LIST) $(BENCH_ARGS)
