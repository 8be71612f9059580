package allprojects

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"unique"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// ByGroup is the name of the index of ProjectCRDs by API group.
const ByGroup = "group"

// ProjectCRDs returns the informer of every project's own
// CustomResourceDefinitions, shared by the controllers of one term (ctx):
// each CRD reduced to what they decide on — names, scope, which versions are
// served, conditions, finalizers; not its schemas, which can be tens of
// kilobytes — indexed by project (ByProject) and by group (ByGroup). Start it
// with manager.StartInformers.
func (c *Clients) ProjectCRDs(ctx context.Context) (cache.SharedIndexInformer, error) {
	key := sharedKey{done: ctx.Done(), gvr: apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"), allProjects: true, kind: "project-crds"}
	c.sharedMu.Lock()
	defer c.sharedMu.Unlock()
	if inf, ok := c.shared[key]; ok {
		return inf, nil
	}
	inf, err := c.Informer(CRDREST, "customresourcedefinitions", &apiextensionsv1.CustomResourceDefinition{}, true, nil, slimCRD)
	if err == nil {
		err = IndexByProject(inf)
	}
	if err == nil {
		err = IndexCRDsByGroup(inf)
	}
	if err != nil {
		return nil, err
	}
	return c.share(ctx, key, inf), nil
}

// CRDREST is the REST client of apiextensions.k8s.io, for Informer.
func CRDREST(cfg *rest.Config, hc *http.Client) (rest.Interface, error) {
	client, err := apiextensionsclient.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	return client.RESTClient(), nil
}

// IndexCRDsByGroup indexes an informer of CRDs by API group (ByGroup).
func IndexCRDsByGroup(inf cache.SharedIndexInformer) error {
	return inf.AddIndexers(cache.Indexers{ByGroup: func(obj any) ([]string, error) {
		if crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition); ok {
			return []string{crd.Spec.Group}, nil
		}
		return nil, nil
	}})
}

// slimCRD keeps of a CRD what the controllers decide on, sharing with the
// other CRDs of the informer what they have alike: 100,000 projects that
// define the same CRD keep one copy of its names, versions and status.
// Conditions lose their times, which no controller reads from the informer
// (a status is written from a CRD read again). Nothing may change what an
// informer holds, so sharing is safe.
func slimCRD(obj any) (any, error) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return obj, nil
	}
	out := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: unique.Make(crd.Name).Value(), Namespace: unique.Make(crd.Namespace).Value(), UID: crd.UID, ResourceVersion: crd.ResourceVersion,
			CreationTimestamp: crd.CreationTimestamp, DeletionTimestamp: crd.DeletionTimestamp, Finalizers: slims.finalizers(crd.Finalizers)},
		Spec:   slims.spec(crd),
		Status: slims.status(crd),
	}
	return out, nil
}

// slims are the parts slimCRD shares, at most maxSlims of each kind: what
// tenants name (versions, conflict messages) is not the server's to bound,
// and past it a CRD keeps parts of its own.
var slims = &slimParts{specs: map[string]apiextensionsv1.CustomResourceDefinitionSpec{}, statuses: map[string]apiextensionsv1.CustomResourceDefinitionStatus{}, finals: map[string][]string{}}

const maxSlims = 4096

type slimParts struct {
	mu       sync.Mutex
	specs    map[string]apiextensionsv1.CustomResourceDefinitionSpec
	statuses map[string]apiextensionsv1.CustomResourceDefinitionStatus
	finals   map[string][]string
}

// key encodes parts unambiguously (whatever names a tenant gives, two
// different lists never have one key).
func key(parts ...any) string {
	b, _ := json.Marshal(parts)
	return string(b)
}

func (p *slimParts) spec(crd *apiextensionsv1.CustomResourceDefinition) apiextensionsv1.CustomResourceDefinitionSpec {
	parts := []any{crd.Spec.Group, crd.Spec.Scope, crd.Spec.Names}
	for _, v := range crd.Spec.Versions {
		parts = append(parts, v.Name, v.Served, v.Storage)
	}
	k := key(parts...)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.specs[k]; ok {
		return s
	}
	s := apiextensionsv1.CustomResourceDefinitionSpec{Group: crd.Spec.Group, Names: crd.Spec.Names, Scope: crd.Spec.Scope}
	for _, v := range crd.Spec.Versions {
		s.Versions = append(s.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v.Name, Served: v.Served, Storage: v.Storage})
	}
	if len(p.specs) < maxSlims {
		p.specs[k] = s
	}
	return s
}

func (p *slimParts) status(crd *apiextensionsv1.CustomResourceDefinition) apiextensionsv1.CustomResourceDefinitionStatus {
	n := crd.Status.AcceptedNames
	parts := []any{n}
	for _, c := range crd.Status.Conditions {
		parts = append(parts, c.Type, c.Status, c.Reason, c.Message)
	}
	k := key(parts...)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.statuses[k]; ok {
		return s
	}
	s := apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: n}
	for _, c := range crd.Status.Conditions {
		s.Conditions = append(s.Conditions, apiextensionsv1.CustomResourceDefinitionCondition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	if len(p.statuses) < maxSlims {
		p.statuses[k] = s
	}
	return s
}

func (p *slimParts) finalizers(f []string) []string {
	if len(f) == 0 {
		return nil
	}
	k := key(f)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.finals[k]; ok {
		return s
	}
	if len(p.finals) < maxSlims {
		p.finals[k] = f
	}
	return f
}

// ServedVersion is the version through which a CRD's instances are read and
// deleted: its storage version if served, else its first served one; "" if
// none is served.
func ServedVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	version := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (version == "" || v.Storage) {
			version = v.Name
		}
	}
	return version
}

// OwnResources returns, as discovery lists them, the resources one project's
// own CRDs serve (of ProjectCRDs, by storage id): those whose names are
// accepted, each at its ServedVersion; only namespaced ones if namespaced.
func OwnResources(crds cache.SharedIndexInformer, projectID string, namespaced bool) []*metav1.APIResourceList {
	objs, _ := crds.GetIndexer().ByIndex(ByProject, projectID)
	var lists []*metav1.APIResourceList
	for _, o := range objs {
		crd, ok := o.(*apiextensionsv1.CustomResourceDefinition)
		if !ok || !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) ||
			(namespaced && crd.Spec.Scope != apiextensionsv1.NamespaceScoped) {
			continue
		}
		version := ServedVersion(crd)
		if version == "" {
			continue
		}
		names := crd.Status.AcceptedNames
		gv := crd.Spec.Group + "/" + version
		r := metav1.APIResource{Name: names.Plural, SingularName: names.Singular, Namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			Kind: names.Kind, Verbs: metav1.Verbs{"delete", "deletecollection", "get", "list", "patch", "create", "update", "watch"}}
		i := slices.IndexFunc(lists, func(l *metav1.APIResourceList) bool { return l.GroupVersion == gv })
		if i < 0 {
			lists = append(lists, &metav1.APIResourceList{GroupVersion: gv})
			i = len(lists) - 1
		}
		lists[i].APIResources = append(lists[i].APIResources, r)
	}
	return lists
}

// DefinedByProjects reports whether some project's CRD holds names in group
// (of ProjectCRDs): such a group is never the platform's.
func DefinedByProjects(crds cache.SharedIndexInformer, group string) bool {
	objs, _ := crds.GetIndexer().ByIndex(ByGroup, group)
	for _, o := range objs {
		if crd, ok := o.(*apiextensionsv1.CustomResourceDefinition); ok && crd.Status.AcceptedNames.Plural != "" {
			return true
		}
	}
	return false
}
