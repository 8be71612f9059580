package tenantstorage

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/storage"

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
	joints := NewJoints(etcdClient)
	objects, _ := newStorage(t, "jointobjects", Options{Joints: joints})
	claims, _ := newStorage(t, "jointclaims", Options{Joints: joints})
	released := 0
	release := func() { released++ }

	t.Run("stored together", func(t *testing.T) {
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			if !JointFrom(ctx).Add("uid-a", companion("a"), release) {
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
			JointFrom(ctx).Add("uid-a2", companion("a2"), release)
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
			JointFrom(ctx).Add("uid-b", companion("a"), release)
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
			JointFrom(ctx).Add("uid-other", companion("c"), release)
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

	t.Run("a companion whose storage is not built is refused", func(t *testing.T) {
		inRequest(t, joints, "create", "", "web", func(ctx context.Context) {
			c := []Companion{{Resource: corev1.Resource("unbuilt"), Object: object("x", "x")}}
			if JointFrom(ctx).Add("uid-x", c, release) {
				t.Fatal("a companion without storage was accepted")
			}
		})
	})

	// The transaction writes nothing else.
	resp, err := etcdClient.Get(context.Background(), "/registry/jointclaims/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 {
		t.Fatalf("%d companions stored, want 1", resp.Count)
	}
}
