package tenancy

import (
	"bytes"
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
)

// filterOpenAPIDocument removes from an OpenAPI v2 document (/openapi/v2) or
// an OpenAPI v3 group-version document the operations of platform-only
// resources, and then every schema no remaining operation reaches: a project
// sees the schemas of what it can use, not of the platform's kinds (all of
// iam.miloapis.com's Roles and PolicyBindings next to the ServiceAccounts a
// project serves, for instance).
func filterOpenAPIDocument(doc map[string]json.RawMessage, v visibility) ([]byte, bool) {
	var paths map[string]json.RawMessage
	if err := json.Unmarshal(doc["paths"], &paths); err != nil {
		return nil, false
	}
	if v.org {
		// A resource is namespaced when the document has a path of it in a
		// namespace; its path across namespaces alone does not tell.
		v.namespaced = sets.New[schema.GroupResource]()
		for p := range paths {
			if group, resource, ok := pathResource(p); ok && strings.Contains(p, "/namespaces/{namespace}/") {
				v.namespaced.Insert(schema.GroupResource{Group: group, Resource: resource})
			}
		}
	}
	removed := false
	for p := range paths {
		if v.platformOnlyPath(p) {
			delete(paths, p)
			removed = true
		}
	}
	if !removed {
		return nil, false
	}
	raw, err := json.Marshal(paths)
	if err != nil {
		return nil, false
	}
	doc["paths"] = raw

	// v2 keeps schemas in definitions, v3 in components.schemas.
	refPrefix, schemas, put := "#/definitions/", doc["definitions"], func(b []byte) { doc["definitions"] = b }
	var components map[string]json.RawMessage
	if doc["openapi"] != nil {
		if doc["components"] == nil {
			out, err := json.Marshal(doc) // no schemas to prune
			return out, err == nil
		}
		if err := json.Unmarshal(doc["components"], &components); err != nil {
			return nil, false
		}
		refPrefix, schemas = "#/components/schemas/", components["schemas"]
		put = func(b []byte) {
			components["schemas"] = b
			doc["components"], _ = json.Marshal(components)
		}
	}
	if schemas != nil {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(schemas, &all); err != nil {
			return nil, false
		}
		kept := reachableSchemas(raw, all, refPrefix)
		b, err := json.Marshal(kept)
		if err != nil {
			return nil, false
		}
		put(b)
	}
	out, err := json.Marshal(doc)
	return out, err == nil
}

// platformOnlyPath reports whether an OpenAPI path is an operation on a
// platform-only group or resource: /apis/{group}[/{version}[/...{resource}...]].
func (v visibility) platformOnlyPath(p string) bool {
	rest, ok := strings.CutPrefix(p, "/apis/")
	if !ok {
		return false // the core group has no platform-only resources
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	group := parts[0]
	if v.platformOnlyGroup(group) {
		return true
	}
	if len(parts) < 3 {
		return false
	}
	_, resource, ok := pathResource(p)
	if !ok {
		return false
	}
	gr := schema.GroupResource{Group: group, Resource: resource}
	return v.platformOnly(gr) || (v.org && v.hiddenInScope(gr, v.namespaced.Has(gr)))
}

// pathResource returns the group and resource of an OpenAPI path of a
// group's resource: /apis/{group}/{version}[/watch][/namespaces/{namespace}]/{resource}...
func pathResource(p string) (group, resource string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/apis/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	if len(parts) < 3 {
		return "", "", false
	}
	group, parts = parts[0], parts[2:]
	if parts[0] == "watch" {
		parts = parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return "", "", false
	}
	return group, parts[0], true
}

// reachableSchemas returns the schemas that from (JSON) refers to, directly or
// through other schemas.
func reachableSchemas(from json.RawMessage, all map[string]json.RawMessage, refPrefix string) map[string]json.RawMessage {
	kept := map[string]json.RawMessage{}
	queue := refsIn(from, refPrefix)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if _, done := kept[name]; done {
			continue
		}
		s, ok := all[name]
		if !ok {
			continue
		}
		kept[name] = s
		queue = append(queue, refsIn(s, refPrefix)...)
	}
	return kept
}

// refsIn lists the schema names the "$ref"s in raw point at.
func refsIn(raw json.RawMessage, refPrefix string) []string {
	var compact bytes.Buffer
	if json.Compact(&compact, raw) == nil {
		raw = compact.Bytes()
	}
	var out []string
	marker := []byte(`"$ref":"` + refPrefix)
	for s := string(raw); ; {
		i := strings.Index(s, string(marker))
		if i < 0 {
			return out
		}
		s = s[i+len(marker):]
		end := strings.IndexByte(s, '"')
		if end < 0 {
			return out
		}
		out = append(out, jsonUnescape(s[:end]))
		s = s[end:]
	}
}

// jsonUnescape undoes the escaping encoding/json applies to a reference
// (for instance "~1" stays, but "\u0026" becomes "&").
func jsonUnescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out string
	if err := json.Unmarshal([]byte(`"`+s+`"`), &out); err != nil {
		return s
	}
	return out
}
