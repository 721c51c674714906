# ferry: make setup | build | test | demo | bench | clean
SHELL := /bin/bash
NPX := npx --no-install


.PHONY: all setup build build-ts build-bpf typecheck test test-unit test-bpf test-e2e demo bench cleanup clean

all: build

## setup: install Debian packages and npm dependencies, mount bpffs (idempotent)
setup:
	@bash scripts/setup.sh

## build: TypeScript into dist/, BPF objects into build/bpf/
build: setup build-ts build-bpf

build-ts:
	@$(NPX) tsc -p tsconfig.json

build-bpf: build-ts
	@node bin/ferry.js compile

## typecheck: the tests and benchmarks too, not only src/
typecheck: setup
	@$(NPX) tsc -p tsconfig.test.json

## test: every test (unit, bpf, e2e); bpf and e2e need root
test: build typecheck
	@mkdir -p build
	@set -o pipefail; $(NPX) vitest run --reporter=verbose --reporter=json --outputFile.json=build/test-report.json; \
	  status=$$?; node scripts/test-summary.mjs build/test-report.json || status=1; \
	  node bin/ferry.js testbed cleanup >/dev/null; exit $$status

test-unit: build
	@$(NPX) vitest run --project unit

test-bpf: build
	@$(NPX) vitest run --project bpf

test-e2e: build
	@$(NPX) vitest run --project e2e

## demo: the Service ladder in a 3-node sandbox cluster (leaves it up to explore)
demo: build
	@bash scripts/demo.sh

## bench: the benchmarks with quick settings (results in bench/results/); see bench/README.md
bench: build
	@$(NPX) tsx bench/connect-latency.ts --services 10000 --count 1000 --repeat 3
	@$(NPX) tsx bench/agent-sync.ts --services 1000,10000 --changes 50
	@$(NPX) tsx bench/forwarding.ts --seconds 4 --count 1000 --repeat 3
	@$(NPX) tsx bench/packet-cost.ts --services 60000 --repeat 20000
	@$(NPX) tsx bench/rules-scaling.ts --services 1,1000,10000 --count 1000 --repeat 3

## cleanup: remove testbeds and sandboxes left by crashed runs
cleanup: build-ts
	@node bin/ferry.js testbed cleanup

clean:
	rm -rf dist build .cache
