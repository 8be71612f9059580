package serviceaccount

import (
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.miloapis.com/milo/pkg/projectbootstrap"
)

// The informer's copies of every kube-root-ca.crt that says what is published
// share one map; an edited one keeps its own data, so that sync sees the edit.
func TestKeepSharesThePublishedData(t *testing.T) {
	ctl := New(nil, []byte("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"))
	cm := func(data map[string]string) *corev1.ConfigMap {
		c := projectbootstrap.RootCA("id/web/team", "")
		c.ResourceVersion, c.Data = "3", data
		return c
	}
	var kept []*corev1.ConfigMap
	for _, c := range []*corev1.ConfigMap{cm(map[string]string{rootCAKey: ctl.rootCA}), cm(map[string]string{rootCAKey: ctl.rootCA}), cm(map[string]string{rootCAKey: "edited"})} {
		o, err := ctl.keep(c)
		if err != nil {
			t.Fatal(err)
		}
		kept = append(kept, o.(*corev1.ConfigMap))
	}
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	if !same(kept[0].Data, ctl.published) || !same(kept[1].Data, ctl.published) {
		t.Fatal("published data is kept once per namespace")
	}
	if same(kept[2].Data, ctl.published) || kept[2].Data[rootCAKey] != "edited" {
		t.Fatal("an edited kube-root-ca.crt is kept as published")
	}
	if kept[0].Annotations != nil || kept[0].Name != RootCAConfigMap || kept[0].Namespace != "id/web/team" || kept[0].ResourceVersion != "3" {
		t.Fatalf("kept metadata %+v", kept[0].ObjectMeta)
	}
}

// A project's bootstrap namespace, created a moment ago, waits for informers
// that have not handed out its resource version yet; nothing else waits.
func TestWaitsForBootstrapOnlyWhileInformersLag(t *testing.T) {
	now := time.Now()
	ns := func(name string, age time.Duration, rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv,
			CreationTimestamp: metav1.NewTime(now.Add(-age))}}
	}
	for _, c := range []struct {
		name      string
		inProject bool
		ns        *metav1.PartialObjectMetadata
		seen      uint64
		want      bool
	}{
		{"a new project's default, informer behind", true, ns("default", 0, "100"), 99, true},
		{"a new project's kube-system, informer behind", true, ns("kube-system", time.Second, "100"), 0, true},
		{"the informer has caught up", true, ns("default", 0, "100"), 100, false},
		{"the namespace is older than the wait", true, ns("default", bootstrapWait, "100"), 99, false},
		{"a namespace a user made", true, ns("team", 0, "100"), 99, false},
		{"a platform namespace", false, ns("default", 0, "100"), 99, false},
	} {
		if got := waitsForBootstrap(c.inProject, c.ns.Name, c.ns, c.seen, now); got != c.want {
			t.Errorf("%s: waits %v, want %v", c.name, got, c.want)
		}
	}
	var seen atomic.Uint64
	note := noting(&seen)
	for _, rv := range []string{"5", "9", "7", ""} {
		note(ns("x", 0, rv))
	}
	if seen.Load() != 9 {
		t.Errorf("seen %d after 5, 9, 7 and none, want 9", seen.Load())
	}
}
