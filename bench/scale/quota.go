package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"go.miloapis.com/milo/pkg/tenancy"
)

// quotaOptions size the measurement of provider quotas (Milo only).
type quotaOptions struct {
	// Projects each get one grant (namespaces per project), so one bucket.
	Projects int
	// Created projects are timed in an organization with a projects quota and in one without.
	Created int
	// Samples ConfigMap creates are timed per series.
	Samples int
	// Profiles keeps a CPU profile of the server over each timed series,
	// quota-{series}.cpu.pprof beside the report.
	Profiles bool `json:",omitempty"`
}

// quotaResult is the measurement of provider quotas.
type quotaResult struct {
	Options quotaOptions
	// CreateOff, CreateUncharged and CreateCharged time a ConfigMap create
	// in a project: with no claim policy for ConfigMaps; with one, the
	// project holding no grant for it; and charged, a claim stored per
	// create (ms).
	CreateOff, CreateUncharged, CreateCharged quantiles
	// CreateMetered times the same create with the project's objects and
	// stored bytes metered by the storage layer (the built-in grants).
	CreateMetered quantiles
	// PairedUnmetered and PairedMetered time creates taken in turn in a
	// project not metered and in the metered one: the meter's own cost
	// (on etcd, the object count moved in the create's transaction), free
	// of the drift between series.
	PairedUnmetered, PairedMetered quantiles
	// PairedUncharged and PairedCharged time creates taken in turn in a
	// project without a grant and in the one charged, under the same
	// policy: the claim's own cost, free of the drift between series.
	PairedUncharged, PairedCharged quantiles
	// RoundsOff and RoundsCharged time creates in the charged project in
	// rounds, its claim policy disabled, then enabled, in the order off,
	// on, on, off, twice: quota on against no quota at all, on the same
	// server, free of the drift between series.
	RoundsOff, RoundsCharged quantiles
	// Before and Granted are the server before and after Projects grants (and their buckets and claims).
	Before, Granted resources
	// ProjectsPerSecondOff and ProjectsPerSecondOn are Project creations
	// (to created) in an organization without and with a projects-per-organization grant;
	// ReadyPerSecondOff and ReadyPerSecondOn the same to every project Ready.
	ProjectsPerSecondOff, ProjectsPerSecondOn, ReadyPerSecondOff, ReadyPerSecondOn float64
}

var (
	namespacesGVR         = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	quotaGrantsGVR        = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "resourcegrants"}
	quotaBucketsGVR       = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "allowancebuckets"}
	quotaRegistrationsGVR = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "resourceregistrations"}
	quotaPoliciesGVR      = schema.GroupVersionResource{Group: "quota.miloapis.com", Version: "v1alpha1", Resource: "claimcreationpolicies"}
)

func quotaGrant(ns, name, kind, consumer, resourceType string, amount int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "quota.miloapis.com/v1alpha1", "kind": "ResourceGrant",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{"consumerRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": kind, "name": consumer},
			"allowances": []any{map[string]any{"resourceType": resourceType, "buckets": []any{map[string]any{"amount": amount}}}}}}}
}

// measureQuota times ConfigMap creates without and with quota, measures
// the heap a grant, its bucket and its claims cost per project, and times
// project creation in an organization with and without a projects quota.
func measureQuota(ctx context.Context, s *system, o quotaOptions, settle time.Duration, dir string) (*quotaResult, error) {
	r := &quotaResult{Options: o}
	admin, err := dynamic.NewForConfigAndClient(s.config, s.http)
	if err != nil {
		return nil, err
	}
	first := projectName(0)
	user, err := s.writerClient(first)
	if err != nil {
		return nil, err
	}
	ns := s.namespaceOf(first)
	series := 0
	seriesNames := []string{"warm-up", "off", "metered", "uncharged", "charged"}
	timeCreates := func() (quantiles, error) {
		series++
		if o.Profiles && series <= len(seriesNames) && series > 1 {
			// About the series' length: a create takes a few milliseconds.
			d := time.Duration(o.Samples) * 2 * time.Millisecond
			done := make(chan struct{})
			go func() {
				defer close(done)
				s.profile(ctx, "/debug/pprof/profile", d, "quota-"+seriesNames[series-1]+".cpu.pprof")
			}()
			defer func() { <-done }()
		}
		var l latencies
		for i := range o.Samples {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quota-%d-%d", series, i)}, Data: map[string]string{"payload": kib}}
			began := time.Now()
			if _, err := user.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return quantiles{}, err
			}
			l = append(l, time.Since(began))
		}
		slices.Sort(l)
		return quantiles{P50: ms(l.quantile(0.5)), P99: ms(l.quantile(0.99))}, nil
	}
	// A warm-up series first: the server has just restarted.
	if _, err = timeCreates(); err != nil {
		return nil, err
	}
	if r.CreateOff, err = timeCreates(); err != nil {
		return nil, err
	}
	// The project's objects and bytes metered: the built-in grants, taken
	// away again once timed.
	orgNS := tenancy.OrganizationNamespace(organization)
	buckets := admin.Resource(quotaBucketsGVR).Namespace(orgNS)
	for _, t := range []string{"objects", "bytes"} {
		if _, err := admin.Resource(quotaGrantsGVR).Namespace(orgNS).Create(ctx, quotaGrant(orgNS, "bench-stored-"+t, "Project", first, "storage.miloapis.com/"+t, 1<<50), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		list, err := buckets.List(ctx, metav1.ListOptions{FieldSelector: "spec.consumerRef.name=" + first + ",spec.resourceType=storage.miloapis.com/bytes"})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		allocated, _, _ := unstructured.NestedInt64(list.Items[0].Object, "status", "allocated")
		return allocated > 0, nil
	}); err != nil {
		return nil, fmt.Errorf("no stored-bytes bucket for %s: %w", first, err)
	}
	if r.CreateMetered, err = timeCreates(); err != nil {
		return nil, err
	}
	other := projectName(1)
	otherUser, err := s.writerClient(other)
	if err != nil {
		return nil, err
	}
	// inTurn creates n ConfigMaps in the other project, then one in the
	// first, in turn, and times each.
	inTurn := func(prefix string, n int) (plain, first quantiles, err error) {
		var a, b latencies
		for i := range n {
			for _, c := range []struct {
				client kubernetes.Interface
				ns     string
				into   *latencies
			}{{otherUser, s.namespaceOf(other), &a}, {user, ns, &b}} {
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i)}, Data: map[string]string{"payload": kib}}
				began := time.Now()
				if _, err := c.client.CoreV1().ConfigMaps(c.ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					return quantiles{}, quantiles{}, err
				}
				*c.into = append(*c.into, time.Since(began))
			}
		}
		slices.Sort(a)
		slices.Sort(b)
		if len(a) == 0 {
			return quantiles{}, quantiles{}, nil
		}
		return quantiles{P50: ms(a.quantile(0.5)), P99: ms(a.quantile(0.99))}, quantiles{P50: ms(b.quantile(0.5)), P99: ms(b.quantile(0.99))}, nil
	}
	if o.Projects > 1 {
		if r.PairedUnmetered, r.PairedMetered, err = inTurn("quota-metered", o.Samples); err != nil {
			return nil, err
		}
		progress("[milo] ConfigMap creates in turn, p50/p99: %.2f/%.2f ms not metered, %.2f/%.2f ms objects and bytes metered (%.2f×)",
			r.PairedUnmetered.P50, r.PairedUnmetered.P99, r.PairedMetered.P50, r.PairedMetered.P99, r.PairedMetered.P50/max(r.PairedUnmetered.P50, 0.001))
	}
	for _, t := range []string{"objects", "bytes"} {
		if err := admin.Resource(quotaGrantsGVR).Namespace(orgNS).Delete(ctx, "bench-stored-"+t, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}

	// A registration and claim policy of ConfigMaps, charged to their project.
	const resourceType = "bench.example/configmaps"
	registration := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "quota.miloapis.com/v1alpha1", "kind": "ResourceRegistration",
		"metadata": map[string]any{"name": "bench-configmaps"},
		"spec": map[string]any{"consumerType": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project"}, "type": "Entity",
			"resourceType": resourceType, "baseUnit": "configmap", "displayUnit": "configmap", "unitConversionFactor": int64(1),
			"claimingResources": []any{map[string]any{"kind": "ConfigMap"}}}}}
	policy := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "quota.miloapis.com/v1alpha1", "kind": "ClaimCreationPolicy",
		"metadata": map[string]any{"name": "bench-configmaps"},
		"spec": map[string]any{"trigger": map[string]any{"resource": map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}},
			"target": map[string]any{"resourceClaimTemplate": map[string]any{"metadata": map[string]any{},
				"spec": map[string]any{"requests": []any{map[string]any{"resourceType": resourceType, "amount": int64(1)}}}}}}}}
	defer func() {
		_ = admin.Resource(quotaPoliciesGVR).Delete(context.Background(), "bench-configmaps", metav1.DeleteOptions{})
		_ = admin.Resource(quotaRegistrationsGVR).Delete(context.Background(), "bench-configmaps", metav1.DeleteOptions{})
	}()
	for gvr, obj := range map[schema.GroupVersionResource]*unstructured.Unstructured{quotaRegistrationsGVR: registration, quotaPoliciesGVR: policy} {
		if _, err := admin.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	// The policy is in the ledger once a create in a project with a
	// grant of 0 is refused; that project is the harness's last.
	probe := projectName(o.Projects - 1)
	if _, err := admin.Resource(quotaGrantsGVR).Namespace(orgNS).Create(ctx, quotaGrant(orgNS, "bench-probe", "Project", probe, resourceType, 0), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	probeClient, err := s.writerClient(probe)
	if err != nil {
		return nil, err
	}
	if err := poll(ctx, time.Minute, func() (bool, error) {
		_, err := probeClient.CoreV1().ConfigMaps(s.namespaceOf(probe)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
		return apierrors.IsForbidden(err), nil
	}); err != nil {
		return nil, fmt.Errorf("the ConfigMap policy never applied: %w", err)
	}
	if r.CreateUncharged, err = timeCreates(); err != nil {
		return nil, err
	}
	if _, err := admin.Resource(quotaGrantsGVR).Namespace(orgNS).Create(ctx, quotaGrant(orgNS, "bench-configmaps", "Project", first, resourceType, 1<<40), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	// The new bucket claims the ConfigMaps the project holds already (the
	// series above made hundreds): the charged series is timed once that
	// recount is done, not while its claims are being stored.
	held, cont := 0, ""
	for {
		page, err := user.CoreV1().ConfigMaps(metav1.NamespaceAll).List(ctx, metav1.ListOptions{Limit: 500, Continue: cont})
		if err != nil {
			return nil, err
		}
		held += len(page.Items)
		if cont = page.Continue; cont == "" {
			break
		}
	}
	if err := poll(ctx, 5*time.Minute, func() (bool, error) {
		list, err := buckets.List(ctx, metav1.ListOptions{FieldSelector: "spec.consumerRef.name=" + first + ",spec.resourceType=" + resourceType})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		allocated, _, _ := unstructured.NestedInt64(list.Items[0].Object, "status", "allocated")
		return allocated >= int64(held), nil
	}); err != nil {
		return nil, fmt.Errorf("the bucket of %s never claimed its %d ConfigMaps: %w", first, held, err)
	}
	if r.CreateCharged, err = timeCreates(); err != nil {
		return nil, err
	}
	// In turn: a create in a project without a grant (the policy matches,
	// nothing is charged), then one in the charged project. Project 1 has
	// none unless it is the probe's (granted 0): then this is not measured.
	paired := o.Samples
	if projectName(1) == probe {
		paired = 0
	}
	if r.PairedUncharged, r.PairedCharged, err = inTurn("quota-paired", paired); err != nil {
		return nil, err
	}
	if r.PairedCharged.P50 > 0 {
		progress("[milo] ConfigMap creates in turn, p50/p99: %.2f/%.2f ms not charged, %.2f/%.2f ms charged (%.2f×)",
			r.PairedUncharged.P50, r.PairedUncharged.P99, r.PairedCharged.P50, r.PairedCharged.P99, r.PairedCharged.P50/max(r.PairedUncharged.P50, 0.001))
	}
	// In rounds: the policy disabled (no quota at all: the ledger has no
	// policy of ConfigMaps) and enabled, each change seen by the server
	// once the probe project's create is let through or refused again.
	setPolicy := func(enabled bool) error {
		patch := fmt.Sprintf(`{"spec":{"disabled":%t}}`, !enabled)
		if _, err := admin.Resource(quotaPoliciesGVR).Patch(ctx, "bench-configmaps", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
		return poll(ctx, time.Minute, func() (bool, error) {
			_, err := probeClient.CoreV1().ConfigMaps(s.namespaceOf(probe)).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-"}}, metav1.CreateOptions{})
			if enabled {
				return apierrors.IsForbidden(err), nil
			}
			return err == nil, nil
		})
	}
	var roundsOff, roundsOn latencies
	perRound := max(1, o.Samples/4)
	for round, enabled := range []bool{false, true, true, false, false, true, true, false} {
		if err := setPolicy(enabled); err != nil {
			return nil, fmt.Errorf("turning the ConfigMap policy on (%t): %w", enabled, err)
		}
		into := &roundsOff
		if enabled {
			into = &roundsOn
		}
		for i := range perRound {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("quota-round-%d-%d", round, i)}, Data: map[string]string{"payload": kib}}
			began := time.Now()
			if _, err := user.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
			*into = append(*into, time.Since(began))
		}
	}
	slices.Sort(roundsOff)
	slices.Sort(roundsOn)
	r.RoundsOff = quantiles{P50: ms(roundsOff.quantile(0.5)), P99: ms(roundsOff.quantile(0.99))}
	r.RoundsCharged = quantiles{P50: ms(roundsOn.quantile(0.5)), P99: ms(roundsOn.quantile(0.99))}
	progress("[milo] ConfigMap creates in rounds, p50/p99: %.2f/%.2f ms without quota, %.2f/%.2f ms charged (%.2f×)",
		r.RoundsOff.P50, r.RoundsOff.P99, r.RoundsCharged.P50, r.RoundsCharged.P99, r.RoundsCharged.P50/max(r.RoundsOff.P50, 0.001))
	progress("[milo] ConfigMap create p50/p99: %.2f/%.2f ms without quota, %.2f/%.2f ms objects and bytes metered, %.2f/%.2f ms under a policy without a grant, %.2f/%.2f ms charged",
		r.CreateOff.P50, r.CreateOff.P99, r.CreateMetered.P50, r.CreateMetered.P99, r.CreateUncharged.P50, r.CreateUncharged.P99, r.CreateCharged.P50, r.CreateCharged.P99)

	// A grant of namespaces to each of Projects projects: a bucket each,
	// and a claim of each namespace the project holds.
	if settle > 0 {
		time.Sleep(settle)
	}
	if r.Before, err = s.measure(ctx, filepath.Join(dir, "quota-heap-before.pprof")); err != nil {
		return nil, err
	}
	if err := parallel(ctx, "projects granted namespaces", 0, o.Projects, 32, func(i int) error {
		_, err := admin.Resource(quotaGrantsGVR).Namespace(orgNS).Create(ctx, quotaGrant(orgNS, "ns-"+projectName(i), "Project", projectName(i), "core/namespaces", 10), metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}); err != nil {
		return nil, err
	}
	if err := poll(ctx, 30*time.Minute, func() (bool, error) {
		// Counted a page at a time; the two ConfigMap buckets above are among them.
		n, opts := 0, metav1.ListOptions{Limit: 500}
		for {
			list, err := buckets.List(ctx, opts)
			if err != nil {
				return false, nil
			}
			n += len(list.Items)
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				return n >= o.Projects+2, nil
			}
		}
	}); err != nil {
		return nil, fmt.Errorf("buckets: %w", err)
	}
	if settle > 0 {
		time.Sleep(settle)
	}
	if r.Granted, err = s.measure(ctx, filepath.Join(dir, "quota-heap-granted.pprof")); err != nil {
		return nil, err
	}
	progress("[milo] %d projects with a grant and a bucket: heap %.0f → %.0f MiB (%.0f bytes per project), %v → %v goroutines",
		o.Projects, r.Before.HeapBytes/(1<<20), r.Granted.HeapBytes/(1<<20), r.bytesPerProject(), r.Before.Goroutines, r.Granted.Goroutines)

	// Project creation in two new organizations, one limited, in four
	// rounds of a quarter each, without-with-with-without: the server grows
	// busier with every project, and the order cancels that drift, which
	// one organization after the other measured as the quota's cost.
	organization := func(org string, limited bool) error {
		if _, err := admin.Resource(organizationsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Organization", "metadata": map[string]any{"name": org}}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		orgNS := tenancy.OrganizationNamespace(org)
		if err := poll(ctx, time.Minute, func() (bool, error) {
			_, err := admin.Resource(namespacesGVR).Get(ctx, orgNS, metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			return fmt.Errorf("namespace %s: %w", orgNS, err)
		}
		if !limited {
			return nil
		}
		if _, err := admin.Resource(quotaGrantsGVR).Namespace(orgNS).Create(ctx, quotaGrant(orgNS, "projects", "Organization", org, "resourcemanager.miloapis.com/projects", int64(o.Created)), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		// The quota controller's queue may still hold the recount of the grants above.
		if err := poll(ctx, 10*time.Minute, func() (bool, error) {
			list, err := admin.Resource(quotaBucketsGVR).Namespace(orgNS).List(ctx, metav1.ListOptions{})
			return err == nil && len(list.Items) == 1, nil
		}); err != nil {
			return fmt.Errorf("the bucket of %s: %w", org, err)
		}
		return nil
	}
	// round creates projects [from, to) of org and waits for them Ready; it
	// returns the time to the last answer and to the last Ready.
	round := func(org string, from, to int) (created, ready time.Duration, err error) {
		began := time.Now()
		if err := parallel(ctx, "projects of "+org, from, to, 8*32, func(i int) error {
			_, err := admin.Resource(projectsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project", "metadata": map[string]any{"name": fmt.Sprintf("%s-%05d", org, i)},
				"spec": map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}}}}, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		}); err != nil {
			return 0, 0, err
		}
		created = time.Since(began)
		err = poll(ctx, 10*time.Minute, func() (bool, error) {
			n, opts := 0, metav1.ListOptions{Limit: 500, LabelSelector: tenancy.OrganizationLabel + "=" + org}
			for {
				list, err := admin.Resource(projectsGVR).List(ctx, opts)
				if err != nil {
					return false, nil
				}
				for _, p := range list.Items {
					conds, _, _ := unstructured.NestedSlice(p.Object, "status", "conditions")
					if slices.ContainsFunc(conds, func(c any) bool {
						m, _ := c.(map[string]any)
						return m["type"] == "Ready" && m["status"] == "True"
					}) {
						n++
					}
				}
				if opts.Continue = list.GetContinue(); opts.Continue == "" {
					return n >= to, nil
				}
			}
		})
		return created, time.Since(began), err
	}
	orgs := map[bool]string{false: "quota-off", true: "quota-on"}
	for limited, org := range orgs {
		if err := organization(org, limited); err != nil {
			return nil, err
		}
	}
	// A round not counted first, in an organization of its own: the first
	// projects after the grants above are slower whichever organization
	// they are in.
	if err := organization("quota-warm", false); err != nil {
		return nil, err
	}
	if _, _, err := round("quota-warm", 0, o.Created/4); err != nil {
		return nil, err
	}
	createdIn, readyIn, done := map[bool]time.Duration{}, map[bool]time.Duration{}, map[bool]int{} // by limited
	for k, limited := range []bool{false, true, true, false} {
		from, to := done[limited], done[limited]+(o.Created*(k+1)/4-o.Created*k/4)
		c, rd, err := round(orgs[limited], from, to)
		if err != nil {
			return nil, err
		}
		done[limited] = to
		createdIn[limited] += c
		readyIn[limited] += rd
	}
	perSecond := func(n int, d time.Duration) float64 { return float64(n) / max(d.Seconds(), 0.001) }
	r.ProjectsPerSecondOff, r.ReadyPerSecondOff = perSecond(done[false], createdIn[false]), perSecond(done[false], readyIn[false])
	r.ProjectsPerSecondOn, r.ReadyPerSecondOn = perSecond(done[true], createdIn[true]), perSecond(done[true], readyIn[true])
	progress("[milo] %d projects created at %.0f/s (Ready %.0f/s) without a projects quota, %.0f/s (Ready %.0f/s) with one",
		o.Created, r.ProjectsPerSecondOff, r.ReadyPerSecondOff, r.ProjectsPerSecondOn, r.ReadyPerSecondOn)
	return r, nil
}

func (q *quotaResult) bytesPerProject() float64 {
	return (q.Granted.HeapBytes - q.Before.HeapBytes) / float64(max(1, q.Options.Projects))
}

// section reports the measurement of provider quotas.
func (q *quotaResult) section() string {
	var b strings.Builder
	o := q.Options
	fmt.Fprintf(&b, "## Provider quotas\n\nConfigMap creates in %s as the harness's ordinary user, one after another, %d each. Then %d projects granted namespaces (a ResourceGrant, its AllowanceBucket and a claim of each namespace they hold); then %d projects created, 256 at once, in a new organization without and in one with a projects-per-organization grant, a quarter at a time in the order without, with, with, without (after a quarter in a third organization, not counted).\n\n",
		projectName(0), o.Samples, o.Projects, o.Created)
	b.WriteString("| ConfigMap create | p50 | p99 |\n|---|---|---|\n")
	for _, row := range []struct {
		name string
		q    quantiles
	}{{"no claim policy", q.CreateOff}, {"objects and stored bytes metered (built-in grants)", q.CreateMetered},
		{"a policy, no grant (not charged)", q.CreateUncharged}, {"charged (a claim stored)", q.CreateCharged}} {
		fmt.Fprintf(&b, "| %s | %.2f ms (%.2f×) | %.2f ms (%.2f×) |\n", row.name, row.q.P50, row.q.P50/max(q.CreateOff.P50, 0.001), row.q.P99, row.q.P99/max(q.CreateOff.P99, 0.001))
	}
	if q.PairedMetered.P50 > 0 {
		fmt.Fprintf(&b, "\nTaken in turn, a create in %s (not metered) then one in %s (objects and stored bytes metered), %d each: p50 %.2f ms against %.2f ms (%.2f×), p99 %.2f ms against %.2f ms.\n",
			projectName(1), projectName(0), o.Samples, q.PairedMetered.P50, q.PairedUnmetered.P50, q.PairedMetered.P50/max(q.PairedUnmetered.P50, 0.001), q.PairedMetered.P99, q.PairedUnmetered.P99)
	}
	if q.PairedCharged.P50 > 0 {
		fmt.Fprintf(&b, "\nTaken in turn, a create in %s (a policy, no grant) then one in %s (charged), %d each: p50 %.2f ms against %.2f ms (%.2f×), p99 %.2f ms against %.2f ms.\n",
			projectName(1), projectName(0), o.Samples, q.PairedCharged.P50, q.PairedUncharged.P50, q.PairedCharged.P50/max(q.PairedUncharged.P50, 0.001), q.PairedCharged.P99, q.PairedUncharged.P99)
	}
	if q.RoundsCharged.P50 > 0 {
		fmt.Fprintf(&b, "\nIn rounds of %d creates in %s, its claim policy disabled (no quota) and enabled (charged) in the order off, on, on, off, twice: p50 %.2f ms charged against %.2f ms without quota (%.2f×), p99 %.2f ms against %.2f ms.\n",
			max(1, o.Samples/4), projectName(0), q.RoundsCharged.P50, q.RoundsOff.P50, q.RoundsCharged.P50/max(q.RoundsOff.P50, 0.001), q.RoundsCharged.P99, q.RoundsOff.P99)
	}
	fmt.Fprintf(&b, "\n| | heap | goroutines |\n|---|---|---|\n| before the grants | %.0f MiB | %.0f |\n| %d grants and buckets | %.0f MiB | %.0f |\n",
		q.Before.HeapBytes/(1<<20), q.Before.Goroutines, o.Projects, q.Granted.HeapBytes/(1<<20), q.Granted.Goroutines)
	fmt.Fprintf(&b, "\n%.0f bytes of heap per project granted. Project creation, to created: %.0f/s without a projects quota, %.0f/s with one (%.2f×); to all Ready: %.0f/s and %.0f/s (%.2f×).\n\n",
		q.bytesPerProject(), q.ProjectsPerSecondOff, q.ProjectsPerSecondOn, q.ProjectsPerSecondOn/max(q.ProjectsPerSecondOff, 0.001),
		q.ReadyPerSecondOff, q.ReadyPerSecondOn, q.ReadyPerSecondOn/max(q.ReadyPerSecondOff, 0.001))
	return b.String()
}
