package tenancy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProjectAPIs describes the API groups a project defines for itself (its
// own CRDs), which its discovery lists beside what the platform serves it.
type ProjectAPIs interface {
	// Groups returns the project's own groups, as aggregated discovery
	// describes them, versions in order of preference; none for a project
	// that defines none.
	Groups(projectID string) []apidiscoveryv2.APIGroupDiscovery
	// OpenAPIV3 returns the OpenAPI v3 document of one of the project's own
	// group versions; false if it has none there.
	OpenAPIV3(projectID, group, version string) ([]byte, bool)
	// OpenAPIV3Hash names that document's content, for the index.
	OpenAPIV3Hash(projectID, group, version string) string
	// OpenAPIV2 returns the paths, definitions and parameters (each entry
	// as JSON) the project's own CRDs add to its OpenAPI v2 document; false
	// if it has none.
	OpenAPIV2(projectID string) (paths, definitions, parameters map[string]json.RawMessage, ok bool)
}

// ownGroups is what a project's discovery adds to the platform's documents.
type ownGroups struct {
	groups    []apidiscoveryv2.APIGroupDiscovery
	apis      ProjectAPIs
	projectID string
}

func (o ownGroups) group(name string) *apidiscoveryv2.APIGroupDiscovery {
	for i := range o.groups {
		if o.groups[i].Name == name {
			return &o.groups[i]
		}
	}
	return nil
}

// addTo adds the project's groups to a discovery document of /apis (legacy
// or aggregated), already filtered.
func (o ownGroups) addTo(doc map[string]json.RawMessage) bool {
	var kind string
	json.Unmarshal(doc["kind"], &kind) //nolint:errcheck
	var field string
	var add []any
	switch kind {
	case "APIGroupList":
		field = "groups"
		for _, g := range o.groups {
			add = append(add, legacyGroup(g))
		}
	case "APIGroupDiscoveryList":
		field = "items"
		for _, g := range o.groups {
			add = append(add, g)
		}
	default:
		return false
	}
	var items []json.RawMessage
	if err := json.Unmarshal(doc[field], &items); err != nil {
		return false
	}
	for _, a := range add {
		raw, err := json.Marshal(a)
		if err != nil {
			return false
		}
		items = append(items, raw)
	}
	raw, err := json.Marshal(items)
	if err != nil {
		return false
	}
	doc[field] = raw
	return true
}

func legacyGroup(g apidiscoveryv2.APIGroupDiscovery) metav1.APIGroup {
	out := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: g.Name}
	for _, v := range g.Versions {
		out.Versions = append(out.Versions, metav1.GroupVersionForDiscovery{GroupVersion: g.Name + "/" + v.Version, Version: v.Version})
	}
	if len(out.Versions) > 0 {
		out.PreferredVersion = out.Versions[0]
	}
	return out
}

// document returns the project's own document at path — /apis/{group} or
// /apis/{group}/{version} of one of its groups — or nil.
func (o ownGroups) document(path string) any {
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		return nil
	}
	name, version, _ := strings.Cut(strings.Trim(rest, "/"), "/")
	g := o.group(name)
	if g == nil || strings.Contains(version, "/") {
		return nil
	}
	if version == "" {
		return legacyGroup(*g)
	}
	for _, v := range g.Versions {
		if v.Version != version {
			continue
		}
		list := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: name + "/" + version,
			APIResources: []metav1.APIResource{}}
		for _, r := range v.Resources {
			kind := ""
			if r.ResponseKind != nil {
				kind = r.ResponseKind.Kind
			}
			list.APIResources = append(list.APIResources, metav1.APIResource{Name: r.Resource, SingularName: r.SingularResource,
				Namespaced: r.Scope == apidiscoveryv2.ScopeNamespace, Kind: kind, Verbs: r.Verbs, ShortNames: r.ShortNames, Categories: r.Categories})
			for _, s := range r.Subresources {
				sub := metav1.APIResource{Name: r.Resource + "/" + s.Subresource, Namespaced: r.Scope == apidiscoveryv2.ScopeNamespace, Verbs: s.Verbs}
				if s.ResponseKind != nil {
					sub.Group, sub.Version, sub.Kind = s.ResponseKind.Group, s.ResponseKind.Version, s.ResponseKind.Kind
				}
				list.APIResources = append(list.APIResources, sub)
			}
		}
		return list
	}
	return nil
}

// serveOwnDocument answers a discovery request for one of the project's own
// groups; false when path is none of them.
func (o ownGroups) serveOwnDocument(w http.ResponseWriter, path string) bool {
	var body []byte
	if rest, ok := strings.CutPrefix(path, "/openapi/v3/apis/"); ok {
		name, version, _ := strings.Cut(rest, "/")
		if o.group(name) == nil || o.apis == nil {
			return false
		}
		doc, ok := o.apis.OpenAPIV3(o.projectID, name, version)
		if !ok {
			return false
		}
		body = doc
	} else {
		doc := o.document(path)
		if doc == nil {
			return false
		}
		var err error
		if body, err = json.Marshal(doc); err != nil {
			return false
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body) //nolint:errcheck // the client went away
	return true
}

// addToOpenAPIIndex names the project's own group versions in the OpenAPI
// v3 index (already filtered), as the apiserver names its own.
func (o ownGroups) addToOpenAPIIndex(doc map[string]json.RawMessage) bool {
	if o.apis == nil {
		return false
	}
	var paths map[string]json.RawMessage
	if err := json.Unmarshal(doc["paths"], &paths); err != nil {
		return false
	}
	for _, g := range o.groups {
		for _, v := range g.Versions {
			u := url.URL{Path: "/openapi/v3/apis/" + g.Name + "/" + v.Version,
				RawQuery: url.Values{"hash": {o.apis.OpenAPIV3Hash(o.projectID, g.Name, v.Version)}}.Encode()}
			entry, err := json.Marshal(map[string]string{"serverRelativeURL": u.String()})
			if err != nil {
				return false
			}
			paths["apis/"+g.Name+"/"+v.Version] = entry
		}
	}
	raw, err := json.Marshal(paths)
	if err != nil {
		return false
	}
	doc["paths"] = raw
	return true
}

// addToOpenAPIV2 adds the project's own kinds to its OpenAPI v2 document
// (already filtered). What the document has already stays as it is: the
// definitions every CRD shares are the platform's, and a project's groups
// never overlap the platform's (their names are refused).
func (o ownGroups) addToOpenAPIV2(doc map[string]json.RawMessage) bool {
	if o.apis == nil || doc["swagger"] == nil {
		return false
	}
	paths, definitions, parameters, ok := o.apis.OpenAPIV2(o.projectID)
	if !ok {
		return false
	}
	for field, add := range map[string]map[string]json.RawMessage{"paths": paths, "definitions": definitions, "parameters": parameters} {
		if len(add) == 0 {
			continue
		}
		entries := map[string]json.RawMessage{}
		if doc[field] != nil {
			if err := json.Unmarshal(doc[field], &entries); err != nil {
				return false
			}
		}
		for k, v := range add {
			if _, ok := entries[k]; !ok {
				entries[k] = v
			}
		}
		raw, err := json.Marshal(entries)
		if err != nil {
			return false
		}
		doc[field] = raw
	}
	return true
}
