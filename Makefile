# Milo's build, test and code-generation targets.
CONTROLLER_GEN ?= go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.21.0
OPENAPI_GEN ?= go run k8s.io/kube-openapi/cmd/openapi-gen@v0.0.0-20260317180543-43fb72c5454a
# -count=1: the e2e tests build and run the milo binary, which the test cache cannot see.
GO_TEST_FLAGS ?= -count=1

.PHONY: all build run test test-sql test-postgres test-mysql generate verify-generated vet fmt-check fuzz bench-dispatch bench-provider bench-iam bench-top bench-scale bench-scale-smoke clean

all: build

# VERSION is Milo's version, stamped into the binary: the nearest v* tag, or
# v0.0.0-<commit> without one. `go run` builds say v0.0.0-dev.
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo v0.0.0-$$(git rev-parse --short HEAD 2>/dev/null || echo dev))
LDFLAGS := -X go.miloapis.com/milo/pkg/version.Version=$(VERSION)

build:
	go build -ldflags "$(LDFLAGS)" -o bin/milo ./cmd/milo

run:
	go run ./cmd/milo start

# SQL_E2E are the e2e tests run again with the shared server on each SQL
# backend, PostgreSQL and MySQL (through kine): isolation, lifecycle, IAM and
# quotas.
SQL_E2E ?= TestProjectsAreIsolated|TestWatchSeesOnlyTheOwnProject|TestTenantAwareNamespaceAdmission|TestTenantAnnotationCannotBeForged|TestUnknownProjectIsNotFoundAndWritesNothing|TestAllProjectsViewListsAndWatchesOnly|TestCustomResourcesAreIsolated|TestResourceQuotaLimitsOnlyItsProject|TestProjectRBACAppliesOnlyInItsProject|TestProjectExistenceIsNotRevealedWithoutAccess|TestProjectDeletionEmptiesItAndReleasesTheName|TestOrganizationDeletionCascadesWithKubectl|TestFolderDeletionCascadesToItsSubtreeOnly|TestIAMStory|TestBindingsDoNotCrossOrganizations|TestIAMGrantMatrix|TestNamespaceDeletionEmptiesTheNamespace|TestGarbageCollectionInAProject|TestOrganizationContextShowsOnlyItsOwnObjects|TestServiceAccountTokensWorkOnlyInTheirProject|TestProjectCRDsAreTheProjectsOwn|TestProviderQuotas|TestStoredObjectsAndBytesPerProject

## test: everything CI runs: generated files fresh, gofmt, go vet, then all
## tests, then the e2e tests of SQL_E2E again on PostgreSQL and on MySQL.
test: verify-generated fmt-check vet
	go test $(GO_TEST_FLAGS) -timeout 40m ./...
	$(MAKE) test-sql

## test-sql: only the e2e tests of SQL_E2E, the shared server on each SQL backend.
test-sql: test-postgres test-mysql

## test-postgres, test-mysql: the e2e tests of SQL_E2E on one SQL backend.
test-postgres test-mysql: test-%:
	MILO_E2E_STORAGE=$* go test $(GO_TEST_FLAGS) -timeout 20m ./test/e2e -run '^($(SQL_E2E))$$'

## generate: deepcopy, CRD YAML and OpenAPI of the API types, and their protobuf
## encoding (hack/generate-protobuf.sh; it needs protoc, and says so without it).
generate:
	bash hack/generate-protobuf.sh
	$(CONTROLLER_GEN) object paths=./pkg/apis/...
	$(CONTROLLER_GEN) crd paths=./pkg/apis/... output:crd:artifacts:config=pkg/apis/crds
	$(OPENAPI_GEN) --output-dir pkg/apis/resourcemanager/v1alpha1 --output-pkg go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1 \
		--output-file zz_generated.openapi.go --output-model-name-file zz_generated.model_name.go \
		--go-header-file /dev/null --report-filename /dev/null \
		--readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 ./pkg/apis/resourcemanager/v1alpha1 k8s.io/apimachinery/pkg/apis/meta/v1
	$(OPENAPI_GEN) --output-dir pkg/apis/quota/v1alpha1 --output-pkg go.miloapis.com/milo/pkg/apis/quota/v1alpha1 \
		--output-file zz_generated.openapi.go --output-model-name-file zz_generated.model_name.go \
		--go-header-file /dev/null --report-filename /dev/null \
		--readonly-pkg k8s.io/apimachinery/pkg/apis/meta/v1 ./pkg/apis/quota/v1alpha1 k8s.io/apimachinery/pkg/apis/meta/v1
	$(CONTROLLER_GEN) object paths=./examples/widgets/api/...
	$(CONTROLLER_GEN) crd paths=./examples/widgets/api/... output:crd:artifacts:config=examples/widgets/config/crd

verify-generated: generate
	@git diff --exit-code -- pkg/apis examples || { echo "generated files are stale: run 'make generate' and commit the result"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- pkg/apis examples)" || { git status --short -- pkg/apis examples; echo "generated files are not committed: run 'make generate' and commit the result"; exit 1; }

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }

vet:
	go vet ./...

## fuzz: each fuzz target for FUZZTIME (their seed corpora also run in make test).
FUZZTIME ?= 30s
fuzz:
	go test ./pkg/tenancy -run '^$$' -fuzz '^FuzzParsePath$$' -fuzztime $(FUZZTIME)
	go test ./pkg/tenancy -run '^$$' -fuzz '^FuzzImpersonableUser$$' -fuzztime $(FUZZTIME)
	go test ./pkg/storage/tenantstorage -run '^$$' -fuzz '^FuzzKeysOfTwoTenantsNeverOverlap$$' -fuzztime $(FUZZTIME)
	go test ./pkg/iam/evaluator -run '^$$' -fuzz '^FuzzParsePermission$$' -fuzztime $(FUZZTIME)

clean:
	rm -rf bin

## bench-dispatch: watch event delivery with 10 vs 10,000 watchers in other projects.
bench-dispatch:
	go test ./pkg/storage/tenantstorage -run '^$$' -bench EventDispatch -benchtime 2000x -benchmem

## bench-provider: what one watch event costs the multicluster-runtime provider with 10 vs 100,000 engaged projects, and a provider with one handler per project; and the bytes its shared cache keeps per project beyond a controller-runtime cache of the same objects.
bench-provider:
	go test ./pkg/mcprovider -run '^$$' -bench 'Dispatch|CacheBytes' -benchmem

## bench-top: what the heaviest-projects tracker costs a request, over 100,000 projects, and its fixed heap.
bench-top:
	go test ./pkg/telemetry -run '^$$' -bench TopProjects -benchmem -benchtime 1000000x

## bench-iam: Milo IAM decisions with 1,000 vs 100,000 projects (1,000,000 bindings), and during another organization's role churn.
bench-iam:
	go test ./pkg/iam/evaluator -run '^$$' -bench Authorize -benchmem

## bench-scale: the scale benchmark, Milo against a plain generic control plane, up to 100,000
## projects (about 80 minutes on 2 cores); report, plots and profiles in bench/results.
bench-scale:
	go run ./bench/scale --max 100000 --out bench/results

## bench-scale-smoke: the same harness up to 1,000 projects, in a few minutes.
bench-scale-smoke:
	go run ./bench/scale --smoke --out bench/results
