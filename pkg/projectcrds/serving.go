package projectcrds

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapiserver "k8s.io/apiextensions-apiserver/pkg/apiserver"
	apiextensionslisters "k8s.io/apiextensions-apiserver/pkg/client/listers/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"go.miloapis.com/milo/pkg/controllers/allprojects"
	"go.miloapis.com/milo/pkg/tenancy"
)

// ServingConfig is what the handlers of project CRDs' instances are built
// from: the apiextensions server's own settings, so that a project's kinds
// are served exactly as the platform's.
type ServingConfig struct {
	// RESTOptions is the apiextensions server's storage of custom resources
	// (tenant-keyed).
	RESTOptions          generic.RESTOptionsGetter
	Admission            admission.Interface
	ServiceResolver      webhook.ServiceResolver
	AuthResolverWrapper  webhook.AuthenticationInfoResolverWrapper
	Authorizer           authorizer.Authorizer
	RequestTimeout       time.Duration
	MinRequestTimeout    time.Duration
	StaticOpenAPISpec    map[string]*spec.Schema
	MaxRequestBodyBytes  int64
	NegotiatedSerializer runtime.NegotiatedSerializer
}

// Serving serves the instances of the CRDs projects define: a request for a
// project's kind is handed to the handler of its CRD's class — upstream's CRD
// handler, built over an informer holding the class's one canonical CRD, so
// one storage per version (reading etcd directly) serves every project of the class.
type Serving struct {
	config ServingConfig
	index  *Index

	mu      sync.RWMutex
	classes map[Class]*classHandler
	// building are the classes whose handlers are being built.
	building map[Class]*classBuild
	// views are the classes of the all-projects view's resources, by
	// "<plural>.<group>" (view.go).
	views map[string]Class
	// sweepAt is how many classes may be built before those no CRD has any
	// more are torn down: twice as many as were live at the last sweep, so
	// a tenant changing its CRD's schema over and over keeps at most about
	// as many handlers as there are live classes, each swept at a cost that
	// doubling spreads thin.
	sweepAt int
}

// classHandler is one schema class's upstream CRD handler and the informer
// holding its one CRD.
type classHandler struct {
	http.Handler
	crd *oneCRD
}

// NewServing prepares the serving of the CRDs of index.
func NewServing(config ServingConfig, index *Index) *Serving {
	config.Admission = forbidCreateWhileTerminating{config.Admission}
	return &Serving{config: config, index: index, classes: map[Class]*classHandler{}, building: map[Class]*classBuild{}, views: map[string]Class{}, sweepAt: minSweep}
}

// minSweep is how many class handlers are built before the first sweep.
const minSweep = 16

// classHandlers is how many schema classes' handlers the server holds.
var classHandlers = metrics.NewGauge(&metrics.GaugeOpts{
	Subsystem:      "milo",
	Name:           "project_crd_class_handlers",
	Help:           "How many schema classes of projects' own CRDs the server holds a handler for.",
	StabilityLevel: metrics.ALPHA,
})

func init() { legacyregistry.MustRegister(classHandlers) }

// Handler serves the requests for project CRDs' instances and hands every
// other request to next.
func (s *Serving) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := req.Context()
		t := tenancy.From(ctx)
		info, ok := request.RequestInfoFrom(ctx)
		if ok && info.IsResourceRequest && t.Kind == tenancy.AllProjects && info.APIGroup != "" && info.Subresource == "" &&
			(info.Verb == "list" || info.Verb == "watch") && s.serveView(w, req, info.APIGroup, info.APIVersion, info.Resource) {
			return
		}
		if !ok || !info.IsResourceRequest || !t.IsProject() || t.ID == "" || info.APIGroup == "" {
			next.ServeHTTP(w, req)
			return
		}
		s.serve(w, req, next, t, info, 0)
	})
}

// serve hands a request of project t for a kind it may define to its
// CRD's class handler, or to next if it defines none. A watch whose CRD
// changed class while it was being registered is served afresh (up to
// attempt 3, then with its context ended: the client watches again).
func (s *Serving) serve(w http.ResponseWriter, req *http.Request, next http.Handler, t tenancy.Tenant, info *request.RequestInfo, attempt int) {
	orig, ctx := req, req.Context()
	crd := s.index.lookup(t, info.Resource+"."+info.APIGroup)
	if crd == nil || !apiextensionshelpers.IsCRDConditionTrue(crd, apiextensionsv1.NamesAccepted) {
		next.ServeHTTP(w, req)
		return
	}
	gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
	if crd.DeletionTimestamp != nil {
		// As upstream: nothing new while the CRD's instances are being
		// deleted, by POST or by a patch that creates (server-side
		// apply); updates go on (finalizers are removed by them).
		ctx = context.WithValue(ctx, terminatingKey{}, crd.Name)
		req = req.WithContext(ctx)
	}
	h, err := s.class(ctx, crd)
	if err != nil {
		responsewriters.ErrorNegotiated(apierrors.NewInternalError(fmt.Errorf("serving %s: %w", crd.Name, err)), s.config.NegotiatedSerializer, gv, w, req)
		return
	}
	if info.Verb == "watch" {
		// Ended when the project's CRD leaves the class serving it
		// (watches.go); checked again once registered, for a change
		// the index saw in between.
		key, class := allprojects.Key{Project: t.Name, ID: t.ID, Name: crd.Name}.StoreKey(), Class(crd.Annotations[classAnnotation])
		watchCtx, done := s.index.watches.add(ctx, key, class)
		defer done()
		if now := s.index.lookup(t, crd.Name); now == nil || Class(now.Annotations[classAnnotation]) != class {
			done()
			if attempt < 3 {
				s.serve(w, orig, next, t, info, attempt+1)
				return
			}
		}
		req = req.WithContext(watchCtx)
	}
	h.ServeHTTP(w, req)
}

// class returns the handler of crd's schema class, building it on first use.
// A class is built outside the lock: building it starts the informer of its
// one CRD and waits for it to fill (a tenth of a second or so; upstream's
// handler compiles the schema and its CEL rules later, on its first
// request, under a lock of its own), and the classes already built keep
// serving every other project meanwhile; requests for a class being built
// wait for that one build (or for their own request to end).
func (s *Serving) class(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (http.Handler, error) {
	class := Class(crd.Annotations[classAnnotation])
	s.mu.RLock()
	h, ok := s.classes[class]
	s.mu.RUnlock()
	if ok {
		return h, nil
	}
	s.mu.Lock()
	if h, ok := s.classes[class]; ok {
		s.mu.Unlock()
		return h, nil
	}
	b, building := s.building[class]
	if !building {
		if len(s.classes) >= s.sweepAt {
			s.sweepLocked()
		}
		b = &classBuild{done: make(chan struct{})}
		s.building[class] = b
	}
	s.mu.Unlock()
	if building {
		select {
		case <-b.done:
			return b.handler, b.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	// What the waiters get should the build panic (the server's panic
	// filter answers the builder's request); the next request builds anew.
	b.err = fmt.Errorf("building the handler of class %s failed", class)
	defer func() {
		s.mu.Lock()
		delete(s.building, class)
		if b.err == nil {
			s.classes[class] = b.handler
			classHandlers.Set(float64(len(s.classes)))
		}
		s.mu.Unlock()
		close(b.done)
	}()
	b.handler, b.err = s.build(crd, class)
	return b.handler, b.err
}

// classBuild is a class's handler being built, which requests for the class
// wait for.
type classBuild struct {
	done    chan struct{}
	handler *classHandler
	err     error
}

// build makes the handler of class, whose CRD crd is.
func (s *Serving) build(crd *apiextensionsv1.CustomResourceDefinition, class Class) (*classHandler, error) {
	// The class's canonical CRD: named as upstream names it, identified by
	// its class (upstream keeps a handler's storage by CRD UID), served.
	canonical := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: crd.Spec.Names.Plural + "." + crd.Spec.Group, UID: types.UID(class)},
		Spec:       *crd.Spec.DeepCopy(),
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: crd.Status.AcceptedNames,
			StoredVersions: crd.Status.StoredVersions,
			Conditions: []apiextensionsv1.CustomResourceDefinitionCondition{
				{Type: apiextensionsv1.NamesAccepted, Status: apiextensionsv1.ConditionTrue},
				{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}},
	}
	one := newOneCRD(canonical)
	h, err := apiextensionsapiserver.NewCustomResourceDefinitionHandler(nil, nil, one, notServed{s.config.NegotiatedSerializer},
		s.config.RESTOptions, s.config.Admission, nil, s.config.ServiceResolver, s.config.AuthResolverWrapper, 1,
		s.config.Authorizer, s.config.RequestTimeout, s.config.MinRequestTimeout, s.config.StaticOpenAPISpec, s.config.MaxRequestBodyBytes)
	if err != nil {
		return nil, err
	}
	// Run only so that removing its CRD reaches the handler, which then
	// tears its storage down (upstream's path for a deleted CRD).
	if !one.start() {
		return nil, fmt.Errorf("the informer of class %s did not start", class)
	}
	return &classHandler{Handler: h, crd: one}, nil
}

// sweepLocked tears down the handlers of the classes no project's CRD has
// any more; the caller holds s.mu.
func (s *Serving) sweepLocked() {
	live := s.index.liveClasses()
	live.Insert(s.liveViewsLocked()...)
	for class, h := range s.classes {
		if !live.Has(class) {
			h.crd.remove()
			delete(s.classes, class)
		}
	}
	s.sweepAt = max(minSweep, 2*len(s.classes))
	classHandlers.Set(float64(len(s.classes)))
}

// notServed answers what the class handler does not serve (a version the
// CRD does not serve, the wrong scope) as the apiserver answers any unknown path.
type notServed struct{ runtime.NegotiatedSerializer }

func (notServed) ServeHTTP(w http.ResponseWriter, req *http.Request) { http.NotFound(w, req) }

// oneCRD is an informer that holds one CRD, listed from memory, with a
// watch that says nothing until the CRD is removed: the class handler reads
// its CRD from it and tears its storage down when it goes.
type oneCRD struct {
	crd      *apiextensionsv1.CustomResourceDefinition
	informer cache.SharedIndexInformer
	events   *watch.RaceFreeFakeWatcher
	stop     chan struct{}
}

func newOneCRD(crd *apiextensionsv1.CustomResourceDefinition) *oneCRD {
	o := &oneCRD{crd: crd, events: watch.NewRaceFreeFake(), stop: make(chan struct{})}
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			return &apiextensionsv1.CustomResourceDefinitionList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []apiextensionsv1.CustomResourceDefinition{*crd.DeepCopy()}}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return o.events, nil },
	}
	o.informer = cache.NewSharedIndexInformer(lw, &apiextensionsv1.CustomResourceDefinition{}, 0, cache.Indexers{})
	return o
}

// start runs the informer; false if it could not fill.
func (o *oneCRD) start() bool {
	go o.informer.Run(o.stop)
	return cache.WaitForCacheSync(o.stop, o.informer.HasSynced)
}

// remove takes the CRD away, which makes the handler tear its storage down
// once its requests are done, and stops the informer.
func (o *oneCRD) remove() {
	o.events.Delete(o.crd.DeepCopy())
	go func() {
		// The handler's DeleteFunc has run once the store is empty.
		_ = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return len(o.informer.GetStore().List()) == 0, nil
		})
		close(o.stop)
	}()
}

func (o *oneCRD) Informer() cache.SharedIndexInformer { return o.informer }

func (o *oneCRD) Lister() apiextensionslisters.CustomResourceDefinitionLister {
	return apiextensionslisters.NewCustomResourceDefinitionLister(o.informer.GetIndexer())
}

// terminatingKey marks, in a request's context, a request for a kind whose
// project CRD is being deleted; its value is the CRD's name.
type terminatingKey struct{}

// forbidCreateWhileTerminating refuses every create (by POST, or by a patch
// or apply that creates) of an instance whose project CRD is being deleted,
// as upstream's handler does for a terminating CRD: the class handler serves
// every project of the class, so the refusal follows the request's project
// CRD rather than the handler's.
type forbidCreateWhileTerminating struct{ delegate admission.Interface }

func (f forbidCreateWhileTerminating) Handles(op admission.Operation) bool {
	return op == admission.Create || (f.delegate != nil && f.delegate.Handles(op))
}

func (f forbidCreateWhileTerminating) refuse(ctx context.Context, a admission.Attributes) error {
	if name, ok := ctx.Value(terminatingKey{}).(string); ok && a.GetOperation() == admission.Create {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), a.GetName(), fmt.Errorf("create not allowed while custom resource definition %s is terminating", name))
	}
	return nil
}

func (f forbidCreateWhileTerminating) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if err := f.refuse(ctx, a); err != nil {
		return err
	}
	if m, ok := f.delegate.(admission.MutationInterface); ok && m.Handles(a.GetOperation()) {
		return m.Admit(ctx, a, o)
	}
	return nil
}

func (f forbidCreateWhileTerminating) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if err := f.refuse(ctx, a); err != nil {
		return err
	}
	if v, ok := f.delegate.(admission.ValidationInterface); ok && v.Handles(a.GetOperation()) {
		return v.Validate(ctx, a, o)
	}
	return nil
}
