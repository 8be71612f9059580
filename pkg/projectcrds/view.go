package projectcrds

import (
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	"go.miloapis.com/milo/pkg/tenancy"
)

// viewCRD is the CRD through which the all-projects view reads a resource
// that projects define: every version some project's CRD of it serves or has
// stored (so that every stored object decodes), each with a schema that
// keeps every field, no subresource and no conversion. Projects may define
// the resource with different schemas, scopes, kinds and versions; the view
// serves only what they all have, object metadata (serveView). Nil if no
// project defines it.
func viewCRD(group, plural string, crds []*entry) *apiextensionsv1.CustomResourceDefinition {
	if len(crds) == 0 {
		return nil
	}
	// The oldest CRD names the view's kind (any kind decodes: the view's
	// objects are never converted but by version).
	first := slices.MinFunc(crds, func(a, b *entry) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
	// Entries share their class's spec and their status: each is read once.
	versions := map[string]bool{}
	classes, statuses := map[*classEntry]bool{}, map[*statusEntry]bool{}
	for _, e := range crds {
		if !classes[e.class] {
			classes[e.class] = true
			for _, v := range e.class.spec.Versions {
				versions[v.Name] = true
			}
		}
		if !statuses[e.status] {
			statuses[e.status] = true
			for _, v := range e.status.stored {
				versions[v] = true
			}
		}
	}
	names := make([]string, 0, len(versions))
	for v := range versions {
		names = append(names, v)
	}
	slices.Sort(names)
	keep := true
	schema := &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &keep}}
	view := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names:      apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: first.class.names.Singular, Kind: first.class.names.Kind, ListKind: first.class.names.ListKind},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter}},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: names},
	}
	view.Status.AcceptedNames = view.Spec.Names
	for i, v := range names {
		view.Spec.Versions = append(view.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v, Served: true, Storage: i == 0, Schema: schema})
	}
	return view
}

// serveView answers a list or watch of a project-defined resource in the
// all-projects view: object metadata only, of every project's objects of
// the resource, whatever schema each project gave it. It is what the
// garbage collector reads; full objects cannot be served across projects
// whose schemas and versions differ. False if no project defines the
// resource at the requested version (the caller answers as for any unknown
// resource).
func (s *Serving) serveView(w http.ResponseWriter, req *http.Request, group, version, plural string) bool {
	view := viewCRD(group, plural, s.index.definingResource(plural+"."+group))
	if view == nil || !slices.ContainsFunc(view.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version }) {
		return false
	}
	gv := schema.GroupVersion{Group: group, Version: version}
	if !tenancy.Superuser(req.Context()) {
		// Metadata carries what tenants write in annotations (kubectl's
		// last-applied copy is the whole object): the platform's own
		// controllers read it, nobody else.
		err := apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: plural}, "",
			fmt.Errorf("projects' own kinds are read across projects by the platform's controllers only"))
		responsewriters.ErrorNegotiated(err, s.config.NegotiatedSerializer, gv, w, req)
		return true
	}
	accept, ok := metadataOnly(req.Header.Values("Accept"))
	if !ok {
		err := apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "", schema.GroupResource{Group: group, Resource: plural}, "", "", 0, false)
		err.ErrStatus.Message = fmt.Sprintf("the all-projects view serves %s.%s, which projects define, as object metadata only: ask for application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", plural, group)
		err.ErrStatus.Reason = metav1.StatusReasonNotAcceptable
		responsewriters.ErrorNegotiated(err, s.config.NegotiatedSerializer, gv, w, req)
		return true
	}
	class, err := ClassOf(view)
	if err != nil {
		responsewriters.ErrorNegotiated(apierrors.NewInternalError(err), s.config.NegotiatedSerializer, gv, w, req)
		return true
	}
	view.Annotations = map[string]string{classAnnotation: string(class)}
	s.mu.Lock()
	s.views[view.Name] = class
	s.mu.Unlock()
	h, err := s.class(req.Context(), view)
	if err != nil {
		responsewriters.ErrorNegotiated(apierrors.NewInternalError(fmt.Errorf("serving %s: %w", view.Name, err)), s.config.NegotiatedSerializer, gv, w, req)
		return true
	}
	req = req.Clone(req.Context())
	req.Header.Set("Accept", accept)
	h.ServeHTTP(w, req)
	return true
}

// metadataOnly keeps of an Accept header the media types that ask for
// PartialObjectMetadata or PartialObjectMetadataList; false if none does.
func metadataOnly(values []string) (string, bool) {
	var kept []string
	for _, value := range values {
		for _, part := range strings.Split(value, ",") {
			_, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue
			}
			if as := params["as"]; (as == "PartialObjectMetadata" || as == "PartialObjectMetadataList") && params["g"] == metav1.GroupName {
				kept = append(kept, strings.TrimSpace(part))
			}
		}
	}
	return strings.Join(kept, ","), len(kept) > 0
}

// liveViewsLocked returns the classes of the views some project still defines
// exactly as when they were last served, and forgets the others; the caller
// holds s.mu.
func (s *Serving) liveViewsLocked() []Class {
	var live []Class
	for name, class := range s.views {
		plural, group, _ := strings.Cut(name, ".")
		view := viewCRD(group, plural, s.index.definingResource(name))
		if view != nil {
			if c, err := ClassOf(view); err == nil && c == class {
				live = append(live, class)
				continue
			}
		}
		delete(s.views, name)
	}
	return live
}
