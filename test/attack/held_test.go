package attack

import (
	"context"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.miloapis.com/milo/pkg/tenancy"
)

// What held in the review, kept held: path tricks, continue tokens and bad
// input never carry a request into another tenant or half-write anything.
func TestWhatHeldStaysHeld(t *testing.T) {
	malOrg := organizationOf(t, malloryToken, "held-mal")
	vicOrg := organizationOf(t, victorToken, "held-vic")
	mine := projectIn(t, malloryToken, malOrg, unique("held-mal"))
	victims := projectIn(t, victorToken, vicOrg, unique("held-vic"))
	vic := kube(t, at(victorToken, tenancy.ProjectPath(victims)))
	for _, name := range []string{"s1", "s2", "s3"} {
		if _, err := vic.CoreV1().Secrets("default").Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"password": "victors-" + name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mal := at(malloryToken, "")
	secretsOf := func(p string) string { return tenancy.ProjectPath(p) + "/api/v1/namespaces/default/secrets" }

	// Path tricks: every way of writing another project's path from inside one's own.
	for _, path := range []string{
		tenancy.ProjectPath(mine) + "/../../" + victims + "/control-plane/api/v1/namespaces/default/secrets",
		tenancy.ProjectPath(mine) + "/%2E%2E/%2E%2E/" + victims + "/control-plane/api/v1/namespaces/default/secrets",
		"/apis/resourcemanager.miloapis.com/v1alpha1/projects/" + mine + "%2F..%2F" + victims + "/control-plane/api/v1/namespaces/default/secrets",
		tenancy.ProjectPath(mine) + "/" + secretsOf(victims),
		tenancy.ProjectPath(mine) + "//api/v1/namespaces/default/secrets/../../../../" + secretsOf(victims)[1:],
		secretsOf(victims),
	} {
		if a := ask(t, mal, "GET", path, "", ""); a.code == http.StatusOK || strings.Contains(a.body, "victors-") || strings.Contains(a.body, "dmljdG9ycy") {
			t.Errorf("GET %s as mallory: %d %.200s", path, a.code, a.body)
		}
	}

	// A continue token of the victim's list used in mallory's project lists mallory's only.
	list, err := vic.CoreV1().Secrets("default").List(context.Background(), metav1.ListOptions{Limit: 1})
	if err != nil || list.Continue == "" {
		t.Fatalf("victor's paginated list: %v %v", list, err)
	}
	a := ask(t, at(malloryToken, tenancy.ProjectPath(mine)), "GET", "/api/v1/namespaces/default/secrets?limit=10&continue="+list.Continue, "", "")
	if strings.Contains(a.body, "victors-") || strings.Contains(a.body, "dmljdG9ycy") || strings.Contains(a.body, `"s2"`) {
		t.Errorf("victor's continue token in mallory's project: %d %.300s", a.code, a.body)
	}

	// Bad input is refused with a Status and writes nothing.
	configmaps := tenancy.ProjectPath(mine) + "/api/v1/namespaces/default/configmaps"
	deep := strings.Repeat(`{"a":`, 20000) + "1" + strings.Repeat("}", 20000)
	big := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"x":"` + strings.Repeat("x", 3<<20) + `"}}`
	for what, body := range map[string]string{
		"truncated JSON": `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"trunc`,
		"deep nesting":   `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"deep"},"data":` + deep + `}`,
		"3 MiB":          big,
		"odd name":       `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"../x"}}`,
	} {
		a := ask(t, mal, "POST", configmaps, body, "")
		if a.code < 400 || a.code >= 500 || !strings.Contains(a.body, `"kind":"Status"`) {
			t.Errorf("%s: %d %.200s, want a 4xx Status", what, a.code, a.body)
		}
	}
	cms, err := kube(t, at(malloryToken, tenancy.ProjectPath(mine))).CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		if cm.Name != "kube-root-ca.crt" {
			t.Errorf("bad input left %s behind", cm.Name)
		}
	}
}
