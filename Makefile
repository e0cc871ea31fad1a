# admitter: `make test` is what CI runs; it installs what it needs (redis-server, chromium,
# staticcheck) on a fresh Debian machine. Go itself is expected on PATH.

GO        ?= go
PKGS      := ./...
FUZZTIME  ?= 10s

.PHONY: all build test test-deploy vet staticcheck fmt-check deps bench soak drill sim fuzz run demo clean console-shots

all: build

build:
	$(GO) build -o bin/admitter ./cmd/admitter

# deps makes sure the servers the tests run against exist on this machine.
deps:
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || { \
	  echo "make: redis-server not found, installing it (apt-get)"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ] || { echo "make: could not install redis-server"; exit 1; }
	@# The console's tests drive a real browser: Debian's chromium, headless.
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || { \
	  echo "make: chromium not found, installing it (apt-get)"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ] || { echo "make: could not install chromium"; exit 1; }

fmt-check:
	@out=$$(gofmt -l .); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# deploy/ is a module of its own (the parsers the deployment checks use stay out of admitter's
# dependencies): ./... does not enter it, so vet and test name it.
vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags soak ./tests/
	$(GO) vet -tags drill ./tests/
	$(GO) vet -tags sim ./bucket/
	cd deploy && $(GO) vet ./...

# staticcheck (honnef.co/go/tools) on the main module, the soak-tagged tests and deploy/. `make`
# installs the pinned version into bin/ (gitignored) the first time, with the go command that
# builds admitter (staticcheck must be built by a Go at least as new as the code it reads); a
# new STATICCHECK_VERSION lands in a directory of its own, so a bump installs it again.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(CURDIR)/bin/staticcheck-$(STATICCHECK_VERSION)/staticcheck

$(STATICCHECK):
	@echo "make: installing staticcheck $(STATICCHECK_VERSION) into bin/ (once)"
	GOBIN=$(dir $(STATICCHECK)) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

staticcheck: $(STATICCHECK)
	$(STATICCHECK) $(PKGS)
	$(STATICCHECK) -tags soak ./tests/
	$(STATICCHECK) -tags drill ./tests/
	$(STATICCHECK) -tags sim ./bucket/
	cd deploy && $(STATICCHECK) ./...

# test: formatting, vet, staticcheck, and every test (unit, conformance, fuzz seeds, end-to-end)
# under the race detector; then the checks of the deployment files (compose.yaml, Dockerfile,
# deploy/).
test: deps fmt-check vet staticcheck
	PATH="$$PATH:/usr/bin" $(GO) test -race -count=1 -parallel 4 -timeout 8m $(PKGS)
	# allocation budgets hold in a plain build only (the race detector changes escape analysis)
	PATH="$$PATH:/usr/bin" $(GO) test -count=1 -run 'Allocations' ./bucket
	$(MAKE) --no-print-directory test-deploy

# test-deploy: the deployment files checked with compose-spec's loader, BuildKit's Dockerfile
# parser, Prometheus' rule file and PromQL parsers (the alerts too) and Helm's renderer with
# Kubernetes' strict decoder (no container engine or cluster needed; seconds once built).
test-deploy:
	cd deploy && $(GO) test -count=1 ./...

# bench: admitter side by side with redis_rate (alone, and behind net/http for the decision API),
# a minimal-script ceiling and a plain JetStream relay, on servers it starts itself on 127.0.0.1
# (about two minutes): progress, then a table
# against the goals; the same figures in bench-results.json. Extra flags in BENCHFLAGS, e.g.
# BENCHFLAGS=-quick, or BENCHFLAGS='-scenarios e2e -cpuprofile admitter.pprof' (see -h).
bench: deps
	PATH="$$PATH:/usr/bin" $(GO) run ./cmd/admitter-bench -json bench-results.json $(BENCHFLAGS)

# console-shots: screenshots of the console's pages (overview, tenants, a tenant, dead letters,
# a dead letter) under docs/console/, taken by the browser test against a running admitter with
# traffic.
console-shots: deps
	mkdir -p docs/console
	PATH="$$PATH:/usr/bin" ADMITTER_CONSOLE_SHOTS="$$(pwd)/docs/console" $(GO) test -count=1 -run 'TestConsoleInBrowser$$' ./tests/

# drill: the failure drills of the built binary, each counting runs per job at a worker on the
# worker package: replicas killed, paused and restarted under a pool (TestTakeoverDrill), Redis
# killed, emptied and cut (TestRedisOutageDrill), one replica cut from Redis while its peer
# reaches it (TestPartialOutageScene). About 90 s each, DRILL_RUNS times (default 1); they time
# faults against the pool's leases, so they run alone, not in `make test`.
DRILL_RUNS ?= 1
drill: deps
	ADMITTER_DRILL_RUNS=$(DRILL_RUNS) PATH="$$PATH:/usr/bin" $(GO) test -count=1 -tags drill -run 'Drill$$|^TestPartialOutageScene$$' -v -timeout 60m ./tests/

# soak: traffic of 40 tenants through 3 admitter replicas (the built binary), a 3-node NATS
# cluster (nats-server processes, streams R3) and Redis (appendonly yes), with a fault every
# ~20 s at random (a replica, a NATS node or Redis killed, paused or restarted), for SOAK; then the
# invariants (nothing lost, nothing twice, pacing within C + r·t) and a table of the faults and
# what each cost. Not part of `make test`. SOAKFLAGS are ADMITTER_SOAK_* variables, e.g.
# SOAKFLAGS='ADMITTER_SOAK_SEED=42 ADMITTER_SOAK_REDIS=forget' (see tests/soak_test.go).
SOAK      ?= 10m
SOAKFLAGS ?=
soak: deps
	ADMITTER_SOAK=$(SOAK) $(SOAKFLAGS) PATH="$$PATH:/usr/bin" $(GO) test -count=1 -tags soak -run '^TestSoak$$' -v -timeout 24h ./tests/

# sim: the deterministic simulation of the limiter layer (bucket/sim_*_test.go, build tag sim)
# for SEEDS seeds from SEED, each SIMTIME of simulated time; a failing seed prints how to replay
# it alone. Not part of `make test` until every seed passes (issue 38's N1 and N5 are open).
SEEDS   ?= 1000
SEED    ?= 1
SIMTIME ?= 60s
sim: deps
	PATH="$$PATH:/usr/bin" $(GO) test -count=1 -tags sim -run '^TestSimulation$$' -timeout 4h ./bucket -sim.seeds=$(SEEDS) -sim.first=$(SEED) -sim.duration=$(SIMTIME)

# fuzz runs every fuzz target for FUZZTIME each (seeds alone run in `make test`).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

# demo runs admitter with three demo tenants and shows it pacing them (see `admitter demo -h`).
# On a fresh clone the first build downloads the modules and compiles for minutes: say so first
# (`go run` would be silent all that time), then run the binary built.
.PHONY: demo
demo:
	@echo "make demo: building admitter into bin/ (the first build downloads modules and takes a few minutes)..."
	@$(GO) build -o bin/admitter ./cmd/admitter
	bin/admitter demo

# run: the service on its embedded defaults (see README); ADMITTER_* variables override them.
run:
	$(GO) run ./cmd/admitter

clean:
	rm -rf bin
