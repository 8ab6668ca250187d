# ffscan build, test and demo entry points. See README.md.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
BIN       := bin
PLUGINS   := $(notdir $(wildcard plugins/*))
GOFILES    = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go')
# The repository's Go modules (go.work ties them): `go test ./...` in one
# directory only reaches that directory's module, so every target that
# walks packages walks each module.
MODULES   := . keys lua sdk
# each_module runs a go command in every module, e.g. $(call each_module,build ./...)
each_module = for m in $(MODULES); do echo "($$m) $(GO) $(1)"; (cd $$m && $(GO) $(1)) || exit 1; done
# ALL_PKGS names every package of every module for one go command run from
# the root (go.work): one vet or test run schedules all packages together,
# so a long package of one module overlaps the others instead of waiting
# for its module's turn.
ALL_PKGS  := ./... $(foreach m,$(filter-out .,$(MODULES)),github.com/ffscan/ffscan/$(m)/...)
# TEST_P is how many test packages run at once: one per CPU. A test
# package starts its own servers and plugin processes, and those are what
# compete for the CPU: four packages at once on 2 cores (the earlier
# setting, faster on a quiet machine) left plugin launches and failovers
# starved on a fresh or busy one, and the suite failed there (issue 46).
NPROC     := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
TEST_P    ?= $(NPROC)
# RENAMED_PLUGINS are binary names ffscan's plugins had before: a bin/
# from an earlier build would hold them beside their new names, and two
# binaries declaring one scanner make the host refuse to choose.
RENAMED_PLUGINS := dependencyreconciler retentiontrimmer
# BACKEND picks make run's store: valkey (default) or postgres.
BACKEND   ?= valkey

.PHONY: build lua test compat lint run bench stress-pg proto clean

## build: the host and every plugin into bin/ (plugins into bin/plugins/)
build: lua
	@mkdir -p $(BIN)/plugins
	@rm -f $(addprefix $(BIN)/plugins/,$(RENAMED_PLUGINS))
	@$(call each_module,build ./...)
	$(GO) build -o $(BIN)/ffscan ./cmd/ffscan
	@for p in $(PLUGINS); do \
	  if [ -f plugins/$$p/cmd/$$p/main.go ]; then echo "$(GO) build -o $(BIN)/plugins/$$p ./plugins/$$p/cmd/$$p"; \
	    $(GO) build -o $(BIN)/plugins/$$p ./plugins/$$p/cmd/$$p; fi; \
	done
	@# The host refuses plugins others may write (a umask of 002 would
	@# make them group-writable).
	@chmod go-w $(BIN)/plugins $(BIN)/plugins/* $(BIN)/ffscan

## lua: the exact library source the loader loads, for operators' own tooling
lua:
	@mkdir -p $(BIN)
	$(GO) run github.com/ffscan/ffscan/lua/cmd/genlua -o $(BIN)/flowfabric.lua
	@echo "wrote $(BIN)/flowfabric.lua (load with: valkey-cli -x FUNCTION LOAD REPLACE < $(BIN)/flowfabric.lua)"

## test: vet, the compat replays and differential campaign, every test with -race
## against real servers on the key-guarded library (a function touching a key
## outside its KEYS fails), then
## make run's start and Ctrl-C (scripts/check-run.sh) and the plugin guide's
## steps as a third party runs them (scripts/check-guide.sh)
test:
	$(GO) vet $(ALL_PKGS)
	$(GO) vet -tags ffscan_keyguard $(ALL_PKGS)
	@# The compat replays and the differential campaign run first and
	@# alone: both read the server's clock before each step and compare
	@# times at 100 ms granularity, so a step starved by the package
	@# tests' load (once, beside them, 50 ms late) would differ. Either
	@# failing fails the target; the package tests run whatever compat said.
	@# umask 022: the tests make plugin directories and binaries, which the
	@# host refuses when group- or world-writable.
	@# -timeout: the host package runs 7-8 minutes alone on a quiet 2-core
	@# machine, near go test's default of 10 per package binary; the
	@# timeout is a guard against a hang, not a bound on a busy machine's
	@# pace (each test bounds its own waits).
	@umask 022; \
	$(MAKE) --no-print-directory compat || cstatus=$$?; \
	echo "$(GO) test -p $(TEST_P) -race -count=1 -timeout 30m -tags ffscan_keyguard -skip '^TestCompat(Vectors|Fuzz|Diff)$$' $(ALL_PKGS)"; \
	$(GO) test -p $(TEST_P) -race -count=1 -timeout 30m -tags ffscan_keyguard -skip '^TestCompat(Vectors|Fuzz|Diff)$$' $(ALL_PKGS) || tstatus=$$?; \
	if [ "$${tstatus:-0}" -ne 0 ] || [ "$${cstatus:-0}" -ne 0 ]; then echo "make test: FAILED (package tests exit $${tstatus:-0}, compat exit $${cstatus:-0})"; exit 1; fi
	@# make run as a user runs it (and make run BACKEND=postgres): up with
	@# every scanner, Ctrl-C stops it gracefully and leaves nothing behind.
	@$(MAKE) --no-print-directory build >/dev/null
	umask 022; ./scripts/check-run.sh
	umask 022; BACKEND=postgres ./scripts/check-run.sh
	@# The plugin guide's first steps, outside this repository's modules.
	umask 022; ./scripts/check-guide.sh

## compat: replay FlowFabric's golden vectors and the differential-testing (fuzz) set against our library,
## then run the differential fuzzer (FlowFabric's library beside ours) over fixed seeds
compat:
	@out=$$(mktemp); status=0; \
	(cd lua && $(GO) test -race -count=1 -v -timeout 30m -run '^TestCompat(Vectors|Fuzz|Diff)$$' . ) >$$out 2>&1 || status=$$?; \
	if [ $$status -ne 0 ]; then cat $$out; else grep -E '^(compat( fuzz| diff)?:|--- |ok )' $$out || true; fi; \
	rm -f $$out; exit $$status

# STATICCHECK is the linter, pinned; go run fetches it once into the module
# cache (nothing is added to go.mod).
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

## lint: gofmt, go vet and staticcheck (pinned) over every module, and the
## host's architecture rules (no wall-clock call outside host/clock)
lint:
	@bad=$$(gofmt -l $(GOFILES)); if [ -n "$$bad" ]; then echo "gofmt wants to change:"; echo "$$bad"; exit 1; fi
	$(GO) vet $(ALL_PKGS)
	$(GO) run $(STATICCHECK) $(ALL_PKGS)
	$(GO) test -count=1 ./host/internal/wallclock/

## run: build, start a throwaway server, run the host with all plugins and a demo workload (BACKEND=postgres: on a throwaway PostgreSQL)
run: build
	BACKEND=$(BACKEND) ./scripts/run-demo.sh

## bench: side-by-side benchmarks (see docs/performance.md)
bench: build
	./scripts/bench.sh

## stress-pg: the multi-host Postgres tests, 20 rounds in a row beside two CPU
## burners (ROUNDS=, BURNERS=); stops at the first failing round
stress-pg:
	./scripts/stress-pg.sh

## proto: regenerate the scanner protocol code with pinned tools
proto:
	./scripts/gen-proto.sh

clean:
	rm -rf $(BIN)
