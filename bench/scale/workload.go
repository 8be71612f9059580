package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// organization owns every project the harness creates in Milo.
const organization = "bench"

var (
	organizationsGVR  = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "organizations"}
	projectsGVR       = schema.GroupVersionResource{Group: "resourcemanager.miloapis.com", Version: "v1alpha1", Resource: "projects"}
	policyBindingsGVR = schema.GroupVersionResource{Group: "iam.miloapis.com", Version: "v1alpha1", Resource: "policybindings"}
)

func projectName(i int) string { return fmt.Sprintf("p%06d", i) }

// kib is the 1 KiB payload of each ConfigMap.
var kib = strings.Repeat("x", 1024)

// prepare creates what every project needs before the first one: Milo's organization.
func prepare(ctx context.Context, s *system) error {
	if !s.isMilo() {
		return nil
	}
	dyn, err := dynamic.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(organizationsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Organization", "metadata": map[string]any{"name": organization}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Projects can be created once the organization is Ready.
	err = poll(ctx, time.Minute, func() (bool, error) {
		org, err := dyn.Resource(organizationsGVR).Get(ctx, organization, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(org.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	// The harness's ordinary user owns the organization, so Milo IAM lets it
	// fill every project.
	_, err = dyn.Resource(policyBindingsGVR).Namespace("organization-"+organization).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "iam.miloapis.com/v1alpha1", "kind": "PolicyBinding", "metadata": map[string]any{"name": "bench-owner"},
		"spec": map[string]any{
			"roleRef":          map[string]any{"name": "owner", "namespace": "milo-system"},
			"subjects":         []any{map[string]any{"kind": "User", "name": benchUser}},
			"resourceSelector": map[string]any{"resourceRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Organization", "name": organization}},
		}}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Wait until Milo IAM has the binding: ask as the user, in the organization.
	cfg := rest.CopyConfig(s.user)
	cfg.Host = strings.TrimSuffix(cfg.Host, "/") + tenancy.OrganizationPath(organization)
	user, err := kubernetes.NewForConfigAndClient(cfg, s.userHTTP)
	if err != nil {
		return err
	}
	return poll(ctx, time.Minute, func() (bool, error) {
		review, err := user.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: "resourcemanager.miloapis.com", Resource: "projects", Verb: "create"}}}, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			// Until IAM has the binding, the organization's context
			// refuses the user altogether: not yet, not a failure.
			return false, nil
		}
		return err == nil && review.Status.Allowed, err
	})
}

// poll calls f every 100 ms until it reports done, fails, or timeout passes.
func poll(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := f()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// createProject makes project i usable: in Milo a Project, whose namespace
// default the project controller creates, written to by an ordinary user, for
// whom the project opens once it is Ready (until then its requests answer 503
// with Retry-After); in the baseline a namespace. Then 3 ConfigMaps of 1 KiB
// and a Secret in it. When it returns, the project is Ready and filled.
func createProject(ctx context.Context, s *system, dyn dynamic.Interface, i int) error {
	return createNamedProject(ctx, s, dyn, projectName(i))
}

// createNamedProject is createProject for a project of any name.
func createNamedProject(ctx context.Context, s *system, dyn dynamic.Interface, name string) error {
	if s.isMilo() {
		_, err := dyn.Resource(projectsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": map[string]any{"name": name},
			"spec": map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": organization}}}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	client, err := s.writerClient(name)
	if err != nil {
		return err
	}
	ns := s.namespaceOf(name)
	if !s.isMilo() {
		if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for c := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", c)}, Data: map[string]string{"payload": kib}}
		if err := retryUntilOpen(ctx, func() error {
			_, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			return err
		}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "secret"}, StringData: map[string]string{"token": "s3cr3t"}}
	if err := retryUntilOpen(ctx, func() error {
		_, err := client.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
		return err
	}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// retryUntilOpen repeats f while a new project is not open yet: client-go
// retries a 503 with Retry-After ten times, which a busy server can exceed.
func retryUntilOpen(ctx context.Context, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || !apierrors.IsServiceUnavailable(err) || attempt == 30 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// parallel runs f for every i in [from, to) on workers goroutines, reporting
// progress every few seconds, and returns the first error.
func parallel(ctx context.Context, what string, from, to, workers int, f func(i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next, done := atomic.Int64{}, atomic.Int64{}
	next.Store(int64(from))
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("%s %d: %w", what, i, err); cancel() })
					return
				}
				done.Add(1)
			}
		})
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	began := time.Now()
	for {
		select {
		case <-finished:
			return firstErr
		case <-time.After(5 * time.Second):
			n := done.Load()
			progress("  %s: %d/%d (%.0f/s)", what, n, to-from, float64(n)/time.Since(began).Seconds())
		}
	}
}

// latencies are sorted durations of one operation.
type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	return l[min(len(l)-1, int(q*float64(len(l))))]
}

// measureLatency times GET, LIST (one namespace), CREATE and UPDATE of
// ConfigMaps in random projects among the first n, with a few requests in
// flight at once. What it creates it deletes again, untimed.
func measureLatency(ctx context.Context, s *system, n, samples int, rng *rand.Rand) (map[string]latencies, error) {
	type sample struct {
		project int
		k       int
	}
	plan := make([]sample, samples)
	for k := range plan {
		plan[k] = sample{project: rng.IntN(n), k: k}
	}
	out := map[string]latencies{}
	var mu sync.Mutex
	record := func(op string, d time.Duration) {
		mu.Lock()
		out[op] = append(out[op], d)
		mu.Unlock()
	}
	timed := func(op string, f func() error) error {
		began := time.Now()
		err := f()
		record(op, time.Since(began))
		return err
	}
	err := parallel(ctx, s.name+" latency samples", 0, samples, 4, func(k int) error {
		name := projectName(plan[k].project)
		client, err := s.projectClient(name)
		if err != nil {
			return err
		}
		cms := client.CoreV1().ConfigMaps(s.namespaceOf(name))
		if err := timed("get", func() error { _, err := cms.Get(ctx, "cm-0", metav1.GetOptions{}); return err }); err != nil {
			return err
		}
		if err := timed("list", func() error { _, err := cms.List(ctx, metav1.ListOptions{}); return err }); err != nil {
			return err
		}
		made := fmt.Sprintf("latency-%d", k)
		if err := timed("create", func() error {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: made}, Data: map[string]string{"payload": kib}}, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
		if err := timed("update", func() error {
			_, err := cms.Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-1"}, Data: map[string]string{"payload": kib, "sample": fmt.Sprint(k)}}, metav1.UpdateOptions{})
			return err
		}); err != nil {
			return err
		}
		return cms.Delete(ctx, made, metav1.DeleteOptions{})
	})
	for _, l := range out {
		slices.Sort(l)
	}
	return out, err
}

// measureWatch opens a watch of ConfigMaps in every tenth project among the
// first n, then times, for random watched projects, how long an update takes
// to arrive as a watch event. It returns the sorted delivery times and how
// many watches were open.
func measureWatch(ctx context.Context, s *system, n, samples int, rng *rand.Rand) (latencies, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var watched []int
	for i := 0; i < n; i += 10 {
		watched = append(watched, i)
	}
	events := make([]chan string, len(watched))
	watches := make([]watch.Interface, len(watched))
	defer func() {
		for _, w := range watches {
			if w != nil {
				w.Stop()
			}
		}
	}()
	err := parallel(ctx, s.name+" watches opened", 0, len(watched), 32, func(k int) error {
		name := projectName(watched[k])
		client, err := s.projectClient(name)
		if err != nil {
			return err
		}
		w, err := client.CoreV1().ConfigMaps(s.namespaceOf(name)).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=cm-2"})
		if err != nil {
			return err
		}
		watches[k], events[k] = w, make(chan string, 16)
		go forwardValues(w, events[k])
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	var out latencies
	for sample := range samples {
		k := rng.IntN(len(watched))
		name := projectName(watched[k])
		client, err := s.projectClient(name)
		if err != nil {
			return nil, 0, err
		}
		value := fmt.Sprintf("watch-%d", sample)
		began := time.Now()
		if _, err := client.CoreV1().ConfigMaps(s.namespaceOf(name)).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-2"},
			Data: map[string]string{"payload": kib, "sample": value}}, metav1.UpdateOptions{}); err != nil {
			return nil, 0, err
		}
		if err := awaitValue(ctx, events[k], value); err != nil {
			return nil, 0, fmt.Errorf("watch of %s: %w", name, err)
		}
		out = append(out, time.Since(began))
	}
	slices.Sort(out)
	return out, len(watched), nil
}

// forwardValues sends the "sample" value of every modified ConfigMap.
func forwardValues(w watch.Interface, to chan<- string) {
	for ev := range w.ResultChan() {
		if cm, ok := ev.Object.(*corev1.ConfigMap); ok && ev.Type == watch.Modified {
			select {
			case to <- cm.Data["sample"]:
			default: // nobody waits for this project now
			}
		}
	}
}

func awaitValue(ctx context.Context, from <-chan string, value string) error {
	timeout := time.After(time.Minute)
	for {
		select {
		case v := <-from:
			if v == value {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("no event for %s within a minute", value)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// deleteProjects deletes the first n projects and returns once they are gone:
// in Milo, Projects are gone once their contents are deleted and their keys
// purged; in the baseline, once kube-controller-manager's namespace
// controller has emptied and removed each namespace, or, when it runs no
// controllers, the harness empties each namespace and finalizes it, as the
// namespace controller would. What is
// left is checked by name, a few at a time, not by listing every project:
// that would cost the server more than what is measured.
func deleteProjects(ctx context.Context, s *system, n, workers int) error {
	dyn, err := dynamic.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return err
	}
	platform, err := kubernetes.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return err
	}
	err = parallel(ctx, s.name+" deletions", 0, n, workers, func(i int) error {
		name := projectName(i)
		if s.isMilo() {
			err := dyn.Resource(projectsGVR).Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		if s.hasControllers() {
			err := platform.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return err
		}
		return deleteNamespace(ctx, platform, name)
	})
	if err != nil {
		return err
	}
	gone := func(i int) (bool, error) {
		var err error
		if s.isMilo() {
			_, err = dyn.Resource(projectsGVR).Get(ctx, projectName(i), metav1.GetOptions{})
		} else {
			_, err = platform.CoreV1().Namespaces().Get(ctx, projectName(i), metav1.GetOptions{})
		}
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	// Projects go roughly in the order they were deleted: wait for each in turn.
	next := 0
	return poll(ctx, 2*time.Hour, func() (bool, error) {
		for next < n {
			ok, err := gone(next)
			if err != nil || !ok {
				progress("  %s: %d projects still being deleted", s.name, n-next)
				return false, err
			}
			next++
		}
		return true, nil
	})
}

func deleteNamespace(ctx context.Context, c kubernetes.Interface, ns string) error {
	if err := c.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := c.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return err
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	obj, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	obj.Spec.Finalizers = nil
	_, err = c.CoreV1().Namespaces().Finalize(ctx, obj, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// measureDeletion times, in random projects among the first n, how long the
// controllers take to remove what is deleted, with a few samples in flight:
//
//   - "namespace": a new namespace (in the baseline, where a project is a
//     namespace, a new namespace of the platform) holding 3 ConfigMaps, from
//     the DELETE's answer to the namespace's removal;
//   - "owner": a ConfigMap owning another (ownerReferences with its UID),
//     from the owner's DELETE (background propagation) answering to the
//     dependent's removal.
//
// A removal is seen as the DELETED event of a watch opened before the DELETE
// (field selector on the name), which arrives within milliseconds of the key's
// deletion. A sample not done within timeout counts as timeout, and in the
// returned count.
func measureDeletion(ctx context.Context, s *system, n, samples int, rng *rand.Rand, timeout time.Duration) (map[string]latencies, int, error) {
	projects := make([]int, samples)
	for k := range projects {
		projects[k] = rng.IntN(n)
	}
	out := map[string]latencies{}
	var mu sync.Mutex
	timedOut := 0
	record := func(op string, d time.Duration, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		out[op] = append(out[op], d)
		if !ok {
			timedOut++
		}
	}
	err := parallel(ctx, s.name+" deletion samples", 0, samples, 4, func(k int) error {
		project := projectName(projects[k])
		client, err := s.projectClient(project)
		if err != nil {
			return err
		}
		// A namespace with 3 ConfigMaps.
		nsName := fmt.Sprintf("deletion-%d-%d", n, k)
		ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating namespace %s in %s: %w", nsName, project, err)
		}
		for c := range 3 {
			if _, err := client.CoreV1().ConfigMaps(nsName).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", c)},
				Data: map[string]string{"payload": kib}}, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		namespaces := client.CoreV1().Namespaces()
		d, ok, err := timeRemoval(ctx, ns.ResourceVersion, nsName, timeout,
			func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return namespaces.Watch(ctx, opts)
			},
			func(ctx context.Context) (string, error) {
				obj, err := namespaces.Get(ctx, nsName, metav1.GetOptions{})
				if err != nil {
					return "", err
				}
				return obj.ResourceVersion, nil
			},
			func(ctx context.Context) error { return namespaces.Delete(ctx, nsName, metav1.DeleteOptions{}) })
		if err != nil {
			return fmt.Errorf("namespace %s in %s: %w", nsName, project, err)
		}
		record("namespace", d, ok)

		// An owner and its dependent.
		cms := client.CoreV1().ConfigMaps(s.namespaceOf(project))
		ownerName, depName := fmt.Sprintf("owner-%d-%d", n, k), fmt.Sprintf("dependent-%d-%d", n, k)
		owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ownerName}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		dep, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: depName, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "v1", Kind: "ConfigMap", Name: ownerName, UID: owner.UID}}}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		background := metav1.DeletePropagationBackground
		d, ok, err = timeRemoval(ctx, dep.ResourceVersion, depName, timeout,
			func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
				return cms.Watch(ctx, opts)
			},
			func(ctx context.Context) (string, error) {
				obj, err := cms.Get(ctx, depName, metav1.GetOptions{})
				if err != nil {
					return "", err
				}
				return obj.ResourceVersion, nil
			},
			func(ctx context.Context) error {
				return cms.Delete(ctx, ownerName, metav1.DeleteOptions{PropagationPolicy: &background})
			})
		if err != nil {
			return fmt.Errorf("dependent %s in %s: %w", depName, project, err)
		}
		record("owner", d, ok)
		return nil
	})
	for _, l := range out {
		slices.Sort(l)
	}
	return out, timedOut, err
}

// timeRemoval opens a watch of the object name from resource version rv,
// calls del, and returns the time from del's return to the object's DELETED
// event. Should the watch end early, the object is read again (gone: the time
// is taken then) and watched anew. After timeout it returns timeout, false.
func timeRemoval(ctx context.Context, rv, name string, timeout time.Duration,
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error),
	get func(context.Context) (string, error), del func(context.Context) error) (time.Duration, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	open := func(rv string) (watch.Interface, error) {
		return watchFn(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv, AllowWatchBookmarks: false})
	}
	w, err := open(rv)
	if err != nil {
		return 0, false, err
	}
	defer func() { w.Stop() }()
	if err := del(ctx); err != nil {
		return 0, false, err
	}
	deleted := time.Now()
	deadline := time.After(timeout)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if ok && ev.Type == watch.Deleted {
				return time.Since(deleted), true, nil
			}
			if ok && ev.Type != watch.Error {
				continue
			}
			// The watch ended or failed: read the object, and watch again from there.
			w.Stop()
			rv, err := get(ctx)
			if apierrors.IsNotFound(err) {
				return time.Since(deleted), true, nil
			}
			if err != nil {
				return 0, false, err
			}
			if w, err = open(rv); err != nil {
				return 0, false, err
			}
		case <-deadline:
			return timeout, false, nil
		case <-ctx.Done():
			return 0, false, ctx.Err()
		}
	}
}

// bootstrap is what a project holds that its creator did not create.
type bootstrap struct {
	// Objects by kind, and their size encoded in protobuf as the server
	// stores them (what etcd holds, but for its key and a few bytes of envelope).
	Objects map[string]int
	Count   int
	Bytes   int
}

// measureBootstrap counts the objects of the first project the harness did not
// create: in Milo its namespaces default and kube-system, their ServiceAccounts
// and kube-root-ca.crt ConfigMaps, and whatever else the project's bootstrap
// stores (RBAC objects, Secrets); in the baseline, where the project is a
// namespace the harness creates, what the controllers add in it.
func measureBootstrap(ctx context.Context, s *system) (bootstrap, error) {
	b := bootstrap{Objects: map[string]int{}}
	project := projectName(0)
	c, err := s.projectClient(project)
	if err != nil {
		return b, err
	}
	ns := s.namespaceOf(project)
	if s.isMilo() {
		ns = "" // every namespace of the project
	}
	mine := func(kind, namespace, name string) bool {
		if namespace != s.namespaceOf(project) {
			return false
		}
		return (kind == "ConfigMap" && strings.HasPrefix(name, "cm-")) || (kind == "Secret" && name == "secret")
	}
	add := func(kind, namespace, name string, size int) {
		if !mine(kind, namespace, name) {
			b.Objects[kind]++
			b.Count++
			b.Bytes += size
		}
	}
	if s.isMilo() {
		list, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			return b, err
		}
		for _, o := range list.Items {
			add("Namespace", "", o.Name, o.Size())
		}
		crs, err := c.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			return b, err
		}
		for _, o := range crs.Items {
			add("ClusterRole", "", o.Name, o.Size())
		}
		crbs, err := c.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
		if err != nil {
			return b, err
		}
		for _, o := range crbs.Items {
			add("ClusterRoleBinding", "", o.Name, o.Size())
		}
	}
	sas, err := c.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return b, err
		}
	}
	for _, o := range sas.Items {
		add("ServiceAccount", o.Namespace, o.Name, o.Size())
	}
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return b, err
		}
	}
	for _, o := range cms.Items {
		add("ConfigMap", o.Namespace, o.Name, o.Size())
	}
	secrets, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return b, err
		}
	}
	for _, o := range secrets.Items {
		add("Secret", o.Namespace, o.Name, o.Size())
	}
	roles, err := c.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return b, err
		}
	}
	for _, o := range roles.Items {
		add("Role", o.Namespace, o.Name, o.Size())
	}
	rbs, err := c.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			return b, err
		}
	}
	for _, o := range rbs.Items {
		add("RoleBinding", o.Namespace, o.Name, o.Size())
	}
	return b, nil
}
