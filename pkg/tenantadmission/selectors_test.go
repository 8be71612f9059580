package tenantadmission

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"

	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantstate"
)

// projectNamespaces serves each project's namespaces: namespace "team" of
// project p is labelled owner=p; no project has any other namespace.
type projectNamespaces struct{}

func (projectNamespaces) New() runtime.Object { return &corev1.Namespace{} }
func (projectNamespaces) Destroy()            {}

func (projectNamespaces) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	t := tenancy.From(ctx)
	if !t.IsProject() || name != "team" {
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"owner": t.Name}}}, nil
}

// labelReader stands for an upstream selector plugin: it reads the request
// namespace's labels through the lister it was initialized with, and the client
// when the lister misses, as the upstream matcher does.
type labelReader struct {
	*admission.Handler
	lister corelisters.NamespaceLister
	client kubernetes.Interface
	// inside counts requests being validated, to observe the pool's bound.
	inside, most *int
	mu           *sync.Mutex
	hold         chan struct{}
	// holdOnly limits hold to one project's requests.
	holdOnly string
	// stop is the instance's drained notification.
	stop <-chan struct{}
}

func (l *labelReader) SetDrainedNotification(stop <-chan struct{}) { l.stop = stop }

func (l *labelReader) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	l.lister = f.Core().V1().Namespaces().Lister()
}
func (l *labelReader) SetExternalKubeClientSet(c kubernetes.Interface) { l.client = c }
func (l *labelReader) ValidateInitialization() error {
	if l.lister == nil || l.client == nil {
		return errors.New("not initialized")
	}
	return nil
}

func (l *labelReader) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	l.mu.Lock()
	*l.inside++
	*l.most = max(*l.most, *l.inside)
	l.mu.Unlock()
	defer func() { l.mu.Lock(); *l.inside--; l.mu.Unlock() }()
	if l.hold != nil && (l.holdOnly == "" || tenancy.From(ctx).Name == l.holdOnly) {
		<-l.hold
	}
	ns, err := l.lister.Get(a.GetNamespace())
	if apierrors.IsNotFound(err) {
		ns, err = l.client.CoreV1().Namespaces().Get(context.TODO(), a.GetNamespace(), metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("owner=%s", ns.Labels["owner"])
}

func testPool(t *testing.T, hold chan struct{}, holdOnly ...string) (*pool, *int) {
	return testPoolOf(t, "ValidatingAdmissionWebhook", hold, holdOnly...)
}

func testPoolOf(t *testing.T, plugin string, hold chan struct{}, holdOnly ...string) (*pool, *int) {
	t.Helper()
	tenant := tenantstate.New()
	tenant.Install("", map[string]rest.Storage{"namespaces": projectNamespaces{}})
	namespaces := NewNamespaces(tenant)
	s := NewSelectors(namespaces)
	// The platform's own namespace "team" is labelled owner=platform.
	platform := fake.NewSimpleClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: map[string]string{"owner": "platform"}}})
	f := informers.NewSharedInformerFactory(platform, 0)
	s.Set(platform, f, func(k kubernetes.Interface, f informers.SharedInformerFactory, stop <-chan struct{}) admission.PluginInitializer {
		return initializer.New(k, nil, f, nil, nil, nil, stop, nil)
	}, func(string) ([]byte, error) { return nil, nil }, t.Context().Done())
	inside, most := 0, 0
	mu := &sync.Mutex{}
	p := newPool(plugin, admission.NewHandler(admission.Create), s)
	p.newPlugin = func(io.Reader) (admission.Interface, error) {
		r := &labelReader{Handler: admission.NewHandler(admission.Create), inside: &inside, most: &most, mu: mu, hold: hold}
		if len(holdOnly) > 0 {
			r.holdOnly = holdOnly[0]
		}
		return r, nil
	}
	return p, &most
}

func attrs(ns string) admission.Attributes {
	return admission.NewAttributesRecord(nil, nil, corev1.SchemeGroupVersion.WithKind("ConfigMap"), ns, "x",
		corev1.SchemeGroupVersion.WithResource("configmaps"), "", admission.Create, nil, false, nil)
}

func TestProjectInstancesReadTheirRequestsProjectNamespaces(t *testing.T) {
	p, _ := testPool(t, nil)
	for _, tc := range []struct {
		project, namespace, want string
	}{
		{"a", "team", "owner=a"},
		{"b", "team", "owner=b"},
		// A namespace the project lacks is missing, even though the platform has one of that name.
		{"a", "other", `namespaces "other" not found`},
	} {
		ctx := tenancy.WithTenant(context.Background(), tenancy.ProjectTenant(tc.project))
		err := p.Validate(ctx, attrs(tc.namespace), nil)
		if err == nil || err.Error() != tc.want {
			t.Errorf("project %s, namespace %s: %v, want %s", tc.project, tc.namespace, err, tc.want)
		}
	}
	// Outside a request an instance reads nothing.
	in := <-p.idle
	if _, err := in.bound.get("team"); err == nil {
		t.Error("an idle instance read a namespace")
	}
}

func TestProjectInstancesAreBoundedAndEachServesOneRequest(t *testing.T) {
	hold := make(chan struct{})
	p, most := testPool(t, hold)
	const requests = MaxInstancesPerPlugin + 16
	errs := make(chan error, requests)
	for i := 0; i < requests; i++ {
		project := fmt.Sprintf("p%d", i)
		go func() {
			ctx, cancel := context.WithTimeout(tenancy.WithTenant(context.Background(), tenancy.ProjectTenant(project)), time.Minute)
			defer cancel()
			if err := p.Validate(ctx, attrs("team"), nil); err == nil || err.Error() != "owner="+project {
				errs <- fmt.Errorf("%s: %v", project, err)
				return
			}
			errs <- nil
		}()
	}
	// Every instance is built and busy; the rest of the requests wait.
	for len(p.slots) < MaxInstancesPerPlugin {
		time.Sleep(time.Millisecond)
	}
	close(hold)
	for i := 0; i < requests; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if *most > MaxInstancesPerPlugin || len(p.slots) != MaxInstancesPerPlugin {
		t.Errorf("%d requests at once on %d instances, bound %d", *most, len(p.slots), MaxInstancesPerPlugin)
	}

	// A request that cannot get an instance before its deadline is refused.
	ctx, cancel := context.WithCancel(tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("late")))
	var taken []*instance
	for len(taken) < MaxInstancesPerPlugin {
		taken = append(taken, <-p.idle)
	}
	cancel()
	if err := p.Validate(ctx, attrs("team"), nil); !apierrors.IsTimeout(err) {
		t.Errorf("waiting past the deadline: %v", err)
	}
}

// TestOneProjectHoldsAQuarterOfTheInstances: a project whose requests are held
// up (a slow webhook) holds at most MaxInstancesPerProject instances; another
// project's requests go through meanwhile.
func TestOneProjectHoldsAQuarterOfTheInstances(t *testing.T) {
	hold := make(chan struct{})
	p, most := testPool(t, hold, "noisy")
	const noisy = MaxInstancesPerProject + 8
	errs := make(chan error, noisy)
	for i := 0; i < noisy; i++ {
		go func() {
			ctx := tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("noisy"))
			errs <- p.Validate(ctx, attrs("team"), nil)
		}()
	}
	for len(p.slots) < MaxInstancesPerProject {
		time.Sleep(time.Millisecond)
	}
	quiet := tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("quiet"))
	if err := p.Validate(quiet, attrs("team"), nil); err == nil || err.Error() != "owner=quiet" {
		t.Fatalf("the quiet project waited behind the noisy one: %v", err)
	}
	close(hold)
	for i := 0; i < noisy; i++ {
		if err := <-errs; err == nil || err.Error() != "owner=noisy" {
			t.Error(err)
		}
	}
	if *most > MaxInstancesPerProject+1 {
		t.Errorf("%d requests at once, the noisy project's bound is %d", *most, MaxInstancesPerProject)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.perProject) != 0 {
		t.Errorf("projects with no request left entries: %v", p.perProject)
	}
}

// TestEachPluginServesItsOwnPhase: a validating plugin's pool takes no instance
// in the mutating phase, and the other way round.
func TestEachPluginServesItsOwnPhase(t *testing.T) {
	p, _ := testPool(t, nil)
	ctx := tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("a"))
	if err := p.Admit(ctx, attrs("team"), nil); err != nil || len(p.slots) != 0 {
		t.Fatalf("a validating plugin's mutating phase: %v, %d instances", err, len(p.slots))
	}
	m := newPool("MutatingAdmissionWebhook", admission.NewHandler(admission.Create), p.selectors)
	if err := m.Validate(ctx, attrs("team"), nil); err != nil || len(m.slots) != 0 {
		t.Fatalf("a mutating plugin's validating phase: %v, %d instances", err, len(m.slots))
	}
}

// TestPolicyInstancesNeverLagTheirConfiguration: an instance of a policy plugin
// built before a policy or binding changed is stopped and replaced when next
// taken, so no request is served by policies older than an earlier request's.
func TestPolicyInstancesNeverLagTheirConfiguration(t *testing.T) {
	p, _ := testPoolOf(t, validatingpolicy.PluginName, nil)
	ctx := tenancy.WithTenant(context.Background(), tenancy.ProjectTenant("a"))
	served := func() *labelReader {
		t.Helper()
		if err := p.Validate(ctx, attrs("team"), nil); err == nil || err.Error() != "owner=a" {
			t.Fatalf("validate: %v", err)
		}
		in := <-p.idle
		p.idle <- in
		return in.plugin.(*labelReader)
	}
	stopped := func(l *labelReader) bool {
		select {
		case <-l.stop:
			return true
		default:
			return false
		}
	}
	first := served()
	if again := served(); again != first || stopped(first) {
		t.Fatal("an instance was replaced with its configuration unchanged")
	}
	// Changes reach the pool through the platform's informers, as from the API.
	api := p.selectors.setup.Load().kube.AdmissionregistrationV1()
	bg := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Generation: 1}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "b", Generation: 1}}
	updated := policy.DeepCopy()
	updated.Generation = 2
	previous := first
	for _, change := range []struct {
		name string
		do   func() error
	}{
		{"a policy added", func() error {
			_, err := api.ValidatingAdmissionPolicies().Create(bg, policy, metav1.CreateOptions{})
			return err
		}},
		{"a binding added", func() error {
			_, err := api.ValidatingAdmissionPolicyBindings().Create(bg, binding, metav1.CreateOptions{})
			return err
		}},
		{"a policy's spec changed", func() error {
			_, err := api.ValidatingAdmissionPolicies().Update(bg, updated, metav1.UpdateOptions{})
			return err
		}},
		{"a binding deleted", func() error { return api.ValidatingAdmissionPolicyBindings().Delete(bg, "b", metav1.DeleteOptions{}) }},
		{"a policy deleted", func() error { return api.ValidatingAdmissionPolicies().Delete(bg, "p", metav1.DeleteOptions{}) }},
	} {
		before := p.version()
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for p.version() == before {
			if time.Now().After(deadline) {
				t.Fatalf("after %s the pool's handlers saw no change", change.name)
			}
			time.Sleep(time.Millisecond)
		}
		next := served()
		if next == previous || !stopped(previous) || stopped(next) {
			t.Fatalf("after %s the instance built before it served on (replaced %v, stopped %v)", change.name, next != previous, stopped(previous))
		}
		if len(p.slots) != 1 {
			t.Fatalf("after %s: %d instances, want the one replaced", change.name, len(p.slots))
		}
		previous = next
	}
	// The status the server writes after type-checking a policy leaves its
	// generation, and the instances, alone.
	status := updated.DeepCopy()
	status.Status.ObservedGeneration = 2
	if specChanged(updated, status) || !specChanged(policy, updated) {
		t.Error("specChanged does not follow the generation")
	}
}
