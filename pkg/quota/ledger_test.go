package quota

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
)

func registrationOf(name, resourceType, typ, consumer string, claiming ...schema.GroupKind) *quotav1alpha1.ResourceRegistration {
	r := &quotav1alpha1.ResourceRegistration{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()},
		Spec: quotav1alpha1.ResourceRegistrationSpec{ConsumerType: quotav1alpha1.ConsumerType{APIGroup: ConsumerGroup, Kind: consumer},
			Type: typ, ResourceType: resourceType, BaseUnit: "unit", DisplayUnit: "unit", UnitConversionFactor: 1}}
	for _, gk := range claiming {
		r.Spec.ClaimingResources = append(r.Spec.ClaimingResources, quotav1alpha1.ClaimingResource{APIGroup: gk.Group, Kind: gk.Kind})
	}
	return r
}

func grantOf(ns, name string, c Consumer, allowances map[string][]int64) *quotav1alpha1.ResourceGrant {
	g := &quotav1alpha1.ResourceGrant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1},
		Spec: quotav1alpha1.ResourceGrantSpec{ConsumerRef: c.Ref()}}
	for t, amounts := range allowances {
		a := quotav1alpha1.Allowance{ResourceType: t}
		for _, n := range amounts {
			a.Buckets = append(a.Buckets, quotav1alpha1.Bucket{Amount: n})
		}
		g.Spec.Allowances = append(g.Spec.Allowances, a)
	}
	return g
}

var (
	configMaps = schema.GroupKind{Kind: "ConfigMap"}
	projects   = schema.GroupKind{Group: ConsumerGroup, Kind: KindProject}
	acme       = Consumer{Kind: KindOrganization, Name: "acme"}
	web        = Consumer{Kind: KindProject, Name: "web"}
)

func plan(name string, c Consumer, trigger schema.GroupKind, requests map[string]int64) ClaimPlan {
	p := ClaimPlan{Namespace: "organization-acme", Name: name, Consumer: c, Trigger: TriggerRef{Group: trigger.Group, Kind: trigger.Kind, Name: name, UID: name}}
	for t, n := range requests {
		p.Requests = append(p.Requests, quotav1alpha1.ResourceRequest{ResourceType: t, Amount: n})
	}
	return p
}

// TestBucketArithmetic: limits add up over grants and buckets, claims and
// reservations use them, and a request that does not fit is refused whole.
func TestBucketArithmetic(t *testing.T) {
	for _, tc := range []struct {
		name      string
		grants    []*quotav1alpha1.ResourceGrant
		claims    []map[string]int64 // reserved one after the other
		refusedAt int                // index of the first refused claim, -1 for none
		want      BucketStatus       // of acme's "bytes"
	}{
		{name: "no grant: not limited, not charged", claims: []map[string]int64{{"bytes": 1 << 40}}, refusedAt: -1, want: BucketStatus{}},
		{name: "one grant, two buckets", grants: []*quotav1alpha1.ResourceGrant{grantOf("organization-acme", "g", acme, map[string][]int64{"bytes": {1000, 24}})},
			claims: []map[string]int64{{"bytes": 1000}, {"bytes": 24}, {"bytes": 1}}, refusedAt: 2,
			want: BucketStatus{Limit: 1024, Allocated: 1024, Available: 0, GrantCount: 1, Exists: true}},
		{name: "grants add up", grants: []*quotav1alpha1.ResourceGrant{
			grantOf("organization-acme", "a", acme, map[string][]int64{"bytes": {512}}), grantOf("organization-acme", "b", acme, map[string][]int64{"bytes": {512}})},
			claims: []map[string]int64{{"bytes": 700}, {"bytes": 400}}, refusedAt: 1,
			want: BucketStatus{Limit: 1024, Allocated: 700, Available: 324, GrantCount: 2, Exists: true}},
		{name: "a grant in another organization's namespace does not count", grants: []*quotav1alpha1.ResourceGrant{
			grantOf("organization-other", "a", acme, map[string][]int64{"bytes": {512}}), grantOf("organization-acme", "b", acme, map[string][]int64{"bytes": {10}})},
			claims: []map[string]int64{{"bytes": 11}}, refusedAt: 0,
			want: BucketStatus{Limit: 10, Available: 10, GrantCount: 1, Exists: true}},
		{name: "all or nothing across resource types", grants: []*quotav1alpha1.ResourceGrant{
			grantOf("organization-acme", "g", acme, map[string][]int64{"bytes": {100}, "count": {1}})},
			claims: []map[string]int64{{"bytes": 10, "count": 1}, {"bytes": 10, "count": 1}}, refusedAt: 1,
			want: BucketStatus{Limit: 100, Allocated: 10, Available: 90, GrantCount: 1, Exists: true}},
		{name: "a zero grant refuses everything", grants: []*quotav1alpha1.ResourceGrant{grantOf("organization-acme", "g", acme, map[string][]int64{"bytes": {0}})},
			claims: []map[string]int64{{"bytes": 1}}, refusedAt: 0, want: BucketStatus{GrantCount: 1, Exists: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewLedger()
			l.SetRegistration(registrationOf("bytes", "bytes", quotav1alpha1.TypeAllocation, KindOrganization, configMaps))
			l.SetRegistration(registrationOf("count", "count", quotav1alpha1.TypeEntity, KindOrganization, configMaps))
			for _, g := range tc.grants {
				l.SetGrant(g)
			}
			refused := -1
			for i, c := range tc.claims {
				_, err := l.Reserve([]ClaimPlan{plan(fmt.Sprint("c", i), acme, configMaps, c)})
				var exceeded *Exceeded
				if errors.As(err, &exceeded) {
					if refused < 0 {
						refused = i
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if refused != tc.refusedAt {
				t.Fatalf("first refused claim %d, want %d", refused, tc.refusedAt)
			}
			got := l.Bucket(BucketKey{acme, "bytes"})
			got.Grants, got.ClaimCount = nil, 0
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("bucket %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestReservationsBecomeClaims: a reserved claim counts once — while it is
// on its way to storage, then as the stored claim — and its units come back
// when the claim goes, when its create fails, or when it is never seen.
func TestReservationsBecomeClaims(t *testing.T) {
	l := NewLedger()
	now := time.Now()
	l.now = func() time.Time { return now }
	l.SetRegistration(registrationOf("count", "count", quotav1alpha1.TypeEntity, KindOrganization, configMaps))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{"count": {2}}))
	k := BucketKey{acme, "count"}
	reserved, err := l.Reserve([]ClaimPlan{plan("one", acme, configMaps, map[string]int64{"count": 1})})
	if err != nil || len(reserved) != 1 {
		t.Fatal(reserved, err)
	}
	if got := l.Bucket(k).Allocated; got != 1 {
		t.Fatalf("allocated while reserved: %d", got)
	}
	l.SetClaim(reserved[0].Object(), true)
	l.SetClaim(reserved[0].Object(), false) // an update: counted once
	if got := l.Bucket(k); got.Allocated != 1 || got.ClaimCount != 1 {
		t.Fatalf("after the claim is stored: %+v", got)
	}
	// A reservation whose create failed is released; one never seen expires.
	failed, _ := l.Reserve([]ClaimPlan{plan("two", acme, configMaps, map[string]int64{"count": 1})})
	if _, err := l.Reserve([]ClaimPlan{plan("three", acme, configMaps, map[string]int64{"count": 1})}); err == nil {
		t.Fatal("a third claim against a limit of 2 was reserved")
	}
	l.Release(failed[0].Namespace, failed[0].Name)
	if _, err := l.Reserve([]ClaimPlan{plan("four", acme, configMaps, map[string]int64{"count": 1})}); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	now = now.Add(pendingTTL + time.Second)
	if got := l.Bucket(k).Allocated; got != 2 {
		t.Fatalf("before expiry is noticed: %d", got)
	}
	if _, err := l.Reserve(nil); err != nil {
		t.Fatal(err)
	}
	if got := l.Bucket(k).Allocated; got != 1 {
		t.Fatalf("after the unseen reservation expired: %d", got)
	}
	l.DeleteClaim(reserved[0].Namespace, reserved[0].Name)
	if got := l.Bucket(k); got.Allocated != 0 || got.ClaimCount != 0 || got.Available != 2 {
		t.Fatalf("after the claim went: %+v", got)
	}
}

// TestConcurrentReservationsNeverExceed: 50 creates racing for 10 units:
// exactly 10 are reserved.
func TestConcurrentReservationsNeverExceed(t *testing.T) {
	l := NewLedger()
	l.SetRegistration(registrationOf("projects", ProjectsPerOrganization, quotav1alpha1.TypeEntity, KindOrganization, projects))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{ProjectsPerOrganization: {10}}))
	var wg sync.WaitGroup
	var ok atomic.Int32
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.Reserve([]ClaimPlan{plan(fmt.Sprint("p", i), acme, projects, map[string]int64{ProjectsPerOrganization: 1})}); err == nil {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	if ok.Load() != 10 {
		t.Fatalf("%d of 50 reserved against a limit of 10", ok.Load())
	}
}

// TestWhatIsCharged: only registered, active, non-Feature resource types
// of the consumer's kind, claimed by a kind the registration lists.
func TestWhatIsCharged(t *testing.T) {
	l := NewLedger()
	l.SetRegistration(registrationOf("orgs", "org-thing", quotav1alpha1.TypeEntity, KindOrganization, configMaps))
	l.SetRegistration(registrationOf("feature", "feature", quotav1alpha1.TypeFeature, KindOrganization, configMaps))
	l.SetRegistration(registrationOf("projects-only", "project-thing", quotav1alpha1.TypeEntity, KindProject, configMaps))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{"org-thing": {0}, "feature": {0}, "project-thing": {0}, "unregistered": {0}}))
	for _, tc := range []struct {
		resourceType string
		trigger      schema.GroupKind
		charged      bool
	}{
		{"org-thing", configMaps, true},
		{"org-thing", projects, false}, // not a claiming resource of the registration
		{"feature", configMaps, false},
		{"project-thing", configMaps, false}, // charges Projects, not Organizations
		{"unregistered", configMaps, false},
	} {
		_, err := l.Reserve([]ClaimPlan{plan("x", acme, tc.trigger, map[string]int64{tc.resourceType: 1})})
		if charged := err != nil; charged != tc.charged {
			t.Errorf("%s claimed by %s: charged %v, want %v (%v)", tc.resourceType, tc.trigger, charged, tc.charged, err)
		}
	}
	if err := l.GrantError("organization-acme", "g"); err == nil {
		t.Error("a grant naming unregistered and mismatched resource types is active")
	}
	// Two registrations of one resource type: the oldest holds it.
	later := registrationOf("orgs-again", "org-thing", quotav1alpha1.TypeEntity, KindOrganization, configMaps)
	later.CreationTimestamp = metav1.NewTime(time.Now().Add(time.Hour))
	l.SetRegistration(later)
	if err := l.RegistrationError("orgs"); err != nil {
		t.Errorf("the first registration: %v", err)
	}
	if err := l.RegistrationError("orgs-again"); err == nil {
		t.Error("a second registration of a resource type is active")
	}
}

// TestClaimsOfAnObjectAreCheckedWhenItGoes: a delete of the object, or of
// its project, asks for its claims to be checked.
func TestClaimsOfAnObjectAreCheckedWhenItGoes(t *testing.T) {
	l := NewLedger()
	var going []string
	l.Notify(func(BucketKey) {}, func(string) {}, func(k string) { going = append(going, k) })
	p := plan("c", web, configMaps, map[string]int64{"x": 1})
	p.Trigger = TriggerRef{Project: "web", Version: "v1", Resource: "configmaps", Kind: "ConfigMap", Namespace: "default", Name: "settings", UID: "u1"}
	l.SetClaim(p.Object(), true)
	l.TriggerDeleted(TriggerRef{Project: "other", Resource: "configmaps", Namespace: "default", Name: "settings"}.Key())
	if len(going) != 0 {
		t.Fatalf("a delete in another project checked %v", going)
	}
	l.TriggerDeleted(TriggerRef{Project: "web", Resource: "configmaps", Namespace: "default", Name: "settings"}.Key())
	l.ProjectDeleted("web")
	if len(going) != 2 || going[0] != Key(p.Namespace, p.Name) {
		t.Fatalf("checked %v", going)
	}
	back, ok := TriggerFromAnnotations(p.Object())
	if !ok || back != p.Trigger {
		t.Fatalf("trigger read back %+v, want %+v", back, p.Trigger)
	}
}

// TestMeteredTypesCountWithoutClaims: a metered type is counted from what
// MeterAdd reports — objects made before the grant included — its creates
// store no claim, and a reservation counts until its object is counted.
func TestMeteredTypesCountWithoutClaims(t *testing.T) {
	l := NewLedger()
	l.Meter(ProjectsPerOrganization)
	l.SetRegistration(registrationOf("projects", ProjectsPerOrganization, quotav1alpha1.TypeEntity, KindOrganization, projects))
	trigger := func(name string) string {
		return TriggerRef{Group: ConsumerGroup, Resource: "projects", Name: name, UID: name}.ObjectKey()
	}
	l.MeterAdd(ProjectsPerOrganization, acme, 1, trigger("old"))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{ProjectsPerOrganization: {3}}))
	k := BucketKey{acme, ProjectsPerOrganization}
	if got := l.Bucket(k); got.Allocated != 1 || got.ClaimCount != 1 {
		t.Fatalf("a project made before the grant: %+v", got)
	}
	newProject := func(name string) ClaimPlan {
		p := plan(name, acme, projects, map[string]int64{ProjectsPerOrganization: 1})
		p.Trigger = TriggerRef{Group: ConsumerGroup, Resource: "projects", Kind: KindProject, Name: name, UID: name}
		return p
	}
	claims, err := l.Reserve([]ClaimPlan{newProject("a")})
	if err != nil || len(claims) != 0 {
		t.Fatalf("a metered create: claims %v, %v", claims, err)
	}
	if _, err := l.Reserve([]ClaimPlan{newProject("b")}); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Reserve([]ClaimPlan{newProject("c")}); err == nil {
		t.Fatal("a fourth project against a limit of 3")
	}
	// A dry run of another create of the name a does not touch a's reservation.
	dry := newProject("a")
	dry.Trigger.UID = "other"
	if _, err := l.Reserve([]ClaimPlan{dry}); err == nil {
		t.Fatal("a fourth reservation against a limit of 3")
	}
	// a is stored and counted (once); b's create failed.
	l.MeterAdd(ProjectsPerOrganization, acme, 1, trigger("a"))
	l.ReleaseObject(trigger("b"))
	if got := l.Bucket(k); got.Allocated != 2 || got.ClaimCount != 2 {
		t.Fatalf("after a was stored and b failed: %+v", got)
	}
	l.MeterAdd(ProjectsPerOrganization, acme, -1, "")
	if got := l.Bucket(k); got.Allocated != 1 || got.Available != 2 {
		t.Fatalf("after a project went: %+v", got)
	}
}

// TestClaimsStoredWithTheirObjectAreNotLookedUp: a claim stored in its
// object's own transaction is taken as seen when it appears; one stored
// apart, or whose object (or project) a delete was admitted for before the
// claim appeared, has its object looked up.
func TestClaimsStoredWithTheirObjectAreNotLookedUp(t *testing.T) {
	l := NewLedger()
	l.SetRegistration(registrationOf("cms", "count", quotav1alpha1.TypeEntity, KindOrganization, configMaps))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{"count": {10}}))
	var verified, seen, going []string
	l.Notify(func(BucketKey) {}, func(k string) { verified = append(verified, k) }, func(k string) { going = append(going, k) })
	l.NotifySeen(func(k string) { seen = append(seen, k) })
	reserve := func(name, project string, joint bool) ClaimPlan {
		t.Helper()
		p := plan(name, acme, configMaps, map[string]int64{"count": 1})
		p.Trigger.Project, p.Trigger.Namespace = project, "default"
		reserved, err := l.Reserve([]ClaimPlan{p})
		if err != nil || len(reserved) != 1 {
			t.Fatalf("reserving %s: %v %v", name, reserved, err)
		}
		if joint {
			l.StoredWithObject(reserved)
		}
		return p
	}
	joint, apart := reserve("joint", "web", true), reserve("apart", "web", false)
	deleted, projectGone := reserve("deleted", "web", true), reserve("gone", "api", true)
	l.TriggerDeleted(deleted.Trigger.Key())
	l.ProjectDeleted("api")
	for _, p := range []ClaimPlan{joint, apart, deleted, projectGone} {
		l.SetClaim(p.Object(), true)
	}
	// Stored with their object: seen; those whose object (or project) a
	// delete was admitted for first are checked as going.
	want := []string{Key(joint.Namespace, joint.Name), Key(deleted.Namespace, deleted.Name), Key(projectGone.Namespace, projectGone.Name)}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("taken as seen: %v, want %v", seen, want)
	}
	if want := want[1:]; fmt.Sprint(going) != fmt.Sprint(want) {
		t.Errorf("checked as going: %v, want %v", going, want)
	}
	if want := []string{Key(apart.Namespace, apart.Name)}; fmt.Sprint(verified) != fmt.Sprint(want) {
		t.Errorf("looked up: %v, want %v", verified, want)
	}
	if n := l.pendingWithObject.Load(); n != 0 {
		t.Errorf("%d claims stored with their object still pending", n)
	}
	// A resync checks every claim again.
	verified = nil
	l.SetClaim(joint.Object(), true)
	if len(verified) != 1 {
		t.Errorf("a resync looked up %v", verified)
	}
	if b := l.Bucket(BucketKey{acme, "count"}); b.Allocated != 4 {
		t.Errorf("bucket %+v, want 4 allocated", b)
	}
}

// talliedClaim is the claim of a reserved plan as stored with its object:
// marked tallied.
func talliedClaim(p ClaimPlan) *quotav1alpha1.ResourceClaim {
	c := p.Object()
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[TalliedAnnotation] = "true"
	return c
}

// TestGuardDecidesFromTheTally: a reservation's guard expects the tally as
// the ledger last knew it; told what another replica's creates left there,
// it refuses what no longer fits (freeing its units) or lets the create try
// again; a stored create's units count once, in the tally, whether or not
// its claim was seen yet.
func TestGuardDecidesFromTheTally(t *testing.T) {
	l := NewLedger()
	l.SetRegistration(registrationOf("count", "count", quotav1alpha1.TypeEntity, KindOrganization, configMaps))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{"count": {10}}))
	k := BucketKey{acme, "count"}
	key := TallyKey(k)
	if key != "_milo/quota-tallies/Organization/acme/count" || TallyKey(BucketKey{web, "core/namespaces"}) != "_milo/quota-tallies/Project/web/core%2Fnamespaces" {
		t.Fatalf("tally keys: %s", key)
	}
	used := func() int64 {
		l.mu.RLock()
		defer l.mu.RUnlock()
		return l.withTallyLocked(k, l.tallies[k].value)
	}

	reserved, err := l.Reserve([]ClaimPlan{plan("one", acme, configMaps, map[string]int64{"count": 2})})
	if err != nil {
		t.Fatal(err)
	}
	g := l.Guard(reserved, func(e *Exceeded) error { return e })
	if want := []tenantstorage.Tally{{Key: key, Add: 2}}; !reflect.DeepEqual(g.Expect(nil), want) {
		t.Fatalf("a guard of a ledger that knows no tally expects %+v", g.Expect(nil))
	}
	// Another replica stored 9: 9 + 2 does not fit. The create is refused
	// and its units are free; the tally holds more than the tallied claims
	// seen (none), so the bucket is to be counted again.
	var recounts []string
	l.NotifyRecount(func(namespace string, b BucketKey) { recounts = append(recounts, namespace+" "+TallyKey(b)) })
	err = g.Moved([]tenantstorage.Tally{{Key: key, Revision: 40, Value: 9}})
	if want := []string{"organization-acme " + key}; !reflect.DeepEqual(recounts, want) {
		t.Fatalf("recounts asked: %v, want %v", recounts, want)
	}
	var exceeded *Exceeded
	if !errors.As(err, &exceeded) || exceeded.Used != 9 || exceeded.Amount != 2 || exceeded.Limit != 10 {
		t.Fatalf("told the tally holds 9: %v", err)
	}
	if got := used(); got != 9 {
		t.Fatalf("after the refusal the bucket uses %d, want the tally's 9", got)
	}
	// Admission reserves from the claims it has seen; the guard then finds
	// that what it knew of the tally leaves no room, and expects a revision
	// no tally has, to be told what it holds now: another replica's claims
	// went, 6 are left, and the create goes on.
	reserved, err = l.Reserve([]ClaimPlan{plan("two", acme, configMaps, map[string]int64{"count": 2})})
	if err != nil {
		t.Fatal(err)
	}
	g = l.Guard(reserved, func(e *Exceeded) error { return e })
	if got := g.Expect(nil); got[0].Revision != -1 {
		t.Fatalf("with a tally known at 9 and 2 more asked of 10, the guard expects %+v", got)
	}
	if err := g.Moved([]tenantstorage.Tally{{Key: key, Revision: 41, Value: 6}}); err != nil {
		t.Fatalf("6 + 2 of 10: %v", err)
	}
	if want := []tenantstorage.Tally{{Key: key, Revision: 41, Value: 6, Add: 2}}; !reflect.DeepEqual(g.Expect(nil), want) {
		t.Fatalf("the guard expects %+v, want %+v", g.Expect(nil), want)
	}
	if got := used(); got != 8 {
		t.Fatalf("reserved: the bucket uses %d, want 8", got)
	}
	// Stored: its units count once, in the tally, not also as reserved,
	// nor again when its claim is seen.
	g.Stored([]tenantstorage.Tally{{Key: key, Revision: 43, Value: 8}})
	if got := used(); got != 8 {
		t.Fatalf("stored, not seen yet: the bucket uses %d, want 8", got)
	}
	l.SetClaim(talliedClaim(reserved[0]), true)
	if got := used(); got != 8 {
		t.Fatalf("stored and seen: the bucket uses %d, want 8", got)
	}
	if got := l.tallies[k]; got != (tallyState{revision: 43, value: 8}) {
		t.Fatalf("the ledger knows the tally as %+v", got)
	}
	// A claim not tallied (stored by hand, or through the API) counts
	// beside the tally.
	l.SetClaim(plan("byhand", acme, configMaps, map[string]int64{"count": 1}).Object(), true)
	if got := used(); got != 9 {
		t.Fatalf("with a claim not tallied: %d, want 9", got)
	}
	// A tallied claim's delete seen: the tally moved with the delete (on
	// whichever replica), and the guard reads it before a create is stored.
	l.DeleteClaim(reserved[0].Namespace, reserved[0].Name)
	if got := used(); got != 9 {
		t.Fatalf("a tallied claim's delete seen: %d, want the tally's 8 and 1", got)
	}
	// What a stored claim holds of tallies, for its delete.
	if got := ClaimTallies(talliedClaim(reserved[0])); !reflect.DeepEqual(got, []tenantstorage.Tally{{Key: key, Add: 2}}) {
		t.Fatalf("a tallied claim holds %+v", got)
	}
	if got := ClaimTallies(reserved[0].Object()); got != nil {
		t.Fatalf("a claim not tallied holds %+v", got)
	}
}

// TestARefusalWaitsForCreatesUnderWay: a create stored by this replica and
// not yet told so is in the tally another create reads and still reserved;
// the other's refusal waits for it to be told, and then finds room.
func TestARefusalWaitsForCreatesUnderWay(t *testing.T) {
	l := NewLedger()
	l.SetRegistration(registrationOf("count", "count", quotav1alpha1.TypeEntity, KindOrganization, configMaps))
	l.SetGrant(grantOf("organization-acme", "g", acme, map[string][]int64{"count": {2}}))
	key := TallyKey(BucketKey{acme, "count"})
	refuse := func(e *Exceeded) error { return e }
	reserve := func(name string) *tallyGuard {
		reserved, err := l.Reserve([]ClaimPlan{plan(name, acme, configMaps, map[string]int64{"count": 1})})
		if err != nil {
			t.Fatal(err)
		}
		return l.Guard(reserved, refuse).(*tallyGuard)
	}
	a, b := reserve("a"), reserve("b")
	a.Expect(nil) // a's transaction is under way
	b.Expect(nil)
	// a's transaction stored it (the tally holds 1) as b's failed and read
	// the tally; b counts a twice (in the tally, and reserved) until a is
	// told: 1 + 1 (a) + 1 (b) > 2.
	told := make(chan struct{})
	go func() {
		time.Sleep(20 * time.Millisecond)
		a.Stored([]tenantstorage.Tally{{Key: key, Revision: 10, Value: 1}})
		close(told)
	}()
	began := time.Now()
	if err := b.Moved([]tenantstorage.Tally{{Key: key, Revision: 11, Value: 1}}); err != nil {
		t.Fatalf("a create with room, once another's outcome is known, was refused: %v", err)
	}
	select {
	case <-told:
	default:
		t.Fatalf("b decided after %v, before a was told it was stored", time.Since(began))
	}
	// b tries again; another replica took the last unit meanwhile. A
	// refusal no create under way could undo does not wait.
	b.Expect(nil)
	began = time.Now()
	if err := b.Moved([]tenantstorage.Tally{{Key: key, Revision: 12, Value: 2}}); err == nil {
		t.Fatal("a third create against a limit of 2 was let through")
	}
	if waited := time.Since(began); waited > inFlightWindow/2 {
		t.Fatalf("a refusal nothing could undo waited %v", waited)
	}
}
