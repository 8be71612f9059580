#!/usr/bin/env bash
# Generates the protobuf encoding of the typed groups' Go types with
# go-to-protobuf, as Kubernetes generates its own: generated.proto and
# generated.pb.go beside each package's types, and the protobuf tag of each
# field written into its types. It needs protoc (Debian: protobuf-compiler);
# without it, it says so and changes nothing. The round-trip test of the
# types (pkg/apis/roundtrip_test.go) checks the committed code against them
# whether or not protoc is here.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1,go.miloapis.com/milo/pkg/apis/quota/v1alpha1
CODE_GENERATOR_VERSION=v0.36.3
GOIMPORTS_VERSION=v0.41.0

if ! command -v protoc >/dev/null; then
	echo "generate-protobuf: protoc not found: the protobuf code is NOT regenerated (install protobuf-compiler);" >&2
	echo "generate-protobuf: the typed groups' round-trip tests still check the committed code against the types." >&2
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Tools, at fixed versions. protoc finds protoc-gen-gogo on PATH.
GOBIN="$work/bin" go install "k8s.io/code-generator/cmd/go-to-protobuf@$CODE_GENERATOR_VERSION" \
	"k8s.io/code-generator/cmd/go-to-protobuf/protoc-gen-gogo@$CODE_GENERATOR_VERSION"
GOBIN="$work/bin" go install "golang.org/x/tools/cmd/goimports@$GOIMPORTS_VERSION"

# go-to-protobuf and protoc read .proto files by import path under one tree:
# this module, and the modules whose .proto files ours import.
go mod download k8s.io/apimachinery github.com/gogo/protobuf
src="$work/src"
mkdir -p "$src/go.miloapis.com" "$src/k8s.io" "$src/github.com/gogo"
ln -s "$PWD" "$src/go.miloapis.com/milo"
ln -s "$(go list -m -f '{{.Dir}}' k8s.io/apimachinery)" "$src/k8s.io/apimachinery"
ln -s "$(go list -m -f '{{.Dir}}' github.com/gogo/protobuf)" "$src/github.com/gogo/protobuf"

# protoc's own well-known types (descriptor.proto, which gogo.proto imports).
include=$(dirname "$(dirname "$(command -v protoc)")")/include

# apimachinery's packages are read, never written ('-').
PATH="$work/bin:$PATH" go-to-protobuf \
	--go-header-file /dev/null \
	--output-dir "$src" \
	--proto-import "$include" \
	--apimachinery-packages=-k8s.io/apimachinery/pkg/util/intstr,-k8s.io/apimachinery/pkg/api/resource,-k8s.io/apimachinery/pkg/runtime/schema,-k8s.io/apimachinery/pkg/runtime,-k8s.io/apimachinery/pkg/apis/meta/v1 \
	--packages="$PACKAGES"
