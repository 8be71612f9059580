// Package projectcrds holds what project-local CustomResourceDefinitions are
// built on (docs/project-crds.md): the admission plugin that keeps a
// project's CRDs to what a project may define, the naming rules, the index of
// every project's CRDs, the serving of their instances and their discovery.
// CRDs of one schema class, in any number of projects, are served by one
// upstream handler: one storage per version.
package projectcrds

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

// Class names a schema class: CRDs of one class, in any number of projects,
// are served identically, so one handler and one tenant-keyed storage per
// version serve all of them.
type Class string

// classPrefix starts every Class, so a class is never mistaken for another
// hash in logs or keys.
const classPrefix = "crdclass-"

// servingParts is what decides how a CRD's instances are served: its whole
// spec (group, names, scope, versions with schemas, subresources, printer
// columns and selectable fields, conversion) and the names it was accepted
// under, which upstream serves by. Metadata, conditions and stored versions
// are left out: they say where a CRD is, not how it serves.
type servingParts struct {
	Spec          apiextensionsv1.CustomResourceDefinitionSpec  `json:"spec"`
	AcceptedNames apiextensionsv1.CustomResourceDefinitionNames `json:"acceptedNames"`
}

// ClassOf returns crd's schema class: a hash of the canonical JSON of its
// serving parts. Canonical: object keys sorted at every depth (schemas'
// defaults and examples are raw JSON, whose key order a client chooses) and
// versions sorted by name (their order in the list changes nothing: the
// preferred version is decided by version priority). Everything else keeps
// its order, because it shows (printer columns) or may (validation rules'
// messages); two CRDs that differ only there are served by two classes,
// which costs memory, never correctness.
func ClassOf(crd *apiextensionsv1.CustomResourceDefinition) (Class, error) {
	parts := servingParts{Spec: *crd.Spec.DeepCopy(), AcceptedNames: crd.Status.AcceptedNames}
	slices.SortFunc(parts.Spec.Versions, func(a, b apiextensionsv1.CustomResourceDefinitionVersion) int {
		return strings.Compare(a.Name, b.Name)
	})
	canonical, err := canonicalJSON(parts)
	if err != nil {
		return "", fmt.Errorf("the schema class of %s: %w", crd.Name, err)
	}
	sum := sha256.Sum256(canonical)
	return Class(classPrefix + hex.EncodeToString(sum[:16])), nil
}

// canonicalJSON encodes v with every object's keys sorted: decoded into
// generic maps (numbers kept as written) and encoded again, which sorts map
// keys.
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic)
}
