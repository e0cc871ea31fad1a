# admitter: `make test` is what CI runs; it installs what it needs (redis-server) on a fresh
# Debian machine. Go itself is expected on PATH.

GO        ?= go
PKGS      := ./...
FUZZTIME  ?= 10s

.PHONY: all build test vet fmt-check deps bench fuzz run demo clean

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

fmt-check:
	@out=$$(gofmt -l .); \
	  if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

# test: formatting, vet, and every test (unit, conformance, fuzz seeds, end-to-end) under the
# race detector.
test: deps fmt-check vet
	PATH="$$PATH:/usr/bin" $(GO) test -race -count=1 -timeout 8m $(PKGS)

bench: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s ./bucket/...

# fuzz runs every fuzz target for FUZZTIME each (seeds alone run in `make test`).
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test $$pkg -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) || exit 1; \
	  done; \
	done

# demo runs admitter with three demo tenants and shows it pacing them (see `admitter demo -h`).
.PHONY: demo
demo:
	$(GO) run ./cmd/admitter demo

# run: the service on its embedded defaults (see README); ADMITTER_* variables override them.
run:
	$(GO) run ./cmd/admitter

clean:
	rm -rf bin
