package attack

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/tenancy"
)

// answer is what a caller learns from one request: its status and its body
// with the tenant's name replaced, so that answers about two names compare.
type answer struct {
	code int
	body string
}

// ask sends one request with cfg's credentials to cfg.Host + path, as a
// plain HTTP client would, and returns the answer with name replaced.
func ask(t *testing.T, cfg *rest.Config, verb, path, body, name string) answer {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(verb, cfg.Host+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", verb, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := string(raw)
	if name != "" {
		out = strings.ReplaceAll(out, name, "NAME")
	}
	return answer{code: resp.StatusCode, body: out}
}

// Finding 5: whoever has no access to a tenant gets one answer for an existing
// one and a missing one, on every path family: resources, discovery, OpenAPI,
// version and health, access and identity reviews, platform-only and unknown
// kinds. Callers: anonymous, an authenticated user with no grant anywhere, and
// the owner of another organization.
func TestExistenceMatrix(t *testing.T) {
	org := organizationOf(t, malloryToken, "exists")
	project := projectIn(t, malloryToken, org, unique("exists"))
	organizationOf(t, victorToken, "elsewhere") // victor owns one
	// Same length as the existing names, so bodies compare byte for byte.
	missingProject := strings.Repeat("q", len(project))
	missingOrg := strings.Repeat("q", len(org))

	review := func(kind, group string, spec string) string {
		return fmt.Sprintf(`{"apiVersion":"%s","kind":"%s","spec":%s}`, group, kind, spec)
	}
	families := []struct{ verb, path, body string }{
		{"GET", "/api/v1/namespaces/default/configmaps", ""},
		{"GET", "/api/v1/namespaces/default/configmaps/x", ""},
		{"POST", "/api/v1/namespaces/default/configmaps", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`},
		{"GET", "/api/v1/namespaces", ""},
		{"GET", "/api", ""},
		{"GET", "/api/v1", ""},
		{"GET", "/apis", ""},
		{"GET", "/apis/apps", ""},
		{"GET", "/apis/apps/v1", ""},
		{"GET", "/apis/rbac.authorization.k8s.io/v1", ""},
		{"GET", "/openapi/v2", ""},
		{"GET", "/openapi/v3", ""},
		{"GET", "/openapi/v3/api/v1", ""},
		{"GET", "/version", ""}, // 200 for everyone, as in any cluster
		{"GET", "/healthz", ""},
		{"GET", "/readyz", ""},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review("SelfSubjectAccessReview", "authorization.k8s.io/v1", `{"resourceAttributes":{"verb":"get","resource":"configmaps"}}`)},
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews", review("SelfSubjectRulesReview", "authorization.k8s.io/v1", `{"namespace":"default"}`)},
		{"POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`},
		{"GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", ""},
		{"GET", "/apis/example.com/v1/widgets", ""},
		{"GET", "/apis/example.com/v1", ""},
		{"GET", "/metrics", ""},
	}
	callers := map[string]string{"anonymous": "", "eve (no grant)": eveToken, "victor (owner elsewhere)": victorToken}
	tenants := []struct {
		kind              string
		existing, missing string
		path              func(string) string
	}{
		{"project", project, missingProject, tenancy.ProjectPath},
		{"organization", org, missingOrg, tenancy.OrganizationPath},
	}
	for _, tenant := range tenants {
		for who, token := range callers {
			for _, f := range families {
				existing := ask(t, at(token, tenant.path(tenant.existing)), f.verb, f.path, f.body, tenant.existing)
				missing := ask(t, at(token, tenant.path(tenant.missing)), f.verb, f.path, f.body, tenant.missing)
				if existing != missing {
					t.Errorf("%s, %s %s %s: an existing %s answers\n  %d %s\nand a missing one\n  %d %s",
						who, tenant.kind, f.verb, f.path, tenant.kind, existing.code, existing.body, missing.code, missing.body)
				}
			}
		}
	}

	for _, p := range []string{"/version", "/healthz"} {
		if a := ask(t, at("", tenancy.ProjectPath(missingProject)), "GET", p, "", missingProject); a.code != 200 {
			t.Errorf("anonymous GET %s in a project: %d, want 200 (the server's, the same everywhere)", p, a.code)
		}
	}
	// The owner is let in, so the matrix above compares real denials.
	owner := ask(t, at(malloryToken, tenancy.ProjectPath(project)), "GET", "/api/v1/namespaces/default/configmaps", "", project)
	if owner.code != 200 {
		t.Fatalf("the owner lists configmaps in her project: %d %s", owner.code, owner.body)
	}
	if _, err := kube(t, at(malloryToken, tenancy.OrganizationPath(org))).Discovery().ServerGroups(); err != nil {
		t.Fatalf("the owner's discovery in her organization: %v", err)
	}
	if _, err := kube(t, at(malloryToken, tenancy.ProjectPath(project))).CoreV1().ConfigMaps("default").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Validation in an organization's context never tells anything of another
// organization: a Folder or Project naming another organization's folder as
// parent is refused with the message of a parent that does not exist.
func TestValidationNamesNoOtherOrganization(t *testing.T) {
	malOrg := organizationOf(t, malloryToken, "val-mal")
	vicOrg := organizationOf(t, victorToken, "val-vic")
	folder := unique("vic-folder")
	vic := dyn(t, at(victorToken, tenancy.OrganizationPath(vicOrg))).Resource(foldersGVR)
	if _, err := vic.Create(context.Background(), object(foldersGVR, "Folder", folder,
		map[string]any{"parentRef": map[string]any{"kind": "Organization", "name": vicOrg}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mal := dyn(t, at(malloryToken, tenancy.OrganizationPath(malOrg)))
	var messages []string
	probe := unique("probe")
	for _, parent := range []string{folder, strings.Repeat("q", len(folder))} {
		_, err := mal.Resource(projectsGVR).Create(context.Background(), object(projectsGVR, "Project", probe,
			map[string]any{"ownerRef": map[string]any{"kind": "Folder", "name": parent}}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err == nil {
			t.Fatalf("a project under folder %s was admitted", parent)
		}
		msg := strings.ReplaceAll(err.Error(), parent, "NAME")
		if strings.Contains(msg, vicOrg) {
			t.Fatalf("the message names another organization: %s", msg)
		}
		messages = append(messages, msg)
	}
	if messages[0] != messages[1] {
		t.Fatalf("another organization's folder and a missing one are told apart:\n%s\n%s", messages[0], messages[1])
	}
}
