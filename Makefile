# ferry: make setup | build | test | demo | bench | bench-full | clean
SHELL := /bin/bash
NPX := npx --no-install


.PHONY: all setup build build-ts build-bpf image typecheck test test-unit test-bpf test-e2e demo bench bench-full reliability cleanup clean

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

## image: the OCI image from Debian packages (build/image/ferry.tar; cached, see the script)
image: build
	@bash scripts/build-image.sh

## typecheck: the tests and benchmarks too, not only src/
typecheck: setup
	@$(NPX) tsc -p tsconfig.test.json

## test: every test (unit, bpf, e2e); bpf and e2e need root
test: build typecheck image
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

## bench: the benchmarks with quick settings, < 10 min (bench/results/quick/); see bench/README.md
BENCH_REPORTS := forwarding rules-scaling connect-gap connect-trace pps pps-node agent-sync packet-cost packet-stages call-cost snat-capacity ipam l2 bgp
bench: build
	@rm -rf bench/results/quick
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/forwarding.ts --seconds 3 --rr-seconds 1 --repeat 3
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/rules-scaling.ts --services 1,1000,10000,30000 --count 500 --repeat 3 --nft-max 10000
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/connect-gap.ts --count 1000 --repeat 3
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/connect-trace.ts --count 200 --repeat 2
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/pps.ts --services 1,10000 --seconds 2 --repeat 2
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/pps-node.ts --services 1,10000 --frames 300000 --rounds 3
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/agent-sync.ts --services 1000,10000 --changes 50
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/packet-cost.ts --services 100000 --runs 500
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/packet-stages.ts --runs 500
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/call-cost.ts --rounds 3
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/snat-capacity.ts --seconds 15 --concurrency 16
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/ipam.ts --services 1000,10000 --repeat 1
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/l2.ts --addresses 10,1000 --seconds 10 --repeat 3
	@FERRY_BENCH_RESULTS=bench/results/quick $(NPX) tsx bench/bgp.ts --repeat 3 --connections 30
	@cat $(BENCH_REPORTS:%=bench/results/quick/%.md) > bench/results/quick/README.md

## bench-full: the full run committed under bench/results/full/ (about 35 min)
## reliability: the reliability suite (about 45 min): agent restarts, a rolling upgrade across a
## map-layout change, a 5-minute API outage, full maps, a 30-minute soak, all under load; 1M
## packets of the differential test; generated malformed input. Results in bench/results/reliability/
reliability: build
	@FERRY_BENCH_RESULTS=bench/results/reliability $(NPX) tsx bench/reliability.ts --restarts 20 --crashes 5 --outage 300 --soak 1800
	@CI=true FERRY_DIFF_PACKETS=1000000 FERRY_DIFF_SEED=20261201 $(NPX) vitest run test/bpf/differential.test.ts test/unit/malformed.test.ts --reporter=default --reporter=json --outputFile.json=bench/results/reliability/differential-and-malformed.json

bench-full: build
	@rm -rf bench/results/full
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/forwarding.ts --seconds 8 --rr-seconds 3 --repeat 5
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/rules-scaling.ts --services 1,1000,10000,30000,100000 --count 1000 --repeat 5 --nft-max 30000
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/connect-gap.ts --count 2000 --repeat 5
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/connect-trace.ts --count 300 --repeat 3
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/pps.ts --services 1,10000 --seconds 5 --repeat 3
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/pps-node.ts --services 1,10000 --frames 1000000 --rounds 7
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/agent-sync.ts --services 1000,10000,50000,100000 --changes 100
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/packet-cost.ts --services 100000 --runs 2000
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/packet-stages.ts --runs 2000
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/call-cost.ts --rounds 7
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/snat-capacity.ts --seconds 30 --concurrency 16
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/ipam.ts --services 1000,10000,30000 --repeat 3
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/l2.ts --addresses 10,1000 --seconds 20 --repeat 5
	@FERRY_BENCH_RESULTS=bench/results/full $(NPX) tsx bench/bgp.ts --repeat 5 --connections 60
	@cat $(BENCH_REPORTS:%=bench/results/full/%.md) > bench/results/full/README.md

## cleanup: remove testbeds and sandboxes left by crashed runs
cleanup: build-ts
	@node bin/ferry.js testbed cleanup

clean:
	rm -rf dist build .cache
