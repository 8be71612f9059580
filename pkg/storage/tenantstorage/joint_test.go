package tenantstorage

import (
	"context"
	"crypto/aes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"
	aesvalue "k8s.io/apiserver/pkg/storage/value/encrypt/aes"

	"go.miloapis.com/milo/pkg/tenancy"
)

// inRequest runs f as the handler of a request with verb and subresource
// would, behind joints' filter, in project's context.
func inRequest(t *testing.T, joints *Joints, verb, subresource, project string, f func(ctx context.Context)) {
	t.Helper()
	ctx := request.WithRequestInfo(in(project), &request.RequestInfo{IsResourceRequest: true, Verb: verb, Subresource: subresource, Resource: "configmaps"})
	req := httptest.NewRequest(http.MethodPost, "/api/v1/namespaces/default/configmaps", nil).WithContext(ctx)
	joints.Wrap(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { f(r.Context()) })).ServeHTTP(httptest.NewRecorder(), req)
}

func modRevision(t *testing.T, key string) int64 {
	t.Helper()
	resp, err := etcdClient.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

func companion(name string) []Companion {
	return []Companion{{Resource: corev1.Resource("jointclaims"), Object: &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("claim-" + name)}, Data: map[string]string{"for": name}}}}
}

func object(name string, uid types.UID) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid}}
}

func TestJointCreateStoresCompanionsInOneTransaction(t *testing.T) {
	joints := NewJoints(etcdClient, corev1.Resource("jointclaims"))
	objects, _ := newStorage(t, "jointobjects", Options{Joints: joints})
	claims, _ := newStorage(t, "jointclaims", Options{Joints: joints})
	released := 0
	release := func() { released++ }

	t.Run("stored together", func(t *testing.T) {
		together := 0
		defer func() {
			if together != 1 {
				t.Errorf("told %d times the companions are stored together, want 1", together)
			}
		}()
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			if !JointFrom(ctx).Add("uid-a", companion("a"), release, func() { together++ }) {
				t.Fatal("a create's joint refused companions")
			}
			out := &corev1.ConfigMap{}
			if err := objects.Create(ctx, "/jointobjects/default/a", object("a", "uid-a"), out, 0); err != nil {
				t.Fatal(err)
			}
			if out.ResourceVersion == "" || out.Name != "a" {
				t.Fatalf("the create answered %+v", out.ObjectMeta)
			}
		})
		objRev := modRevision(t, "/registry/jointobjects/"+tenancy.ProjectID("uid-of-web")+"/default/a")
		claimRev := modRevision(t, "/registry/jointclaims/_platform/default/a")
		if objRev == 0 || objRev != claimRev {
			t.Fatalf("object at revision %d, its companion at %d: want one transaction", objRev, claimRev)
		}
		got := &corev1.ConfigMap{}
		if err := claims.Get(context.Background(), "/jointclaims/default/a", storage.GetOptions{}, got); err != nil {
			t.Fatal(err)
		}
		if got.Data["for"] != "a" || tenancy.SegmentOf(got.Annotations) != tenancy.PlatformSegment || got.UID != "claim-a" {
			t.Fatalf("the companion reads back as %+v", got)
		}
		if released != 0 {
			t.Fatalf("a stored companion was released %d times", released)
		}
	})

	t.Run("a create that fails stores none and releases", func(t *testing.T) {
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			JointFrom(ctx).Add("uid-a2", companion("a2"), release, nil)
			err := objects.Create(ctx, "/jointobjects/default/a", object("a", "uid-a2"), &corev1.ConfigMap{}, 0)
			if !storage.IsExist(err) {
				t.Fatalf("creating an existing object: %v", err)
			}
		})
		if rev := modRevision(t, "/registry/jointclaims/_platform/default/a2"); rev != 0 {
			t.Fatal("the companion of a failed create was stored")
		}
		if released != 1 {
			t.Fatalf("released %d times, want 1", released)
		}
	})

	t.Run("a companion that exists fails the create", func(t *testing.T) {
		released = 0
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			JointFrom(ctx).Add("uid-b", companion("a"), release, nil)
			err := objects.Create(ctx, "/jointobjects/default/b", object("b", "uid-b"), &corev1.ConfigMap{}, 0)
			if !apierrors.IsConflict(err) {
				t.Fatalf("want a conflict, got %v", err)
			}
		})
		if rev := modRevision(t, "/registry/jointobjects/"+tenancy.ProjectID("uid-of-web")+"/default/b"); rev != 0 {
			t.Fatal("the object was stored without its companion")
		}
		if released != 1 {
			t.Fatalf("released %d times, want 1", released)
		}
	})

	t.Run("companions of another object are not taken, and released at the end", func(t *testing.T) {
		released = 0
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			JointFrom(ctx).Add("uid-other", companion("c"), release, nil)
			if err := objects.Create(ctx, "/jointobjects/default/c", object("c", "uid-c"), &corev1.ConfigMap{}, 0); err != nil {
				t.Fatal(err)
			}
			if released != 0 {
				t.Fatal("released before the request ended")
			}
		})
		if rev := modRevision(t, "/registry/jointclaims/_platform/default/c"); rev != 0 {
			t.Fatal("another object's companion was stored")
		}
		if released != 1 {
			t.Fatalf("released %d times, want 1", released)
		}
	})

	t.Run("only creates of objects have a joint", func(t *testing.T) {
		for _, c := range []struct{ verb, sub string }{{"update", ""}, {"patch", ""}, {"create", "status"}, {"get", ""}} {
			inRequest(t, joints, c.verb, c.sub, "web", func(ctx context.Context) {
				if JointFrom(ctx) != nil {
					t.Errorf("%s %s has a joint", c.verb, c.sub)
				}
			})
		}
		var none *Joints
		inRequest(t, none, "create", "", "web", func(ctx context.Context) {
			if JointFrom(ctx) != nil {
				t.Error("a server without joints gave a create one")
			}
		})
	})

	t.Run("several callers add for one object; a project's companions are stored as its own", func(t *testing.T) {
		released = 0
		other := tenancy.Tenant{Kind: tenancy.Project, Name: "fresh", ID: tenancy.ProjectID("uid-of-fresh")}
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			j := JointFrom(ctx)
			own := []Companion{{Resource: corev1.Resource("jointclaims"), Tenant: other, Object: &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "boot", UID: "boot"}}}}
			if !j.Add("uid-d", own, nil, nil) || !j.Add("uid-d", companion("d"), release, nil) {
				t.Fatal("a second caller could not add for the same object")
			}
			if j.Add("uid-elsewhere", companion("e"), release, nil) {
				t.Fatal("companions of another object were added to a joint that holds some")
			}
			bad := []Companion{{Resource: corev1.Resource("jointclaims"), Tenant: tenancy.ProjectTenant("unresolved"), Object: object("u", "u")}}
			if j.Add("uid-d", bad, nil, nil) {
				t.Fatal("a companion of a project without a storage id was added")
			}
			if err := objects.Create(ctx, "/jointobjects/default/d", object("d", "uid-d"), &corev1.ConfigMap{}, 0); err != nil {
				t.Fatal(err)
			}
		})
		objRev := modRevision(t, "/registry/jointobjects/"+tenancy.ProjectID("uid-of-web")+"/default/d")
		ownRev := modRevision(t, "/registry/jointclaims/"+other.ID+"/kube-system/boot")
		if objRev == 0 || ownRev != objRev || modRevision(t, "/registry/jointclaims/_platform/default/d") != objRev {
			t.Fatalf("object at revision %d, the project's companion at %d: want one transaction", objRev, ownRev)
		}
		got := &corev1.ConfigMap{}
		if err := claims.Get(in("fresh"), "/jointclaims/kube-system/boot", storage.GetOptions{}, got); err != nil {
			t.Fatalf("the project's companion, read in the project: %v", err)
		}
		if got.Annotations[tenancy.AnnotationKey] != "fresh" || got.Annotations[tenancy.IDAnnotationKey] != other.ID || got.UID != "boot" {
			t.Fatalf("the project's companion reads back as %+v", got.ObjectMeta)
		}
		if err := claims.Get(in("web"), "/jointclaims/kube-system/boot", storage.GetOptions{}, got); !storage.IsNotFound(err) {
			t.Fatalf("the project's companion, read in another project: %v", err)
		}
		if released != 0 {
			t.Fatalf("stored companions released %d times", released)
		}
		// The refused caller's and the stored ones' keys aside, nothing.
		for _, k := range []string{"/registry/jointclaims/_platform/default/e", "/registry/jointclaims/" + tenancy.UnresolvedSegment + "/default/u"} {
			if modRevision(t, k) != 0 {
				t.Fatalf("%s was stored", k)
			}
		}
	})

	t.Run("a failed create releases every caller's companions, and the request may add anew", func(t *testing.T) {
		released = 0
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			j := JointFrom(ctx)
			if !j.Add("uid-f", companion("f1"), release, nil) || !j.Add("uid-f", companion("f2"), release, nil) {
				t.Fatal("refused")
			}
			// "a" exists: the create fails and stores nothing.
			if err := objects.Create(ctx, "/jointobjects/default/a", object("a", "uid-f"), &corev1.ConfigMap{}, 0); !storage.IsExist(err) {
				t.Fatalf("creating an existing object: %v", err)
			}
			if released != 2 {
				t.Fatalf("released %d times, want once per caller", released)
			}
			if !j.Add("uid-f3", companion("f3"), release, nil) {
				t.Fatal("after a failed create the request cannot add again")
			}
		})
		if released != 3 {
			t.Fatalf("released %d times in all, want 3", released)
		}
		for _, n := range []string{"f1", "f2", "f3"} {
			if modRevision(t, "/registry/jointclaims/_platform/default/"+n) != 0 {
				t.Fatalf("companion %s was stored", n)
			}
		}
	})

	t.Run("a companion whose storage is not built is refused", func(t *testing.T) {
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			c := []Companion{{Resource: corev1.Resource("unbuilt"), Object: object("x", "x")}}
			if JointFrom(ctx).Add("uid-x", c, release, nil) {
				t.Fatal("a companion without storage was accepted")
			}
		})
	})

	// The transaction writes nothing else.
	resp, err := etcdClient.Get(context.Background(), "/registry/jointclaims/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 3 {
		t.Fatalf("%d companions stored, want 3", resp.Count)
	}
}

func TestJointCreateWritesAsTheStoreDoes(t *testing.T) {
	// Encrypted at rest: each value is sealed with its own key as
	// authenticated data, and reads back only through the same transformer.
	block, err := aes.NewCipher([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	transformer, err := aesvalue.NewGCMTransformer(block)
	if err != nil {
		t.Fatal(err)
	}
	c := etcdConfig
	c.Transformer = transformer
	joints := NewJoints(etcdClient, corev1.Resource("sealedclaims"))
	objects, _ := newStorageOf(t, "sealedobjects", Options{Joints: joints}, c)
	claims, _ := newStorageOf(t, "sealedclaims", Options{Joints: joints}, c)
	inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
		claim := []Companion{{Resource: corev1.Resource("sealedclaims"), Object: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "s", UID: "claim-s"}, Data: map[string]string{"for": "s"}}}}
		if !JointFrom(ctx).Add("uid-s", claim, func() { t.Error("a stored companion was released") }, nil) {
			t.Fatal("refused")
		}
		obj := object("s", "uid-s")
		obj.Data = map[string]string{"secret": "value"}
		if err := objects.Create(ctx, "/sealedobjects/default/s", obj, &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	})
	for _, key := range []string{"/registry/sealedobjects/" + tenancy.ProjectID("uid-of-web") + "/default/s", "/registry/sealedclaims/_platform/default/s"} {
		resp, err := etcdClient.Get(context.Background(), key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("%s: %v %v", key, resp, err)
		}
		if v := string(resp.Kvs[0].Value); strings.Contains(v, "default") {
			t.Fatalf("%s is stored in the clear: %q", key, v)
		}
	}
	got := &corev1.ConfigMap{}
	if err := objects.Get(in("web"), "/sealedobjects/default/s", storage.GetOptions{}, got); err != nil || got.Data["secret"] != "value" {
		t.Fatalf("the object reads back as %v: %v", got.Data, err)
	}
	if err := claims.Get(context.Background(), "/sealedclaims/default/s", storage.GetOptions{}, got); err != nil || got.Data["for"] != "s" {
		t.Fatalf("the companion reads back as %v: %v", got.Data, err)
	}
}

func TestJointLifecycle(t *testing.T) {
	joints := NewJoints(etcdClient, corev1.Resource("lifeclaims"))
	objects, _ := newStorage(t, "lifeobjects", Options{Joints: joints})
	newStorage(t, "lifeclaims", Options{Joints: joints})
	claim := func(name string) []Companion {
		return []Companion{{Resource: corev1.Resource("lifeclaims"), Object: object(name, types.UID("claim-"+name))}}
	}
	released := 0
	release := func() { released++ }

	// A create that expires (an Event's lease) stores its companions
	// first, in a transaction of their own.
	inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
		JointFrom(ctx).Add("uid-e", claim("e"), release, func() { t.Error("companions stored apart were told they are stored together") })
		if err := objects.Create(ctx, "/lifeobjects/default/e", object("e", "uid-e"), &corev1.ConfigMap{}, 3600); err != nil {
			t.Fatal(err)
		}
	})
	if modRevision(t, "/registry/lifeclaims/_platform/default/e") == 0 || released != 0 {
		t.Fatalf("the companion of an expiring create: stored %v, released %d times", modRevision(t, "/registry/lifeclaims/_platform/default/e") != 0, released)
	}

	// A transaction etcd refuses before applying it (too large) releases
	// at once, and the request may add its companions again for a retry.
	inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
		j := JointFrom(ctx)
		j.Add("uid-big", claim("big"), release, nil)
		big := object("big", "uid-big")
		big.Data = map[string]string{"v": strings.Repeat("x", 2<<20)}
		if err := objects.Create(ctx, "/lifeobjects/default/big", big, &corev1.ConfigMap{}, 0); err == nil {
			t.Fatal("a 2 MiB create was stored")
		}
		if released != 1 {
			t.Fatalf("a refused transaction released %d times, want 1", released)
		}
		if !j.Add("uid-big2", claim("big2"), release, nil) {
			t.Fatal("after a refused transaction the request cannot add again")
		}
		if err := objects.Create(ctx, "/lifeobjects/default/big2", object("big2", "uid-big2"), &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	})
	if released != 1 || modRevision(t, "/registry/lifeclaims/_platform/default/big2") == 0 || modRevision(t, "/registry/lifeclaims/_platform/default/big") != 0 {
		t.Fatalf("after the retry: released %d times; big2's companion stored %v; big's %v", released,
			modRevision(t, "/registry/lifeclaims/_platform/default/big2") != 0, modRevision(t, "/registry/lifeclaims/_platform/default/big") != 0)
	}

	// Once the request has ended nothing more is added, and a create
	// whose companions its end released (the server answered a timeout
	// while the create went on) is refused rather than stored without them.
	released = 0
	var j *Joint
	var late context.Context
	inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
		j, late = JointFrom(ctx), ctx
		j.Add("uid-t", claim("t"), release, nil)
	})
	if released != 1 {
		t.Fatalf("the request's end released %d times, want 1", released)
	}
	if j.Add("uid-late", claim("late"), release, nil) {
		t.Fatal("a joint took companions after its request ended")
	}
	if err := objects.Create(late, "/lifeobjects/default/t", object("t", "uid-t"), &corev1.ConfigMap{}, 0); !apierrors.IsTimeout(err) {
		t.Fatalf("a create after its companions were released: %v", err)
	}
	if modRevision(t, "/registry/lifeobjects/"+tenancy.ProjectID("uid-of-web")+"/default/t") != 0 {
		t.Fatal("the object was stored without its companions")
	}
}

// stubGuard is a TallyGuard of one tally under a limit, as one replica's
// quota ledger would keep it: it expects what it last knew.
type stubGuard struct {
	known        Tally
	limit, add   int64
	moved        int
	storedAt     int64
	refusedAfter bool
}

const testTally = "_milo/test-tallies/bucket"

func (g *stubGuard) Expect([]int64) []Tally {
	return []Tally{{Key: testTally, Revision: g.known.Revision, Value: g.known.Value, Add: g.add}}
}

func (g *stubGuard) Keys() []string { return []string{testTally} }

func (g *stubGuard) Moved(now []Tally) error {
	g.moved++
	g.known = now[0]
	if now[0].Value+g.add > g.limit {
		g.refusedAfter = true
		return apierrors.NewForbidden(corev1.Resource("configmaps"), "", errors.New("over the limit"))
	}
	return nil
}

func (g *stubGuard) Stored(now []Tally) {
	g.storedAt = now[0].Revision
	g.known = now[0]
}

func tallied(name string) []Companion {
	return []Companion{{Resource: corev1.Resource("tallyclaims"), Object: &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("claim-" + name), Annotations: map[string]string{"tallied": "1"}}}}}
}

// tallyNow reads the test tally: its value and revision.
func tallyNow(t *testing.T) (int64, int64) {
	t.Helper()
	resp, err := etcdClient.Get(context.Background(), "/registry/"+testTally)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, 0
	}
	var v int64
	if _, err := fmt.Sscan(string(resp.Kvs[0].Value), &v); err != nil {
		t.Fatal(err)
	}
	return v, resp.Kvs[0].ModRevision
}

// TestTalliesBoundCreatesOfEveryReplica: creates whose companions add to a
// tally, each under a guard that knew nothing of the others (as replicas'
// ledgers would not), store no more than the limit; a delete of a
// companion takes from the tally in its own transaction.
func TestTalliesBoundCreatesOfEveryReplica(t *testing.T) {
	joints := NewJoints(etcdClient, corev1.Resource("tallyclaims"))
	joints.Tallied(corev1.Resource("tallyclaims"), func(obj runtime.Object) ([]Tally, string) {
		if m, err := meta.Accessor(obj); err == nil && m.GetAnnotations()["tallied"] == "1" {
			return []Tally{{Key: testTally, Add: 1}}, ""
		}
		return nil, ""
	})
	objects, _ := newStorage(t, "tallyobjects", Options{Joints: joints})
	claims, _ := newStorage(t, "tallyclaims", Options{Joints: joints})
	create := func(name string, g *stubGuard) (released int, err error) {
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			j := JointFrom(ctx)
			uid := types.UID("uid-" + name)
			if !j.Add(uid, tallied(name), func() { released++ }, nil) || !j.Tally(g) {
				t.Fatal("the joint refused the companions or their guard")
			}
			err = objects.Create(ctx, "/tallyobjects/default/"+name, object(name, uid), &corev1.ConfigMap{}, 0)
		})
		return released, err
	}
	objectRev := func(name string) int64 {
		return modRevision(t, "/registry/tallyobjects/"+tenancy.ProjectID("uid-of-web")+"/default/"+name)
	}

	a := &stubGuard{limit: 2, add: 1}
	if _, err := create("a", a); err != nil || a.moved != 0 {
		t.Fatalf("the first create: %v, asked again %d times", err, a.moved)
	}
	if v, rev := tallyNow(t); v != 1 || rev != objectRev("a") || a.storedAt != rev {
		t.Fatalf("after one create the tally is %d at %d (object at %d, guard told %d)", v, rev, objectRev("a"), a.storedAt)
	}
	// Another replica's guard knew nothing: told what the tally holds, it
	// decides again and the create is stored.
	b := &stubGuard{limit: 2, add: 1}
	if _, err := create("b", b); err != nil || b.moved != 1 {
		t.Fatalf("a create under a guard that knew nothing: %v, asked again %d times", err, b.moved)
	}
	if v, rev := tallyNow(t); v != 2 || rev != objectRev("b") || modRevision(t, "/registry/tallyclaims/_platform/default/b") != rev {
		t.Fatalf("after two creates the tally is %d at %d, the object at %d", v, rev, objectRev("b"))
	}
	// The third is over the limit: refused, nothing stored, released.
	c := &stubGuard{limit: 2, add: 1}
	released, err := create("c", c)
	if !apierrors.IsForbidden(err) || !c.refusedAfter || released != 1 {
		t.Fatalf("a create over the limit: %v (refused by its guard: %v, released %d times)", err, c.refusedAfter, released)
	}
	if objectRev("c") != 0 || modRevision(t, "/registry/tallyclaims/_platform/default/c") != 0 {
		t.Fatal("a refused create stored something")
	}
	if v, _ := tallyNow(t); v != 2 {
		t.Fatalf("a refused create moved the tally to %d", v)
	}

	// Deleting a companion takes it from the tally, in its transaction;
	// the last one deletes the tally.
	out := &corev1.ConfigMap{}
	if err := claims.Delete(context.Background(), "/tallyclaims/default/a", out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, rev := tallyNow(t); v != 1 || out.Name != "a" || out.ResourceVersion != fmt.Sprint(rev) {
		t.Fatalf("after a delete the tally is %d at %d; the delete answered %s at %s", v, rev, out.Name, out.ResourceVersion)
	}
	if err := claims.Delete(context.Background(), "/tallyclaims/default/a", out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); !storage.IsNotFound(err) {
		t.Fatalf("deleting it again: %v", err)
	}
	wrongUID := types.UID("not-b")
	if err := claims.Delete(context.Background(), "/tallyclaims/default/b", out, &storage.Preconditions{UID: &wrongUID}, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err == nil {
		t.Fatal("a delete whose preconditions fail was made")
	}
	if v, _ := tallyNow(t); v != 1 {
		t.Fatalf("a refused delete moved the tally to %d", v)
	}
	if err := claims.Delete(context.Background(), "/tallyclaims/default/b", out, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, rev := tallyNow(t); v != 0 || rev != 0 {
		t.Fatalf("with no companion left the tally is %d at %d", v, rev)
	}
	// A guard that knew a tally since deleted is told so, and stores.
	if _, err := create("d", b); err != nil || b.moved != 2 {
		t.Fatalf("a create under a guard that knew a deleted tally: %v, asked again %d times", err, b.moved)
	}
	if v, _ := tallyNow(t); v != 1 {
		t.Fatalf("the tally is %d, want 1", v)
	}

	// A tally left wrong (a tallied companion deleted by a server without
	// tallies) is counted again from what the companions hold.
	if _, err := etcdClient.Put(context.Background(), "/registry/"+testTally, "5"); err != nil {
		t.Fatal(err)
	}
	if wrote, err := joints.Recount(context.Background(), corev1.Resource("tallyclaims"), "default", testTally); err != nil || !wrote {
		t.Fatalf("recounting a tally left at 5: wrote %v, %v", wrote, err)
	}
	if v, _ := tallyNow(t); v != 1 {
		t.Fatalf("recounted, the tally is %d, want 1", v)
	}
	if wrote, err := joints.Recount(context.Background(), corev1.Resource("tallyclaims"), "default", testTally); err != nil || wrote {
		t.Fatalf("recounting a right tally: wrote %v, %v", wrote, err)
	}
}

// Resources kept in another etcd, named alone or by their group's
// wildcard, are out of the joint transactions' reach; the rest are not.
func TestJointsReachOnlyTheirEtcd(t *testing.T) {
	j := NewJoints(nil)
	j.Elsewhere(corev1.Resource("events"), schema.GroupResource{Group: "apps", Resource: "*"})
	for gr, want := range map[schema.GroupResource]bool{
		corev1.Resource("configmaps"):                        true,
		corev1.Resource("events"):                            false,
		{Group: "apps", Resource: "deployments"}:             false,
		{Group: "batch", Resource: "jobs"}:                   true,
		{Group: "apps.example.com", Resource: "deployments"}: true,
	} {
		if got := j.reaches(gr); got != want {
			t.Errorf("the joints reach %s: %v, want %v", gr, got, want)
		}
	}
}

// An override of a group's every resource ("apps/*") keeps each of them
// elsewhere, as upstream's storage factory applies it; the server reads
// its overrides through KeptElsewhere too.
func TestKeptElsewhereReadsGroupWildcards(t *testing.T) {
	elsewhere := map[schema.GroupResource]bool{{Resource: "events"}: true, {Group: "apps", Resource: "*"}: true}
	for gr, want := range map[schema.GroupResource]bool{
		{Resource: "events"}:                     true,
		{Resource: "configmaps"}:                 false,
		{Group: "apps", Resource: "deployments"}: true,
		{Group: "batch", Resource: "jobs"}:       false,
	} {
		if got := KeptElsewhere(elsewhere, gr); got != want {
			t.Errorf("%s kept elsewhere: %v, want %v", gr, got, want)
		}
	}
}
