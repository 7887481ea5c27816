# Guardian's verbs. `just run` serves a local development profile; `just test`
# runs every suite against the local Postgres and Redis.

set shell := ["bash", "-euo", "pipefail", "-c"]

export DATABASE_URL := env_var_or_default("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/guardian?sslmode=disable")
export TEST_DATABASE_URL := env_var_or_default("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
export TEST_REDIS_URL := env_var_or_default("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

# List the recipes.
default:
    @just --list

# Serve the local development profile: creates and migrates the database,
# public development secrets, a logging connector. Never for real money.
run:
    GUARDIAN_DEV=1 go run . serve

# Send signed sample deliveries (duplicates and forgeries included) to `just run`.
demo:
    go run . demo

# The packages with concurrency of their own (the domain's batching, the
# filter's pipelines, group commit, tokens, locks, River's workers, the
# receiver kit): `just test` runs them under the race detector.
racy := "./app/fulfilment ./app/filter ./app/batch ./app/tokens ./app/lock ./jobs ./receiver"

# How many tests of one package `just test` runs at once (see test).
parallel := "4"

# Every suite: unit, storage, integration and black-box, against real Postgres
# and Redis (the packages in `racy` under the race detector), the protocol's
# model in spin, the receiver kits in other languages (`just kits`), then a
# smoke of every other verb (`just smoke`). Installs Chromium, spin and the
# kits' dependencies first when they are missing (.ci/deps). Four tests of a
# package at once, not Go's one per core: most of a test's time here is
# waiting (a kill's restart, a lease, a receiver held past its timeout), and
# at two the machine stood mostly idle through e2e (README, "Tests").
test: deps model
    go vet ./...
    go test -count=1 -timeout 10m -parallel {{parallel}} $(go list ./... | grep -v -x -F "$(go list {{racy}})")
    go test -race -count=1 -timeout 10m -parallel {{parallel}} {{racy}}
    just kits
    just smoke

# The receiver kits in other languages, each with its ecosystem's runner
# against the local Postgres, and Guardian's conformance run against each
# kit's example receiver and its broken variants (docs/receivers.md).
kits:
    go build -o "${TMPDIR:-/tmp}/guardian-kits-bin" .
    cd receiver/typescript && GUARDIAN_BIN="${TMPDIR:-/tmp}/guardian-kits-bin" node --test test/
    cd receiver/python && GUARDIAN_BIN="${TMPDIR:-/tmp}/guardian-kits-bin" /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/

# Every other verb the README names, at its shortest, on a database of its
# own: migrate, run with demo against it, lint, bench, bench-scale.
smoke:
    .ci/smoke

# Install what the suites need beyond Go, Postgres and Redis (Chromium, spin).
deps:
    .ci/deps

# Check the protocol's Promela model with spin: every rule in, no violation;
# each rule out, spin finds the hole it closes (docs/design.md, "The model").
model:
    docs/model/check.sh
    docs/model/check.sh holes

# Build the binary into ./bin.
build:
    go build -o bin/guardian .

# Apply, roll back or list migrations: just migrate up|down|status
migrate direction="status":
    go run . migrate {{direction}}

# Static checks: gofmt and go vet always; golangci-lint (.golangci.yml) when installed.
lint:
    gofmt -l . | (! grep .)
    go vet ./...
    if command -v golangci-lint >/dev/null; then golangci-lint run; else echo "golangci-lint not installed: skipped (gofmt and go vet ran)"; fi

# Fuzz the untrusted-input parsers for a while each: every provider's, the
# receiver kit's request and the connector's statements.
fuzz time="30s":
    go test ./app/provider -run '^$' -fuzz FuzzStripeVerify -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzStandardVerify -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzParseStrict -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzAdyenVerify -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzShopifyVerify -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzPayPalHeaders -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzPaddleVerify -fuzztime {{time}}
    go test ./app/provider -run '^$' -fuzz FuzzLemonSqueezyVerify -fuzztime {{time}}
    go test ./receiver -run '^$' -fuzz FuzzRead -fuzztime {{time}}
    go test ./app/connector -run '^$' -fuzz FuzzStatement -fuzztime {{time}}

# Measure Guardian against the floor (the bare SQL a payment needs, at
# Guardian's own batch sizes), pgbench, redis-benchmark and bare River on
# this machine, in one run, and print the ratios (see docs/performance.md).
bench *args:
    go run ./e2e/bench {{args}}

# What Guardian costs as its tables grow: fills a database in SQL with a
# merchant's history (10 million payments takes about half an hour and 25 GB
# here) and measures intake, dispatch, p99, duplicates and every operator's
# page at each size (docs/performance.md, "As the tables grow").
bench-scale sizes="0,1000000,10000000" *args:
    go run ./e2e/bench -only scale -sizes {{sizes}} {{args}}

# Fail Postgres over under load: a primary with a synchronous standby, then
# an asynchronous one, each crashed and the standby promoted (docs/deployment.md,
# "A Postgres that fails over"). One line per scenario.
failover:
    rm -f /tmp/guardian-failover.txt
    CHAOS_FULL=1 CHAOS_REPORT=/tmp/guardian-failover.txt go test -count=1 -timeout 20m -run 'ChaosFailover' ./e2e/
    cat /tmp/guardian-failover.txt

# The full chaos suite: more load, hundreds of kill cycles, the zombie
# dispatcher; one line per scenario (docs/reliability.md).
chaos:
    rm -f /tmp/guardian-chaos.txt
    CHAOS_FULL=1 CHAOS_REPORT=/tmp/guardian-chaos.txt go test -count=1 -timeout 30m -run Chaos ./e2e/
    cat /tmp/guardian-chaos.txt
