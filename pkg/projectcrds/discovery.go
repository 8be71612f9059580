package projectcrds

import (
	"slices"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
)

// verbs are what a custom resource serves, as upstream lists them.
var (
	resourceVerbs    = metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}
	subresourceVerbs = metav1.Verbs{"get", "patch", "update"}
)

// Groups returns the groups a project's own CRDs define, as aggregated
// discovery describes them (versions by upstream's version priority), from
// the project's CRDs whose names are accepted. It is computed on request
// from the index: one project's change rebuilds nothing for another.
func (s *Index) Groups(projectID string) []apidiscoveryv2.APIGroupDiscovery {
	objs := s.ofProject(projectID)
	if len(objs) == 0 {
		return nil
	}
	versions := map[string]map[string][]apidiscoveryv2.APIResourceDiscovery{}
	for _, crd := range objs {
		if !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
			continue
		}
		names := crd.Status.AcceptedNames
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			r := apidiscoveryv2.APIResourceDiscovery{Resource: names.Plural, SingularResource: names.Singular,
				ResponseKind: &metav1.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind},
				Scope:        apidiscoveryv2.ScopeCluster, Verbs: resourceVerbs, ShortNames: names.ShortNames, Categories: names.Categories}
			if crd.Spec.Scope == apiextensionsv1.NamespaceScoped {
				r.Scope = apidiscoveryv2.ScopeNamespace
			}
			if sub := v.Subresources; sub != nil {
				if sub.Status != nil {
					r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "status", Verbs: subresourceVerbs,
						ResponseKind: &metav1.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: names.Kind}})
				}
				if sub.Scale != nil {
					r.Subresources = append(r.Subresources, apidiscoveryv2.APISubresourceDiscovery{Subresource: "scale", Verbs: subresourceVerbs,
						ResponseKind: &metav1.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}})
				}
			}
			if versions[crd.Spec.Group] == nil {
				versions[crd.Spec.Group] = map[string][]apidiscoveryv2.APIResourceDiscovery{}
			}
			versions[crd.Spec.Group][v.Name] = append(versions[crd.Spec.Group][v.Name], r)
		}
	}
	groups := make([]apidiscoveryv2.APIGroupDiscovery, 0, len(versions))
	for name, byVersion := range versions {
		g := apidiscoveryv2.APIGroupDiscovery{ObjectMeta: metav1.ObjectMeta{Name: name}}
		for v, resources := range byVersion {
			slices.SortFunc(resources, func(a, b apidiscoveryv2.APIResourceDiscovery) int { return strings.Compare(a.Resource, b.Resource) })
			g.Versions = append(g.Versions, apidiscoveryv2.APIVersionDiscovery{Version: v, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent})
		}
		slices.SortFunc(g.Versions, func(a, b apidiscoveryv2.APIVersionDiscovery) int {
			return -version.CompareKubeAwareVersionStrings(a.Version, b.Version)
		})
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b apidiscoveryv2.APIGroupDiscovery) int { return strings.Compare(a.Name, b.Name) })
	return groups
}
