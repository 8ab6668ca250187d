# ffscan build, test and demo entry points. See README.md.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO        ?= go
BIN       := bin
PLUGINS   := $(notdir $(wildcard plugins/*))
GOFILES    = $(shell git ls-files '*.go' 2>/dev/null || find . -name '*.go')

.PHONY: build lua test compat lint run bench proto clean

## build: the host and every plugin into bin/ (plugins into bin/plugins/)
build: lua
	@mkdir -p $(BIN)/plugins
	$(GO) build -o $(BIN)/ffscan ./cmd/ffscan
	@for p in $(PLUGINS); do \
	  if [ -f plugins/$$p/main.go ]; then echo "$(GO) build -o $(BIN)/plugins/$$p ./plugins/$$p"; \
	    $(GO) build -o $(BIN)/plugins/$$p ./plugins/$$p; fi; \
	done

## lua: the exact library source the loader loads, for operators' own tooling
lua:
	@mkdir -p $(BIN)
	$(GO) run ./lua/cmd/genlua -o $(BIN)/flowfabric.lua
	@echo "wrote $(BIN)/flowfabric.lua (load with: valkey-cli -x FUNCTION LOAD REPLACE < $(BIN)/flowfabric.lua)"

## test: vet, every test with -race against real servers on the key-guarded library
## (a function touching a key outside its KEYS fails), then the compat replays
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -tags ffscan_keyguard -skip '^TestCompat(Vectors|Fuzz)$$' ./...
	@$(MAKE) --no-print-directory compat

## compat: replay FlowFabric's golden vectors and the differential-testing (fuzz) set against our library
compat:
	@out=$$(mktemp); status=0; \
	$(GO) test -race -count=1 -v -run '^TestCompat(Vectors|Fuzz)$$' ./lua/ >$$out 2>&1 || status=$$?; \
	if [ $$status -ne 0 ]; then cat $$out; else grep -E '^(compat( fuzz)?:|--- |ok )' $$out || true; fi; \
	rm -f $$out; exit $$status

## lint: gofmt and go vet
lint:
	@bad=$$(gofmt -l $(GOFILES)); if [ -n "$$bad" ]; then echo "gofmt wants to change:"; echo "$$bad"; exit 1; fi
	$(GO) vet ./...

## run: build, start a throwaway server, run the host with all plugins and a demo workload
run: build
	./scripts/run-demo.sh

## bench: side-by-side benchmarks (see docs/performance.md)
bench: build
	./scripts/bench.sh

## proto: regenerate the scanner protocol code with pinned tools
proto:
	./scripts/gen-proto.sh

clean:
	rm -rf $(BIN)
