package serviceaccount

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
