package tenantstorage

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage"
)

// livesSeq makes the lives tests' names fresh on every run of the package.
var livesSeq atomic.Int64

// TestCreatesRequireTheirProjectToLive: a create, or an update that
// creates, admitted in a project and reaching storage after the project's
// purge stores nothing and answers 404, whatever the server's caches
// still say; a live project without a lives key (stored before it
// existed) is given one at its first create, and a project of a recycled
// name never revives the old one's.
func TestCreatesRequireTheirProjectToLive(t *testing.T) {
	n := livesSeq.Add(1)
	projectsResource, objectsResource := fmt.Sprintf("liveprojects%d", n), fmt.Sprintf("liveobjects%d", n)
	claimsResource := fmt.Sprintf("liveclaims%d", n)
	joints := NewJoints(etcdClient, corev1.Resource(claimsResource))
	joints.RequireLiveProjects("/registry", corev1.Resource(projectsResource))
	projects, _ := newStorage(t, projectsResource, Options{Joints: joints})
	newStorage(t, claimsResource, Options{Joints: joints})
	objects, prefixes := newStorage(t, objectsResource, Options{Joints: joints})
	ctx := context.Background()

	// Projects stand in as ConfigMaps of the platform, named as the
	// project, their UID making its storage id (idOf).
	projectKey := func(name string) string { return "/" + projectsResource + "//" + name }
	newProject := func(name string, uid types.UID) {
		t.Helper()
		p := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
		if err := projects.Create(ctx, projectKey(name), p, &corev1.ConfigMap{}, 0); err != nil {
			t.Fatal(err)
		}
	}
	livesOf := func(project string) string { return livesKeyOf("/registry", idOf(project)) }
	objectKeys := func(project string) []string {
		return etcdKeys(t, "/registry/"+objectsResource+"/"+idOf(project)+"/")
	}
	createIn := func(project, name string) error {
		obj := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
		return objects.Create(in(project), "/"+objectsResource+"/default/"+name, obj, &corev1.ConfigMap{}, 0)
	}
	// updates counts the update function's calls (admission's, in a
	// server): an update that creates makes it once, as upstream does.
	var updates int
	applyIn := func(project, name string) error {
		updates = 0
		return objects.GuaranteedUpdate(in(project), "/"+objectsResource+"/default/"+name, &corev1.ConfigMap{}, true, nil,
			func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
				updates++
				cm := input.(*corev1.ConfigMap).DeepCopy()
				cm.Namespace, cm.Name = "default", name
				cm.Data = map[string]string{"applied": "yes"}
				return cm, nil, nil
			}, nil)
	}
	projectNotFound := func(what string, err error) {
		t.Helper()
		if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "projects.resourcemanager.miloapis.com") {
			t.Fatalf("%s: got %v, want the project not found", what, err)
		}
	}

	alpha := fmt.Sprintf("alpha-%d", n)
	newProject(alpha, types.UID("uid-of-"+alpha))
	if modRevision(t, livesOf(alpha)) == 0 {
		t.Fatal("a Project's create did not store its lives key")
	}
	if err := createIn(alpha, "before"); err != nil {
		t.Fatal(err)
	}
	if err := applyIn(alpha, "applied-before"); err != nil || updates != 1 {
		t.Fatalf("an update that creates: %v, its update made %d times", err, updates)
	}

	// The project's deletion begins, then its purge: creates admitted
	// before either reach storage only now.
	err := projects.GuaranteedUpdate(ctx, projectKey(alpha), &corev1.ConfigMap{}, false, nil,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			p := input.(*corev1.ConfigMap).DeepCopy()
			now := metav1.Now()
			p.DeletionTimestamp = &now
			return p, nil, nil
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Purge(ctx, keyRanges, prefixes, idOf(alpha)); err != nil {
		t.Fatal(err)
	}
	if modRevision(t, livesOf(alpha)) != 0 {
		t.Fatal("the purge left the project's lives key")
	}
	projectNotFound("a create after the purge", createIn(alpha, "late"))
	projectNotFound("an update that creates after the purge", applyIn(alpha, "applied-late"))
	if keys := objectKeys(alpha); len(keys) != 0 {
		t.Fatalf("writes after the purge stored %v", keys)
	}
	// Gone altogether, and its name taken by another project: the old
	// id's creates find the new Project, which is not theirs.
	if err := projects.Delete(ctx, projectKey(alpha), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	projectNotFound("a create with its Project gone", createIn(alpha, "later"))
	newProject(alpha, types.UID("uid-of-"+alpha+"-again"))
	projectNotFound("a create of the old id in a recycled name", createIn(alpha, "recycled"))
	if keys := objectKeys(alpha); len(keys) != 0 {
		t.Fatalf("writes after the purge stored %v", keys)
	}

	// Objects that expire are upstream's to store, with their lease: an
	// update that creates one in a live project is stored as before.
	events, _ := newStorage(t, "events", Options{Joints: joints})
	delta := fmt.Sprintf("delta-%d", n)
	newProject(delta, types.UID("uid-of-"+delta))
	err = events.GuaranteedUpdate(in(delta), "/events/default/ev", &corev1.ConfigMap{}, true, nil,
		func(input runtime.Object, _ storage.ResponseMeta) (runtime.Object, *uint64, error) {
			ev := input.(*corev1.ConfigMap).DeepCopy()
			ev.Namespace, ev.Name = "default", "ev"
			ttl := uint64(3600)
			return ev, &ttl, nil
		}, nil)
	if err != nil {
		t.Fatalf("an update that creates an object that expires: %v", err)
	}

	// A live project with no lives key: given one at its first create,
	// or its first update that creates.
	for i, write := range []func(string, string) error{createIn, applyIn} {
		beta := fmt.Sprintf("beta-%d-%d", n, i)
		newProject(beta, types.UID("uid-of-"+beta))
		if _, err := etcdClient.Delete(ctx, livesOf(beta)); err != nil {
			t.Fatal(err)
		}
		if err := write(beta, "first"); err != nil || (i == 1 && updates != 1) {
			t.Fatalf("the first write in a project without its lives key: %v (an update that creates made %d times)", err, updates)
		}
		if modRevision(t, livesOf(beta)) == 0 {
			t.Fatal("a live project's first write did not give it its lives key")
		}
		if keys := objectKeys(beta); len(keys) != 1 {
			t.Fatalf("the project holds %v, want its one object", keys)
		}
	}

	// A create with a companion and a tally (a joint create, in the
	// tally's turn) is refused the same: nothing stored, the tally
	// unmoved, the companion released.
	gamma := fmt.Sprintf("gamma-%d", n)
	newProject(gamma, types.UID("uid-of-"+gamma))
	if err := projects.Delete(ctx, projectKey(gamma), &corev1.ConfigMap{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := etcdClient.Delete(ctx, livesOf(gamma)); err != nil {
		t.Fatal(err)
	}
	tallyBefore, _ := tallyNow(t)
	released := 0
	inRequest(t, joints, "create", "", gamma, func(ctx context.Context) {
		j := JointFrom(ctx)
		uid := types.UID("uid-guarded")
		claim := []Companion{{Resource: corev1.Resource(claimsResource), Object: &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "guarded", UID: "claim-guarded"}}}}
		if !j.Add(uid, claim, func() { released++ }, nil) || !j.Tally(&stubGuard{limit: 1 << 30, add: 1}) {
			t.Fatal("the joint refused the companion or its guard")
		}
		err = objects.Create(ctx, "/"+objectsResource+"/default/guarded", object("guarded", uid), &corev1.ConfigMap{}, 0)
	})
	projectNotFound("a guarded create in a deleted project", err)
	if keys := objectKeys(gamma); len(keys) != 0 || released != 1 {
		t.Fatalf("a guarded create in a deleted project stored %v, released %d times", keys, released)
	}
	if keys := etcdKeys(t, "/registry/"+claimsResource+"/"); len(keys) != 0 {
		t.Fatalf("its companion was stored: %v", keys)
	}
	if v, _ := tallyNow(t); v != tallyBefore {
		t.Fatalf("the refused create moved the tally from %d to %d", tallyBefore, v)
	}
}

// BenchmarkCreateInLiveProject times creates in a project stored by
// upstream's transaction against creates whose transaction requires the
// project's lives key, one after another and 64 at a time.
func BenchmarkCreateInLiveProject(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		for _, lives := range []bool{false, true} {
			b.Run(fmt.Sprintf("parallel=%v/lives=%v", parallel, lives), func(b *testing.B) {
				run := livesSeq.Add(1)
				resource, projectsResource := fmt.Sprintf("benchlive%d", run), fmt.Sprintf("benchliveprojects%d", run)
				project := fmt.Sprintf("bench-live-%d", run)
				joints := NewJoints(etcdClient)
				if lives {
					joints.RequireLiveProjects("/registry", corev1.Resource(projectsResource))
				}
				projects, _ := newStorage(b, projectsResource, Options{Joints: joints})
				p := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: project, UID: types.UID("uid-of-" + project)}}
				if err := projects.Create(context.Background(), "/"+projectsResource+"//"+project, p, &corev1.ConfigMap{}, 0); err != nil {
					b.Fatal(err)
				}
				s, _ := newStorage(b, resource, Options{Joints: joints})
				ctx := in(project)
				var n atomic.Int64
				create := func(out *corev1.ConfigMap) error {
					name := fmt.Sprintf("cm-%d", n.Add(1))
					return s.Create(ctx, "/"+resource+"/ns/"+name, configMap("ns", name, 1024), out, 0)
				}
				b.ReportAllocs()
				b.ResetTimer()
				if !parallel {
					out := &corev1.ConfigMap{}
					for range b.N {
						if err := create(out); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(32) // 64 writers on two cores
				b.RunParallel(func(pb *testing.PB) {
					out := &corev1.ConfigMap{}
					for pb.Next() {
						if err := create(out); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
