package projectcrds

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/controller/openapi/builder"
	"k8s.io/kube-openapi/pkg/spec3"
)

// servedAt returns the project's CRDs of group that serve version, whose
// names are accepted, by name.
func (s *Index) servedAt(projectID, group, version string) []*apiextensionsv1.CustomResourceDefinition {
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, crd := range s.ofProject(projectID) {
		if crd.Spec.Group != group || !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
			continue
		}
		if slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version && v.Served }) {
			out = append(out, crd)
		}
	}
	slices.SortFunc(out, func(a, b *apiextensionsv1.CustomResourceDefinition) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// OpenAPIV3Hash names the OpenAPI v3 document of one of a project's own
// group versions: a hash of the classes of the CRDs it is made of, so that a
// client's cached document is reused exactly as long as it is current.
func (s *Index) OpenAPIV3Hash(projectID, group, version string) string {
	return classesHash(s.servedAt(projectID, group, version))
}

// classesHash hashes the classes of crds, in their order.
func classesHash(crds []*apiextensionsv1.CustomResourceDefinition) string {
	h := sha256.New()
	for _, crd := range crds {
		h.Write([]byte(crd.Annotations[classAnnotation] + "\n"))
	}
	return strings.ToUpper(hex.EncodeToString(h.Sum(nil)))
}

// v2Parts is what a set of CRDs adds to an OpenAPI v2 document.
type v2Parts struct {
	paths, definitions, parameters map[string]json.RawMessage
}

// size is about how many bytes p holds.
func (p *v2Parts) size() int {
	n := 0
	for _, m := range []map[string]json.RawMessage{p.paths, p.definitions, p.parameters} {
		for k, v := range m {
			n += len(k) + len(v)
		}
	}
	return n
}

// OpenAPIV3 returns the OpenAPI v3 document of one of a project's own group
// versions (what `kubectl explain` reads), built with upstream's builder
// from the project's CRDs the first time their classes are asked for; false
// if the project serves none there.
func (s *Index) OpenAPIV3(projectID, group, version string) ([]byte, bool) {
	crds := s.servedAt(projectID, group, version)
	if len(crds) == 0 {
		return nil, false
	}
	key := "v3/" + group + "/" + version + "/" + classesHash(crds)
	if doc, ok := documents.get(key); ok {
		return doc.([]byte), true
	}
	specs := make([]*spec3.OpenAPI, 0, len(crds))
	for _, crd := range crds {
		doc, err := builder.BuildOpenAPIV3(crd, version, builder.Options{IncludeSelectableFields: true})
		if err != nil {
			continue // as upstream: a CRD whose schema cannot be published is left out
		}
		specs = append(specs, doc)
	}
	merged, err := builder.MergeSpecsV3(specs...)
	if err != nil {
		return nil, false
	}
	out, err := json.Marshal(merged)
	if err != nil {
		return nil, false
	}
	documents.add(key, out, len(out))
	return out, true
}

// OpenAPIV2 returns what the project's own CRDs add to its OpenAPI v2
// document (/openapi/v2: clients older than OpenAPI v3, `kubectl explain
// --output=plaintext-openapiv2`): paths, definitions and parameters, each
// entry as JSON, built with upstream's builder from every served version of
// the project's CRDs whose names are accepted, the first time their classes
// are asked for; false if there are none. Definitions every CRD shares
// (ObjectMeta and the like) are in it too: the document they are added to
// keeps its own. The maps are shared: callers only read them.
func (s *Index) OpenAPIV2(projectID string) (paths, definitions, parameters map[string]json.RawMessage, ok bool) {
	objs := s.ofProject(projectID)
	crds := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(objs))
	for _, crd := range objs {
		if apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
			crds = append(crds, crd)
		}
	}
	slices.SortFunc(crds, func(a, b *apiextensionsv1.CustomResourceDefinition) int { return strings.Compare(a.Name, b.Name) })
	key := "v2/" + classesHash(crds)
	if parts, ok := documents.get(key); ok {
		p := parts.(*v2Parts)
		return p.paths, p.definitions, p.parameters, len(p.paths) > 0
	}
	p := &v2Parts{paths: map[string]json.RawMessage{}, definitions: map[string]json.RawMessage{}, parameters: map[string]json.RawMessage{}}
	for _, crd := range crds {
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			doc, err := builder.BuildOpenAPIV2(crd, v.Name, builder.Options{V2: true, IncludeSelectableFields: true})
			if err != nil {
				continue // as upstream: a CRD whose schema cannot be published is left out
			}
			if doc.Paths != nil {
				addJSON(p.paths, doc.Paths.Paths)
			}
			addJSON(p.definitions, doc.Definitions)
			addJSON(p.parameters, doc.Parameters)
		}
	}
	documents.add(key, p, p.size())
	return p.paths, p.definitions, p.parameters, len(p.paths) > 0
}

// addJSON adds each entry of from, encoded, to to.
func addJSON[T any](to map[string]json.RawMessage, from map[string]T) {
	for k, v := range from {
		if raw, err := json.Marshal(v); err == nil {
			to[k] = raw
		}
	}
}
