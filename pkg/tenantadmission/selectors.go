package tenantadmission

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/tenancy"
)

// The upstream webhook and admission-policy plugins match a namespaceSelector
// against the labels of the request's namespace, which they look up by name in a
// namespace lister with no request context: left alone they would match a
// project's request against the platform's namespace of that name (a platform
// policy exempting kube-system would exempt every project's kube-system, and one
// selecting labels the platform's namespace happens to carry would apply to every
// project's namespace of that name).
//
// For project requests Milo runs further instances of the same upstream plugins,
// built and initialized exactly as the server's own but given a namespace lister
// and client that read the namespaces of the project the instance is serving. An
// instance serves one request at a time; idle instances wait in a pool whose size
// is bounded and independent of the number of projects.

// An instance of an admission-policy plugin compiles the platform's policies
// itself and refreshes them once a second, so two instances can disagree for up
// to a second after a policy changes: a request could be denied by one and the
// next admitted by another. The pool therefore counts the changes to the
// policies' and bindings' specs its handlers see, each instance carries the
// count it was built at, and one found older when taken is stopped and replaced
// by a fresh one, which compiles what the platform holds now. Once a project
// request has seen a change, every request after the informers' handlers have
// seen it does too. Webhook plugins read their configuration on each request and
// need no such care.

// selectorPlugins are the upstream plugins with namespace selectors, by name.
var selectorPlugins = map[string]func(io.Reader) (admission.Interface, error){
	validatingwebhook.PluginName: func(r io.Reader) (admission.Interface, error) {
		return validatingwebhook.NewValidatingAdmissionWebhook(r)
	},
	mutatingwebhook.PluginName: func(r io.Reader) (admission.Interface, error) { return mutatingwebhook.NewMutatingWebhook(r) },
	validatingpolicy.PluginName: func(r io.Reader) (admission.Interface, error) {
		return validatingpolicy.NewPlugin(r)
	},
	mutatingpolicy.PluginName: func(r io.Reader) (admission.Interface, error) { return mutatingpolicy.NewPlugin(r) },
}

// SelectorPlugins names the upstream plugins whose project requests are admitted
// by project instances.
func SelectorPlugins() []string {
	return []string{validatingwebhook.PluginName, mutatingwebhook.PluginName, validatingpolicy.PluginName, mutatingpolicy.PluginName}
}

// MaxInstancesPerPlugin bounds the project requests one selector plugin admits at
// once; further requests wait for an instance (or their deadline). Webhook calls
// can take seconds, so the bound is generous; instances are built only as the
// concurrency of project requests needs them and kept for the server's lifetime.
const MaxInstancesPerPlugin = 64

// MaxInstancesPerProject bounds the instances of one plugin one project holds at
// once, so that one project's requests held up by a slow webhook leave the other
// instances to other projects.
const MaxInstancesPerProject = MaxInstancesPerPlugin / 4

// mutating names the selector plugins that mutate; the others validate.
var mutating = map[string]bool{mutatingwebhook.PluginName: true, mutatingpolicy.PluginName: true}

// compiled names, for the plugins that compile their configuration in the
// background, the informers holding it.
var compiled = map[string]func(informers.SharedInformerFactory) []cache.SharedIndexInformer{
	validatingpolicy.PluginName: func(f informers.SharedInformerFactory) []cache.SharedIndexInformer {
		v1 := f.Admissionregistration().V1()
		return []cache.SharedIndexInformer{v1.ValidatingAdmissionPolicies().Informer(), v1.ValidatingAdmissionPolicyBindings().Informer()}
	},
	mutatingpolicy.PluginName: func(f informers.SharedInformerFactory) []cache.SharedIndexInformer {
		v1 := f.Admissionregistration().V1()
		return []cache.SharedIndexInformer{v1.MutatingAdmissionPolicies().Informer(), v1.MutatingAdmissionPolicyBindings().Informer()}
	},
}

// specChanged reports whether an update changed what a policy or binding says:
// their generation moves with their spec, not with the status the server
// writes after type-checking a policy.
func specChanged(oldObj, newObj any) bool {
	o, err1 := meta.Accessor(oldObj)
	n, err2 := meta.Accessor(newObj)
	return err1 != nil || err2 != nil || o.GetGeneration() != n.GetGeneration() || n.GetGeneration() == 0
}

// InitializerFunc returns the initializers of a plugin instance that reads
// namespaces through kube and informers and stops its background work when stop
// is closed. The server builds it from the same parts as its own admission chain.
type InitializerFunc func(kube kubernetes.Interface, informers informers.SharedInformerFactory, stop <-chan struct{}) admission.PluginInitializer

// Selectors builds the project instances of the selector plugins. It is
// configured by the server (Set) once its admission chain exists.
type Selectors struct {
	namespaces *Namespaces
	setup      atomic.Pointer[selectorSetup]
}

type selectorSetup struct {
	// base ends when the server drains; each instance's context derives from it.
	base        context.Context
	kube        kubernetes.Interface
	informers   informers.SharedInformerFactory
	initializer InitializerFunc
	config      func(plugin string) ([]byte, error)
}

// NewSelectors returns Selectors reading projects' namespaces through namespaces.
func NewSelectors(namespaces *Namespaces) *Selectors { return &Selectors{namespaces: namespaces} }

// Set gives the parts of the server's admission chain: its client and informers
// (wrapped per instance), its initializers, each plugin's configuration from the
// admission configuration file, and the channel closed when the server drains,
// which stops every instance.
func (s *Selectors) Set(kube kubernetes.Interface, f informers.SharedInformerFactory, initializer InitializerFunc, config func(plugin string) ([]byte, error), stop <-chan struct{}) {
	base, cancel := context.WithCancel(context.Background())
	go func() {
		<-stop
		cancel()
	}()
	s.setup.Store(&selectorSetup{base: base, kube: kube, informers: f, initializer: initializer, config: config})
}

// pool holds the project instances of one selector plugin.
type pool struct {
	name      string
	mutates   bool
	base      admission.Interface
	newPlugin func(io.Reader) (admission.Interface, error)
	selectors *Selectors
	idle      chan *instance
	// slots holds a token per instance built.
	slots chan struct{}
	// perProject counts each project's requests; an entry exists only while
	// the project has a request here, so it is bounded by requests in flight.
	mu         sync.Mutex
	perProject map[string]*projectSlot
	// generation counts the changes to the configuration the plugin compiles
	// that the pool's handlers have seen (watched registers them, once); it
	// stays 0 for plugins that read theirs on each request.
	generation atomic.Uint64
	watched    sync.Once
}

func newPool(name string, base admission.Interface, s *Selectors) *pool {
	return &pool{name: name, mutates: mutating[name], base: base, newPlugin: selectorPlugins[name], selectors: s,
		idle: make(chan *instance, MaxInstancesPerPlugin), slots: make(chan struct{}, MaxInstancesPerPlugin),
		perProject: map[string]*projectSlot{}}
}

// instance is one upstream plugin bound to the request it is serving.
type instance struct {
	plugin admission.Interface
	bound  *binding
	// version is that of the plugin's configuration when it was built; stop
	// ends its background work.
	version uint64
	stop    context.CancelFunc
}

var (
	_ admission.MutationInterface   = &pool{}
	_ admission.ValidationInterface = &pool{}
)

func (p *pool) Handles(op admission.Operation) bool { return p.base.Handles(op) }

func (p *pool) Admit(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if !p.mutates {
		return nil
	}
	return p.serve(ctx, func(plugin admission.Interface) error {
		if m, ok := plugin.(admission.MutationInterface); ok && m.Handles(a.GetOperation()) {
			return m.Admit(ctx, a, o)
		}
		return nil
	})
}

func (p *pool) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	if p.mutates {
		return nil
	}
	return p.serve(ctx, func(plugin admission.Interface) error {
		if v, ok := plugin.(admission.ValidationInterface); ok && v.Handles(a.GetOperation()) {
			return v.Validate(ctx, a, o)
		}
		return nil
	})
}

// serve runs f on an instance bound to ctx's tenant. The instance reads namespaces
// only while f runs: the upstream plugins match selectors before they return.
func (p *pool) serve(ctx context.Context, f func(admission.Interface) error) error {
	t := tenancy.From(ctx)
	project := t.ID
	if project == "" {
		project = t.Name
	}
	release, err := p.enter(ctx, project)
	if err != nil {
		return err
	}
	defer release()
	in, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	in.bound.ctx.Store(&ctx)
	defer func() {
		in.bound.ctx.Store(nil)
		p.idle <- in
	}()
	return f(in.plugin)
}

// enter waits until project holds fewer than MaxInstancesPerProject instances.
func (p *pool) enter(ctx context.Context, project string) (func(), error) {
	p.mu.Lock()
	slot, ok := p.perProject[project]
	if !ok {
		slot = &projectSlot{tokens: make(chan struct{}, MaxInstancesPerProject)}
		p.perProject[project] = slot
	}
	slot.users++
	p.mu.Unlock()
	leave := func() {
		p.mu.Lock()
		if slot.users--; slot.users == 0 {
			delete(p.perProject, project)
		}
		p.mu.Unlock()
	}
	select {
	case slot.tokens <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("waiting for admission plugin %s", p.name), 0)
	}
	return func() {
		<-slot.tokens
		leave()
	}, nil
}

// projectSlot counts one project's requests in a pool: users, waiting or
// served, keep it; tokens are the instances it holds.
type projectSlot struct {
	users  int
	tokens chan struct{}
}

// acquire takes an idle instance built at the current configuration, stopping
// older ones, or builds one if the pool has room.
func (p *pool) acquire(ctx context.Context) (*instance, error) {
	for {
		current := p.version()
		var in *instance
		select {
		case in = <-p.idle:
		default:
			select {
			case in = <-p.idle:
			case p.slots <- struct{}{}:
				in, err := p.build(current)
				if err != nil {
					<-p.slots
					return nil, apierrors.NewInternalError(fmt.Errorf("admission plugin %s for projects: %w", p.name, err))
				}
				return in, nil
			case <-ctx.Done():
				return nil, apierrors.NewTimeoutError(fmt.Sprintf("waiting for admission plugin %s", p.name), 0)
			}
		}
		if in.version == current {
			return in, nil
		}
		in.stop()
		<-p.slots
	}
}

// version is the generation of the configuration the plugin compiles.
func (p *pool) version() uint64 {
	if setup := p.selectors.setup.Load(); setup != nil {
		p.watched.Do(func() { p.watch(setup) })
	}
	return p.generation.Load()
}

// watch counts the changes to the plugin's compiled configuration, with one
// handler per informer for the server's lifetime. The informers' stores hold
// a change before their handlers see it, so an instance built at a generation
// compiles at least what that generation counted.
func (p *pool) watch(setup *selectorSetup) {
	configuration := compiled[p.name]
	if configuration == nil {
		return
	}
	bump := func(any) { p.generation.Add(1) }
	for _, inf := range configuration(setup.informers) {
		// Fails only for an informer already stopped: the server is draining.
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: bump, DeleteFunc: bump,
			UpdateFunc: func(oldObj, newObj any) {
				if specChanged(oldObj, newObj) {
					bump(newObj)
				}
			}})
	}
	// Those the server's own plugins asked for already run; start any other.
	setup.informers.StartWithContext(setup.base)
}

// build makes an instance the way the server made its own, with the namespace
// lister and client swapped for the bound ones.
func (p *pool) build(version uint64) (*instance, error) {
	setup := p.selectors.setup.Load()
	if setup == nil {
		return nil, errors.New("not configured yet")
	}
	cfg, err := setup.config(p.name)
	if err != nil {
		return nil, err
	}
	var r io.Reader
	if cfg != nil {
		r = bytes.NewReader(cfg)
	}
	plugin, err := p.newPlugin(r)
	if err != nil {
		return nil, err
	}
	b := &binding{namespaces: p.selectors.namespaces}
	ctx, stop := context.WithCancel(setup.base)
	setup.initializer(boundClient{Interface: setup.kube, b: b}, boundInformers{SharedInformerFactory: setup.informers, b: b, base: setup.base}, ctx.Done()).Initialize(plugin)
	if err := admission.ValidateInitialization(plugin); err != nil {
		stop()
		return nil, err
	}
	return &instance{plugin: plugin, bound: b, version: version, stop: stop}, nil
}

// binding is the request an instance serves; its namespace reads are the
// request's tenant's.
type binding struct {
	namespaces *Namespaces
	ctx        atomic.Pointer[context.Context]
}

func (b *binding) get(name string) (*corev1.Namespace, error) {
	ctx := b.ctx.Load()
	if ctx == nil {
		return nil, errors.New("namespace read outside of a request")
	}
	return b.namespaces.get(*ctx, name)
}

// boundInformers is the server's informer factory with a namespace lister that
// reads the bound request's project. Every other informer is the platform's.
type boundInformers struct {
	informers.SharedInformerFactory
	b *binding
	// base ends when the server drains.
	base context.Context
}

// Start starts what an instance asked for (a policy's params of a built-in
// kind) for the server's lifetime, not the instance's: the factory is the
// platform's, an informer it starts serves every plugin, and a stopped one is
// never started again.
func (f boundInformers) Start(<-chan struct{}) { f.SharedInformerFactory.StartWithContext(f.base) }

// StartWithContext is Start.
func (f boundInformers) StartWithContext(context.Context) {
	f.SharedInformerFactory.StartWithContext(f.base)
}

func (f boundInformers) Core() coreinformers.Interface {
	return boundCore{Interface: f.SharedInformerFactory.Core(), b: f.b}
}

type boundCore struct {
	coreinformers.Interface
	b *binding
}

func (c boundCore) V1() corev1informers.Interface {
	return boundCoreV1{Interface: c.Interface.V1(), b: c.b}
}

type boundCoreV1 struct {
	corev1informers.Interface
	b *binding
}

func (c boundCoreV1) Namespaces() corev1informers.NamespaceInformer {
	return boundNamespaceInformer{NamespaceInformer: c.Interface.Namespaces(), b: c.b}
}

// boundNamespaceInformer keeps the platform's informer (the plugins wait for it
// to sync) and replaces its lister.
type boundNamespaceInformer struct {
	corev1informers.NamespaceInformer
	b *binding
}

func (i boundNamespaceInformer) Lister() corelisters.NamespaceLister { return boundLister{b: i.b} }

type boundLister struct{ b *binding }

func (l boundLister) Get(name string) (*corev1.Namespace, error) { return l.b.get(name) }

func (l boundLister) List(labels.Selector) ([]*corev1.Namespace, error) {
	return nil, errors.New("admission does not list a project's namespaces")
}

// boundClient is the server's client whose namespace reads are the bound
// request's project's (the plugins fall back to it when the lister misses).
type boundClient struct {
	kubernetes.Interface
	b *binding
}

func (c boundClient) CoreV1() typedcorev1.CoreV1Interface {
	return boundCoreClient{CoreV1Interface: c.Interface.CoreV1(), b: c.b}
}

type boundCoreClient struct {
	typedcorev1.CoreV1Interface
	b *binding
}

func (c boundCoreClient) Namespaces() typedcorev1.NamespaceInterface {
	return boundNamespaceClient{NamespaceInterface: c.CoreV1Interface.Namespaces(), b: c.b}
}

type boundNamespaceClient struct {
	typedcorev1.NamespaceInterface
	b *binding
}

func (c boundNamespaceClient) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	return c.b.get(name)
}
