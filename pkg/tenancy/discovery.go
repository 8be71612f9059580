package tenancy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	openapihandler "k8s.io/kube-openapi/pkg/handler"
	"k8s.io/utils/lru"
)

// Discovery inside a project shows what a project serves: platform-only groups
// and resources are removed from /apis (aggregated and legacy), from group and
// version documents, and from the OpenAPI v3 index; their own documents answer 404.

// notServed answers exactly as the apiserver does for a path nothing serves
// (its last handler is http.NotFound), so that what a tenant context hides
// cannot be told from what does not exist.
func notServed(w http.ResponseWriter, req *http.Request) { http.NotFound(w, req) }

func isDiscoveryPath(path string) bool {
	return path == "/apis" || strings.HasPrefix(path, "/apis/") || path == "/openapi/v2" || path == "/openapi/v3" || strings.HasPrefix(path, "/openapi/v3/")
}

// hiddenDiscoveryPath reports whether the document at path describes a
// platform-only group: /apis/{group}[/{version}] or /openapi/v3/apis/{group}/{version}.
func (v visibility) hiddenDiscoveryPath(path string) bool {
	rest, ok := strings.CutPrefix(path, "/apis/")
	if !ok {
		rest, ok = strings.CutPrefix(path, "/openapi/v3/apis/")
	}
	if !ok {
		return false
	}
	group, _, _ := strings.Cut(rest, "/")
	return v.platformOnlyGroup(group)
}

// serveFilteredDiscovery serves a discovery document with platform-only entries
// removed. It asks for JSON, uncompressed and without caching validators, so the
// body can be rewritten; the result carries no ETag, so clients never reuse a
// platform-wide document for a project.
//
// viewOf returns, once the chain has confirmed the request, what the tenant
// sees — v with the Services' gates of the confirmed tenant — and the
// project's own groups: a document of one of them, which the apiserver does
// not know (404), is answered from them, and they are added to /apis and the
// OpenAPI v3 index.
func serveFilteredDiscovery(handler http.Handler, w http.ResponseWriter, req *http.Request, v visibility, viewOf func() (visibility, ownGroups)) {
	proto := req.URL.Path == "/openapi/v2" && prefersOpenAPIProto(req.Header.Get("Accept"))
	req.Header = req.Header.Clone()
	req.Header.Set("Accept", jsonOnly(req.Header.Get("Accept")))
	// Whole and unconditional: a part of the platform's document (Range) or
	// a 304 (its validators) would pass through unfiltered, or keep a
	// client on a project's outdated document.
	for _, h := range []string{"Accept-Encoding", "If-None-Match", "If-Match", "If-Modified-Since", "If-Unmodified-Since", "Range", "If-Range"} {
		req.Header.Del(h)
	}
	// An OpenAPI v3 group document is asked for by the hash the tenant's
	// index gave (openAPIGroupHash), which the platform's handler would not
	// know: it is taken off here and checked below.
	askedHash, v3Group := "", openAPIV3Group(req.URL.Path)
	if v3Group != "" {
		q := req.URL.Query()
		askedHash = q.Get("hash")
		q.Del("hash")
		u := *req.URL
		u.RawQuery = q.Encode()
		req.URL = &u
	}
	rec := &recorder{header: http.Header{}, code: http.StatusOK}
	handler.ServeHTTP(rec, req)
	if strings.HasPrefix(req.URL.Path, "/openapi/") && rec.code != http.StatusOK && rec.code != http.StatusNotFound && rec.code != http.StatusServiceUnavailable {
		// Never anything of the platform's document but the whole, filtered.
		http.Error(w, "the OpenAPI document could not be filtered for this project", http.StatusInternalServerError)
		return
	}
	v, own := viewOf()
	if v.gates != nil && !v.gates.Synced() && rec.code == http.StatusOK {
		// Until the catalog has loaded, what Services hide cannot be told:
		// the same answer as for a resource request then.
		catalogLoading(w)
		return
	}
	if rec.code == http.StatusNotFound && own.serveOwnDocument(w, req.URL.Path) {
		return
	}
	if rec.code == http.StatusOK && v.hiddenDiscoveryPath(req.URL.Path) {
		notServed(w, req)
		return
	}

	body := rec.body.Bytes()
	if rec.code == http.StatusOK && strings.HasPrefix(req.URL.Path, "/openapi/") && !json.Valid(body) {
		// Never the platform's document unfiltered.
		http.Error(w, "the OpenAPI document could not be filtered for this project", http.StatusInternalServerError)
		return
	}
	// The OpenAPI v3 index is served as text/plain; every document here is JSON.
	if rec.code == http.StatusOK && (strings.Contains(rec.header.Get("Content-Type"), "json") || strings.HasPrefix(req.URL.Path, "/openapi/")) {
		if filtered, ok := filterDiscovery(body, v); ok {
			body = filtered
		}
		if len(own.groups) > 0 {
			var add func(map[string]json.RawMessage) bool
			switch req.URL.Path {
			case "/apis", "/apis/":
				add = own.addTo
			case "/openapi/v3", "/openapi/v3/":
				add = own.addToOpenAPIIndex
			case "/openapi/v2":
				add = own.addToOpenAPIV2
			}
			var doc map[string]json.RawMessage
			if add != nil && json.Unmarshal(body, &doc) == nil && add(doc) {
				if out, err := json.Marshal(doc); err == nil {
					body = out
				}
			}
		}
		if !strings.Contains(rec.header.Get("Content-Type"), "json") {
			rec.header.Set("Content-Type", "application/json")
		}
		if proto {
			// Asked in protobuf (kubectl asks for nothing else), it is
			// answered in protobuf, as the apiserver's own handler does.
			pb, err := encodeOpenAPIProto(body)
			if err != nil {
				klog.ErrorS(err, "Encoding a tenant's OpenAPI v2 document in protobuf", "path", req.URL.Path)
				http.Error(w, "the OpenAPI document could not be encoded for this project", http.StatusInternalServerError)
				return
			}
			body = pb
			rec.header.Set("Content-Type", "application/"+openAPIV2Proto)
		}
	}
	for k, v := range rec.header {
		w.Header()[k] = v
	}
	if v3Group != "" && rec.code == http.StatusOK {
		// Cached for good under the hash the tenant's index names, as the
		// apiserver caches its own; asked by another (an index read
		// before the tenant's view changed), served as it is now, uncached.
		if askedHash != "" && askedHash == openAPIGroupHash(strings.Trim(rec.header.Get("Etag"), `"`), v, v3Group) {
			w.Header().Set("Vary", "Accept")
			w.Header().Set("Cache-Control", "public, immutable")
			w.Header().Set("Expires", time.Now().AddDate(1, 0, 0).Format(time.RFC1123))
		} else {
			w.Header().Set("Cache-Control", "no-cache, private")
			w.Header().Del("Expires")
		}
	}
	for _, h := range []string{"ETag", "Last-Modified", "Accept-Ranges"} {
		w.Header().Del(h)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(rec.code)
	w.Write(body) //nolint:errcheck // the client went away
}

// jsonOnly keeps the JSON entries of an Accept header (with their parameters, so
// aggregated discovery is still negotiated) and drops protobuf ones.
func jsonOnly(accept string) string {
	if accept == "" {
		return "application/json"
	}
	var keep []string
	for _, part := range strings.Split(accept, ",") {
		if strings.Contains(part, "json") || strings.TrimSpace(part) == "*/*" {
			keep = append(keep, part)
		}
	}
	if len(keep) == 0 {
		return "application/json"
	}
	return strings.Join(keep, ",")
}

// filterDiscovery removes platform-only entries from the discovery documents it
// knows; other documents pass unchanged.
func filterDiscovery(body []byte, v visibility) ([]byte, bool) {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, false
	}
	var kind string
	json.Unmarshal(doc["kind"], &kind) //nolint:errcheck // absent for the OpenAPI index
	switch {
	case kind == "APIGroupList":
		return filterList(doc, "groups", func(item map[string]any) bool {
			name, _ := item["name"].(string)
			return !v.platformOnlyGroup(name)
		})
	case kind == "APIGroupDiscoveryList":
		return filterList(doc, "items", v.keepAggregatedGroup)
	case kind == "APIResourceList":
		var gv string
		json.Unmarshal(doc["groupVersion"], &gv) //nolint:errcheck
		group, _, _ := strings.Cut(gv, "/")
		if !strings.Contains(gv, "/") {
			group = ""
		}
		return filterList(doc, "resources", func(item map[string]any) bool {
			name, _ := item["name"].(string)
			resource, _, _ := strings.Cut(name, "/")
			gr := schema.GroupResource{Group: group, Resource: resource}
			tenantVerbs(gr, name, item)
			namespaced, _ := item["namespaced"].(bool)
			return !v.platformOnly(gr) && !v.hiddenInScope(gr, namespaced)
		})
	case doc["paths"] != nil && (doc["openapi"] != nil || doc["swagger"] != nil):
		return filterOpenAPIDocument(doc, v)
	case doc["paths"] != nil:
		return filterOpenAPIIndex(doc, v)
	}
	return nil, false
}

// keepAggregatedGroup filters one APIGroupDiscovery: platform-only groups go,
// platform-only resources of the remaining groups go.
func (v visibility) keepAggregatedGroup(item map[string]any) bool {
	meta, _ := item["metadata"].(map[string]any)
	group, _ := meta["name"].(string)
	if v.platformOnlyGroup(group) {
		return false
	}
	versions, _ := item["versions"].([]any)
	for _, ver := range versions {
		version, _ := ver.(map[string]any)
		resources, _ := version["resources"].([]any)
		kept := resources[:0]
		for _, r := range resources {
			res, _ := r.(map[string]any)
			name, _ := res["resource"].(string)
			gr := schema.GroupResource{Group: group, Resource: name}
			if !v.platformOnly(gr) && !v.hiddenInScope(gr, res["scope"] != "Cluster") {
				tenantVerbs(gr, name, res)
				if subresources, ok := res["subresources"].([]any); ok && (gr == Catalog || gr == SuspensionsResource) {
					for _, sub := range subresources {
						if m, ok := sub.(map[string]any); ok {
							tenantVerbs(gr, name+"/"+fmt.Sprint(m["subresource"]), m)
						}
					}
				}
				kept = append(kept, r)
			}
		}
		if resources != nil {
			version["resources"] = kept
		}
	}
	return true
}

// tenantVerbs makes a discovery entry of a platform resource a tenant context
// reads, say what the context allows: the catalog of Services get, list and
// watch; ProjectSuspensions (an organization's) also delete. (A controller
// emptying a project deletes what discovery says it can.)
func tenantVerbs(gr schema.GroupResource, name string, entry map[string]any) {
	switch {
	case gr != Catalog && gr != SuspensionsResource:
	case name == gr.Resource && gr == SuspensionsResource:
		entry["verbs"] = []any{"delete", "get", "list", "watch"}
	case name == gr.Resource:
		entry["verbs"] = []any{"get", "list", "watch"}
	default: // its status
		entry["verbs"] = []any{"get"}
	}
}

func filterList(doc map[string]json.RawMessage, field string, keep func(map[string]any) bool) ([]byte, bool) {
	var items []map[string]any
	if err := json.Unmarshal(doc[field], &items); err != nil {
		return nil, false
	}
	kept := make([]map[string]any, 0, len(items))
	for _, item := range items {
		if keep(item) {
			kept = append(kept, item)
		}
	}
	raw, err := json.Marshal(kept)
	if err != nil {
		return nil, false
	}
	doc[field] = raw
	out, err := json.Marshal(doc)
	return out, err == nil
}

func filterOpenAPIIndex(doc map[string]json.RawMessage, v visibility) ([]byte, bool) {
	var paths map[string]json.RawMessage
	if err := json.Unmarshal(doc["paths"], &paths); err != nil {
		return nil, false
	}
	for p, entry := range paths {
		if rest, ok := strings.CutPrefix(p, "apis/"); ok {
			group, _, _ := strings.Cut(rest, "/")
			if v.platformOnlyGroup(group) {
				delete(paths, p)
				continue
			}
			if rewritten, ok := rehashIndexEntry(entry, v, group); ok {
				paths[p] = rewritten
			}
		}
	}
	raw, err := json.Marshal(paths)
	if err != nil {
		return nil, false
	}
	doc["paths"] = raw
	out, err := json.Marshal(doc)
	return out, err == nil
}

// openAPIV3Group is the group of an OpenAPI v3 group document's path,
// /openapi/v3/apis/{group}/{version}, or "".
func openAPIV3Group(path string) string {
	rest, ok := strings.CutPrefix(path, "/openapi/v3/apis/")
	if !ok {
		return ""
	}
	group, _, _ := strings.Cut(rest, "/")
	return group
}

// openAPIGroupHash is the hash a tenant's OpenAPI v3 index names a group
// document by: the platform's, for a group no Service gates; else one that
// also names which of the group's resources the tenant is served, so that a
// project enabling or disabling a service sees a new document, not the one
// its client cached under the platform's hash.
func openAPIGroupHash(platformHash string, v visibility, group string) string {
	if v.gates == nil || platformHash == "" {
		return platformHash
	}
	view := v.gates.GroupView(v.tenant, group)
	if view == "" {
		return platformHash
	}
	sum := sha256.Sum256([]byte(platformHash + "\n" + view))
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// rehashIndexEntry gives an OpenAPI v3 index entry of group the tenant's
// hash (openAPIGroupHash); false when it needs no change.
func rehashIndexEntry(entry json.RawMessage, v visibility, group string) (json.RawMessage, bool) {
	var e map[string]string
	if json.Unmarshal(entry, &e) != nil {
		return nil, false
	}
	u, err := url.Parse(e["serverRelativeURL"])
	if err != nil {
		return nil, false
	}
	q := u.Query()
	hash := q.Get("hash")
	tenantHash := openAPIGroupHash(hash, v, group)
	if tenantHash == hash {
		return nil, false
	}
	q.Set("hash", tenantHash)
	u.RawQuery = q.Encode()
	e["serverRelativeURL"] = u.String()
	out, err := json.Marshal(e)
	return out, err == nil
}

// recorder buffers a response so it can be rewritten before it is sent.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.header }
func (r *recorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// openAPIV2Proto is the media subtype of the OpenAPI v2 document in
// protobuf; the older name ends in @v1.0 rather than .v1.0.
const openAPIV2Proto = "com.github.proto-openapi.spec.v2.v1.0+protobuf"

// prefersOpenAPIProto reports whether an Accept header asks for the OpenAPI
// v2 document in protobuf before JSON, as the apiserver negotiates it: of
// the media types it names that are either (or a wildcard), the one of the
// highest quality, a named type before a wildcard of equal quality, the
// first of equal ones, is protobuf. Quality 0 is "not acceptable".
func prefersOpenAPIProto(accept string) bool {
	bestQ, bestSpecific, proto := 0.0, false, false
	for _, clause := range strings.Split(accept, ",") {
		mediaType, params, _ := strings.Cut(clause, ";")
		mediaType = strings.ToLower(strings.TrimSpace(mediaType))
		isProto := mediaType == "application/"+openAPIV2Proto || mediaType == "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
		wildcard := mediaType == "*/*" || mediaType == "application/*"
		if !isProto && !wildcard && mediaType != "application/json" {
			continue
		}
		q := 1.0
		for _, p := range strings.Split(params, ";") {
			if k, v, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.TrimSpace(k) == "q" {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					q = f
				}
			}
		}
		if q <= 0 {
			continue
		}
		if q > bestQ || (q == bestQ && !wildcard && !bestSpecific) {
			bestQ, bestSpecific, proto = q, !wildcard, isProto
		}
	}
	return proto
}

// openAPIProtos keeps the protobuf encodings of the last few OpenAPI v2
// documents served in protobuf (a few MiB each), by the hash of their JSON:
// encoding one takes hundreds of milliseconds, and identical projects (and
// each kubectl run, which has no validator to revalidate with) ask for the
// same document.
var openAPIProtos = lru.New(8)

// encodeOpenAPIProto returns doc in protobuf, from openAPIProtos when it can.
func encodeOpenAPIProto(doc []byte) ([]byte, error) {
	key := sha256.Sum256(doc)
	if pb, ok := openAPIProtos.Get(key); ok {
		return pb.([]byte), nil
	}
	pb, err := openapihandler.ToProtoBinary(doc)
	if err != nil {
		return nil, err
	}
	openAPIProtos.Add(key, pb)
	return pb, nil
}
