# kfsm's developer tasks. The README names the two that matter to users:
# "make demo" and "make test".

GO  ?= go
BIN := $(CURDIR)/bin

# Generated files, checked by verify-generated.
GENERATED := fsm internal/testapi cluster/internal/k8smod examples

# The library is the root module; the CloudEvents sink, the command and the
# examples are modules of their own (go.work joins them), so that a user
# who imports the library gets none of their dependencies. Every target
# covers all four.
PACKAGES := ./... ./cesink/... ./cmd/... ./examples/...
# TESTPKGS are those of the packages that have tests: go test writes their
# binaries into one directory (TESTFLAGS), which it refuses for packages
# of one name, such as the examples' v1alpha1, even when they have none.
TESTPKGS = $(shell $(GO) list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' $(PACKAGES))

# Every build is -trimpath: without it the go command keys a package's
# compiled form by its directory too, so a second clone of the repository
# (CI's, a worktree) compiles everything again instead of reusing the build
# cache; nothing here reads a source path from a binary.
export GOFLAGS += -trimpath

# The test binaries are linked without DWARF: nothing reads it there (a
# panic's or a race's stack comes from the runtime's own tables), and
# linking each of the fifty race-enabled binaries takes a quarter less
# CPU without it. They are kept in bin/test: the go command links a test
# binary again only when its package or a dependency changed (the build
# cache keeps compiled packages, not linked tests), so a second make test,
# or make check, make explore and make fleet-test after it, links none of
# the unchanged ones, which is most of the CPU that linking costs.
TESTBIN := $(BIN)/test
TESTFLAGS := -race -count=1 -ldflags=-w -o $(TESTBIN)/

.PHONY: check test explore seeded-bugs fleet-test demo bench generate verify-generated lint assets screenshot scaffold-test release release-test

## check: the tests that need no API server, Kubernetes binaries, browser or built project (go test -short:
## the graph, the engine's mechanisms, the analyzers, the renderers, the dashboard's
## layout), with the race detector; cluster's example starts an API server
check:
	$(GO) test -short $(TESTFLAGS) -skip '^ExampleStart$$' $(TESTPKGS)

## test: run every test, with the race detector, against a real API server
## (four packages at a time, and four parallel tests in each: they mostly
## wait on their API servers, so on two cores more finish sooner than go
## test's default of two; at three, a quarter of the two cores stayed
## idle), and the tests of make release's checks
test: assets
	$(GO) test $(TESTFLAGS) -timeout 30m -p 4 -parallel 4 $(TESTPKGS)
	GOWORK=off $(GO) -C tools/release test $(TESTFLAGS) -run '^TestRelease' .

## explore: the four examples' main scenarios under every combination of two faults
## (fsmtest.Explore at depth 2; make test runs depth 1), two examples at a time, the web
## app, the costliest, first and the three others beside it (alone, each search leaves
## the cores idle while its clean run and its last runs of depth 1 end), each within
## EXPLORE_BUDGET (the web app needs seven to nine minutes on two cores beside the others;
## a budget that runs out cuts schedules and still passes, so it keeps a wide margin),
## EXPLORE_PARALLEL runs at a time (a run mostly waits for its operator to be quiet: twice
## Explore's default keeps two cores busier); the report of each says what it ran and
## what it cut
EXPLORE_BUDGET ?= 20m
EXPLORE_PARALLEL ?= 24
explore: assets
	$(GO) -C examples test $(TESTFLAGS) -p 2 -timeout 40m -v -run 'Survives?Faults$$' \
		./webapp ./moose ./database ./autoupdate -kfsm.depth=2 -kfsm.budget=$(EXPLORE_BUDGET) -kfsm.parallel=$(EXPLORE_PARALLEL)

## seeded-bugs: the seeded bugs of examples/internal/seeded/bugs, each applied to its example:
## Explore, two faults at a time, catches it with a counterexample of at most two faults
## that its replay command fails again, and Faults (Explore at depth 1) catches it or misses it
## as the patch says, which the counterexample's size tells (the example's tests are built once
## per bug, with the race detector, and that binary runs them all). Eight bugs are checked at
## once: a check spends much of its time in runs one after another (the clean run, the
## replay, a failing run waiting for the operator to rest), and four at a time left half
## of two cores idle
seeded-bugs: assets
	$(GO) -C examples test -tags seeded -count=1 -parallel 8 -timeout 90m -v -run '^TestExploreCatchesEverySeededBug$$' ./internal/seeded

## fleet-test: the tests at the size of a fleet, too slow for make test: 1,000 objects in
## every state of version 1 of a graph, migrated to version 2 under a manager; three
## replicas sharing 1,000 objects, one killed and one joining (make test: 300); and the
## dashboard in a browser on a 50-state machine with 10,000 objects
fleet-test: assets
	$(GO) test $(TESTFLAGS) -run '^TestUnderManagerANewGraphVersionMigratesObjectsInFlight$$' ./fsm -versions.objects=1000
	$(GO) test $(TESTFLAGS) -run '^TestThreeReplicasShareTheirGadgets$$' ./test/scaleout -scaleout.gadgets=1000
	$(GO) test $(TESTFLAGS) -run '^TestTheDashboardAtAFleetsSize$$' ./cmd/internal/dashboard -dashboard.objects=10000

## scaffold-test: build kfsm, have it init a project into a temporary directory with this
## checkout as its kfsm and add a second kind with create api, then run the project's
## make verify, make vet and make test, and install it on an embedded Kubernetes with kwok's nodes
## as its dist/install.yaml ships it (TestInstall, behind the e2e build tag)
scaffold-test: assets
	@dir=$$(mktemp -d "$${TMPDIR:-/tmp}/kfsm-scaffold.XXXXXX") && trap 'rm -rf "$$dir"' EXIT && \
	$(GO) build -o "$$dir/kfsm" ./cmd/kfsm && \
	"$$dir/kfsm" init "$$dir/widget" --module example.com/widget --kind Widget --group example.com --kfsm-path "$(CURDIR)" && \
	(cd "$$dir/widget" && GOWORK=off "$$dir/kfsm" create api --kind Gadget) && \
	GOWORK=off $(MAKE) -C "$$dir/widget" verify && \
	GOWORK=off $(MAKE) -C "$$dir/widget" vet && \
	GOWORK=off $(MAKE) -C "$$dir/widget" test && \
	$(GO) test -tags e2e -count=1 -timeout 20m -v -run '^TestInstall$$' ./cmd/internal/scaffold -args -project="$$dir/widget"

## release: check the tree and tag kfsm's modules at VERSION, here, pushing nothing
## (make release VERSION=v0.2.0; CONTRIBUTING.md says what it checks). It runs make test
## first, unless TESTED names this commit as one that passed it in the same run. Then
## it builds kubectl-fsm's archives for each platform into dist/, with their SHA256SUMS
## and krew's manifest, fsm.yaml, whose URLs are under DOWNLOAD_URL ({version} for the
## version; the GitHub release's by default)
release:
	GOWORK=off $(GO) -C tools/release run . -repo "$(CURDIR)" -version "$(VERSION)" -tested "$(TESTED)" $(if $(DOWNLOAD_URL),-download-url "$(DOWNLOAD_URL)")

## release-test: make release in a clone of this commit, and install and use the release as a
## user does, with an empty module cache, the go command fetching kfsm's modules at the
## clone's tags by its own rule, as the public module proxy fetches them at GitHub's (the
## build cache and the Kubernetes binaries are the machine's); check its krew manifest
## with krew's validator, and install kubectl-fsm from it and each platform's archive with
## krew (both built from the Go module proxy into the user cache on first use)
release-test:
	GOWORK=off $(GO) -C tools/release test -race -count=1 -timeout 50m -v .

## demo: run the demo (the example operators on an embedded Kubernetes) until Ctrl-C
demo:
	$(GO) run ./cmd/kfsm demo --workloads

## bench: kfsm against a hand-written controller on one embedded API server;
## BENCH="-n 1000,10000 -workers 1,8 -rounds 3" chooses what to measure
BENCH ?= -n 1000 -workers 1,8 -rounds 3
bench:
	$(GO) run ./tools/bench $(BENCH)

## screenshot: take docs/dashboard.png, the README's picture of the demo's dashboard,
## in the browser test of the demo (headless Chromium, fetched on first use), and
## docs/dashboard-fleet.png and docs/dashboard-fleet-dark.png, a 50-state machine with
## 10,000 objects at 1,440 x 900, in light and dark mode
screenshot:
	$(GO) test -count=1 -run '^TestDemoServesItsDashboard$$/^InABrowser$$' ./cmd/kfsm -screenshot $(CURDIR)/docs/dashboard.png
	$(GO) test -count=1 -run '^TestTheDashboardAtAFleetsSize$$' ./cmd/internal/dashboard -dashboard.objects=10000 -dashboard.screenshots=$(CURDIR)/docs

## assets: build the Kubernetes binaries once; later runs reuse the cache (the
## command compiles in seconds, so the build's progress shows at once)
assets:
	$(GO) run ./cluster/assets -workloads >/dev/null

## generate: regenerate deepcopy code, CRDs (the examples' with their machines' graphs), the examples' roles,
## protobuf code (buf with protoc-gen-go and protoc-gen-go-grpc, all built from the module proxy) and the
## embedded Kubernetes module
generate: $(BIN)/controller-gen $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc
	$(BIN)/controller-gen object paths=./fsm/ paths=./internal/testapi/... paths=./examples/...
	$(BIN)/controller-gen crd paths=./internal/testapi/... output:crd:artifacts:config=internal/testapi/crd
	$(BIN)/controller-gen crd paths=./examples/moose/... output:crd:artifacts:config=examples/moose/crd
	$(BIN)/controller-gen rbac:roleName=moose-operator paths=./examples/moose/... output:rbac:artifacts:config=examples/moose/rbac
	$(BIN)/controller-gen crd paths=./examples/webapp/... output:crd:artifacts:config=examples/webapp/crd
	$(BIN)/controller-gen rbac:roleName=webapp-operator paths=./examples/webapp/... output:rbac:artifacts:config=examples/webapp/rbac
	$(BIN)/controller-gen crd paths=./examples/autoupdate/... output:crd:artifacts:config=examples/autoupdate/crd
	$(BIN)/controller-gen rbac:roleName=autoupdate-operator paths=./examples/autoupdate/... output:rbac:artifacts:config=examples/autoupdate/rbac
	$(BIN)/controller-gen crd paths=./examples/database/... output:crd:artifacts:config=examples/database/crd
	$(BIN)/controller-gen rbac:roleName=database-operator paths=./examples/database/... output:rbac:artifacts:config=examples/database/rbac
	$(GO) run ./examples/internal/graphs examples
	$(BIN)/buf generate --template tools/proto/buf.gen.yaml
	cp tools/k8s/go.mod cluster/internal/k8smod/go.mod.txt
	cp tools/k8s/go.sum cluster/internal/k8smod/go.sum.txt
	cp tools/k8s/etcd/main.go cluster/internal/k8smod/etcd.go.txt

## verify-generated: fail when generated files differ from what generate makes
verify-generated: generate
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files are stale; run 'make generate' and commit:"; \
		git status --porcelain -- $(GENERATED); git diff -- $(GENERATED) | head -50; exit 1; \
	fi

## lint: go vet and golangci-lint, once each over every module, with the e2e and seeded
## build tags (which only add files: the scaffold's install test and the seeded-bug
## check); kube-api-linter on the status that every kfsm CRD embeds and on the examples'
## API types; kfsm vet on the examples' state machines and kfsm check, the model check, on
## their graphs
LINTTAGS := e2e,seeded
lint: $(BIN)/golangci-lint $(BIN)/kube-api-linter
	$(GO) vet -tags $(LINTTAGS) $(PACKAGES)
	GOWORK=off $(GO) -C tools/release vet ./...
	$(BIN)/golangci-lint run --build-tags $(LINTTAGS) $(PACKAGES)
	cd tools/release && GOWORK=off $(BIN)/golangci-lint run ./...
	$(BIN)/kube-api-linter run --config tools/kal/golangci.yml ./fsm/ ./examples/.../v1alpha1
	$(GO) run ./cmd/kfsm vet ./examples/...
	$(GO) run ./cmd/kfsm check ./examples/...

# Tools are pinned in their own modules under tools/ (their dependencies do
# not mix) and built from the module proxy.
$(BIN)/controller-gen: tools/gen/go.mod tools/gen/go.sum
	GOWORK=off $(GO) -C tools/gen build -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/buf: tools/proto/go.mod tools/proto/go.sum
	GOWORK=off $(GO) -C tools/proto build -o $@ github.com/bufbuild/buf/cmd/buf

$(BIN)/protoc-gen-go: tools/proto/go.mod tools/proto/go.sum
	GOWORK=off $(GO) -C tools/proto build -o $@ google.golang.org/protobuf/cmd/protoc-gen-go

$(BIN)/protoc-gen-go-grpc: tools/proto/go.mod tools/proto/go.sum
	GOWORK=off $(GO) -C tools/proto build -o $@ google.golang.org/grpc/cmd/protoc-gen-go-grpc

$(BIN)/kube-api-linter: tools/kal/go.mod tools/kal/go.sum
	GOWORK=off $(GO) -C tools/kal build -o $@ sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter

$(BIN)/golangci-lint: tools/lint/go.mod tools/lint/go.sum
	GOWORK=off $(GO) -C tools/lint build -o $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint
