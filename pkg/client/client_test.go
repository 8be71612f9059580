package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// A routed client sends a request to the project its context names (after
// any path of the host), with the project's storage id, and to the platform
// without one.
func TestRoutedClientReachesTheProjectOfTheContext(t *testing.T) {
	type seen struct{ path, id string }
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, seen{r.URL.Path, r.Header.Get(tenancy.ExpectedProjectIDHeader)})
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","namespace":"default"}}`))
	}))
	defer srv.Close()
	for _, host := range []string{srv.URL, srv.URL + "/proxy/"} {
		got = nil
		kube, err := kubernetes.NewForConfig(Routed(&rest.Config{Host: host}))
		if err != nil {
			t.Fatal(err)
		}
		cms := kube.CoreV1().ConfigMaps("default")
		ctx := context.Background()
		if _, err := cms.Get(WithProject(ctx, Project{Name: "alpha", ID: "p.1"}), "x", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Create(WithProject(ctx, Project{Name: "beta"}), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Get(ctx, "x", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		// A name that is not a project's (a DNS label) never reaches the wire.
		if _, err := cms.Get(WithProject(ctx, Project{Name: "../../api/v1"}), "x", metav1.GetOptions{}); err == nil {
			t.Error("a request to project ../../api/v1 was sent")
		}
		prefix := ""
		if host != srv.URL {
			prefix = "/proxy"
		}
		want := []seen{
			{prefix + tenancy.ProjectPath("alpha") + "/api/v1/namespaces/default/configmaps/x", "p.1"},
			{prefix + tenancy.ProjectPath("beta") + "/api/v1/namespaces/default/configmaps", ""},
			{prefix + "/api/v1/namespaces/default/configmaps/x", ""},
		}
		if len(got) != len(want) {
			t.Fatalf("host %s: requests %v, want %v", host, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("host %s: request %d went to %+v, want %+v", host, i, got[i], want[i])
			}
		}
	}
}

func TestProjectOf(t *testing.T) {
	for _, c := range []struct {
		annotations map[string]string
		want        Project
		ok          bool
	}{
		{nil, Project{}, false},
		{map[string]string{tenancy.AnnotationKey: "alpha", tenancy.IDAnnotationKey: "p.1"}, Project{Name: "alpha", ID: "p.1"}, true},
		{map[string]string{tenancy.AnnotationKey: "old"}, Project{Name: "old", ID: "old"}, true},
	} {
		got, ok := ProjectOf(&metav1.ObjectMeta{Annotations: c.annotations})
		if got != c.want || ok != c.ok {
			t.Errorf("ProjectOf(%v) = %+v %v, want %+v %v", c.annotations, got, ok, c.want, c.ok)
		}
	}
}
