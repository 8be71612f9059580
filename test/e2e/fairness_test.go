package e2e

import (
	"context"
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/fairness"
	"go.miloapis.com/milo/pkg/tenancy"
)

// TestEveryProjectIsAFlowOfTheProjectsPriorityLevel: API Priority and Fairness
// classifies a project's members' requests into Milo's priority level for
// projects — a service account in the project's own kube-system included, which
// upstream's configuration would put in the platform's workload-high — and
// platform requests and outsiders' by upstream's configuration.
func TestEveryProjectIsAFlowOfTheProjectsPriorityLevel(t *testing.T) {
	m := shared
	ctx := context.Background()
	fs, err := m.kube(t).FlowcontrolV1().FlowSchemas().Get(ctx, fairness.ProjectsName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Milo's FlowSchema: %v", err)
	}
	pl, err := m.kube(t).FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, fairness.ProjectsName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Milo's priority level: %v", err)
	}

	p := m.newProject(t, "flows")
	createServiceAccount(t, m.projectKube(t, p), "kube-system", "ci")
	inProject, err := m.projectKube(t, p).CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "ci", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, m.kube(t), "flows-platform")
	createServiceAccount(t, m.kube(t), "flows-platform", "ci")
	onPlatform, err := m.kube(t).CoreV1().ServiceAccounts("flows-platform").CreateToken(ctx, "ci", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// classified returns the FlowSchema and priority level APF chose for a GET of
	// path with token (APF answers them before authorization, so a 403 tells too).
	classified := func(token, path string) (string, string) {
		t.Helper()
		cfg := rest.AnonymousClientConfig(m.restConfig(t))
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedFlowSchemaUID), resp.Header.Get(flowcontrolv1.ResponseHeaderMatchedPriorityLevelConfigurationUID)
	}
	for _, path := range []string{
		tenancy.ProjectPath(p) + "/api/v1/namespaces/kube-system/configmaps",
		tenancy.ProjectPath(p) + "/api/v1/namespaces",
		tenancy.ProjectPath(p) + "/apis",
	} {
		gotFS, gotPL := classified(inProject.Status.Token, path)
		if gotFS != string(fs.UID) || gotPL != string(pl.UID) {
			t.Errorf("%s by the project's kube-system service account: FlowSchema %q, priority level %q; want milo-projects (%s, %s)", path, gotFS, gotPL, fs.UID, pl.UID)
		}
	}
	if gotFS, _ := classified(onPlatform.Status.Token, "/api/v1/namespaces/flows-platform/configmaps"); gotFS == "" || gotFS == string(fs.UID) {
		t.Errorf("a platform request classified as a project's: FlowSchema %q", gotFS)
	}
	// APF runs before authorization: an outsider's request naming the project
	// (refused afterwards) never joins the project's flow, nor does a request
	// naming a project that does not exist.
	for _, path := range []string{
		tenancy.ProjectPath(p) + "/api/v1/namespaces/default/configmaps",
		tenancy.ProjectPath("flows-no-such-project") + "/api/v1/namespaces/default/configmaps",
	} {
		if gotFS, _ := classified("carol-token", path); gotFS == "" || gotFS == string(fs.UID) {
			t.Errorf("%s by an outsider: FlowSchema %q", path, gotFS)
		}
	}
}
