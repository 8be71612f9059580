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
	for _, o := range s.ofProject(projectID) {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || crd.Spec.Group != group || !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
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
	h := sha256.New()
	for _, crd := range s.servedAt(projectID, group, version) {
		h.Write([]byte(crd.Annotations[classAnnotation] + "\n"))
	}
	return strings.ToUpper(hex.EncodeToString(h.Sum(nil)))
}

// OpenAPIV3 returns the OpenAPI v3 document of one of a project's own group
// versions (what `kubectl explain` reads), built on request with upstream's
// builder from the project's CRDs; false if the project serves none there.
func (s *Index) OpenAPIV3(projectID, group, version string) ([]byte, bool) {
	crds := s.servedAt(projectID, group, version)
	if len(crds) == 0 {
		return nil, false
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
	return out, err == nil
}
