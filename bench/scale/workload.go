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
	name := projectName(i)
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
// purged; in the baseline, with no namespace controller, the harness empties
// each namespace and finalizes it, as the namespace controller would. What is
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
