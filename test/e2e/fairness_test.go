package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"go.miloapis.com/milo/pkg/fairness"
	"go.miloapis.com/milo/pkg/tenancy"
)

// TestEveryProjectIsAFlowOfTheProjectsPriorityLevel: API Priority and Fairness
// classifies a project's members' requests into Milo's priority levels for
// projects — LISTs into milo-project-lists, the rest into milo-projects — a
// service account in the project's own kube-system included, which upstream's
// configuration would put in the platform's workload-high; platform requests
// and outsiders' are classified by upstream's configuration.
func TestEveryProjectIsAFlowOfTheProjectsPriorityLevel(t *testing.T) {
	m := shared
	ctx := context.Background()
	uids := func(name string) (types.UID, types.UID) {
		t.Helper()
		fs, err := m.kube(t).FlowcontrolV1().FlowSchemas().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Milo's FlowSchema: %v", err)
		}
		pl, err := m.kube(t).FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("Milo's priority level: %v", err)
		}
		return fs.UID, pl.UID
	}
	fsUID, plUID := uids(fairness.ProjectsName)
	listsFS, listsPL := uids(fairness.ProjectListsName)
	lists, err := m.kube(t).FlowcontrolV1().PriorityLevelConfigurations().Get(ctx, fairness.ProjectListsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l := lists.Spec.Limited; l == nil || *l.BorrowingLimitPercent != 0 || *l.LendablePercent != 0 {
		t.Errorf("the lists' priority level may borrow or lend: %+v", lists.Spec)
	}
	// The shared server asks for sharedListConcurrency project LISTs at once:
	// APF gives the level at most that many seats (shares are whole numbers,
	// so it may be one or two fewer), never more, and none to borrow.
	eventually(t, "the lists' priority level configured", func() error {
		if seats := m.metricSum(t, "apiserver_flowcontrol_upper_limit_seats", `priority_level="`+fairness.ProjectListsName+`"`); seats < 1 || seats > sharedListConcurrency {
			return fmt.Errorf("it may use %v seats, want 1 to %d", seats, sharedListConcurrency)
		}
		return nil
	})

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
	for path, want := range map[string][2]types.UID{
		tenancy.ProjectPath(p) + "/api/v1/namespaces/kube-system/configmaps": {listsFS, listsPL},
		tenancy.ProjectPath(p) + "/api/v1/namespaces":                        {listsFS, listsPL},
		tenancy.ProjectPath(p) + "/api/v1/namespaces/kube-system":            {fsUID, plUID},
		tenancy.ProjectPath(p) + "/apis":                                     {fsUID, plUID},
	} {
		gotFS, gotPL := classified(inProject.Status.Token, path)
		if gotFS != string(want[0]) || gotPL != string(want[1]) {
			t.Errorf("%s by the project's kube-system service account: FlowSchema %q, priority level %q; want %s, %s", path, gotFS, gotPL, want[0], want[1])
		}
	}
	for _, path := range []string{"/api/v1/namespaces/flows-platform/configmaps", "/api/v1/namespaces/flows-platform"} {
		if gotFS, _ := classified(onPlatform.Status.Token, path); gotFS == "" || gotFS == string(fsUID) || gotFS == string(listsFS) {
			t.Errorf("a platform request classified as a project's: FlowSchema %q", gotFS)
		}
	}
	// APF runs before authorization: an outsider's request naming the project
	// (refused afterwards) never joins the project's flow, nor does a request
	// naming a project that does not exist.
	for _, path := range []string{
		tenancy.ProjectPath(p) + "/api/v1/namespaces/default/configmaps",
		tenancy.ProjectPath("flows-no-such-project") + "/api/v1/namespaces/default/configmaps",
	} {
		if gotFS, _ := classified("carol-token", path); gotFS == "" || gotFS == string(fsUID) || gotFS == string(listsFS) {
			t.Errorf("%s by an outsider: FlowSchema %q", path, gotFS)
		}
	}
}
