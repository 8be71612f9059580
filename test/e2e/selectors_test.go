package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// admissionHook serves an admission webhook on loopback over TLS for the
// test's length: decide answers each review's request. It returns the
// webhook's URL and the base64 CA bundle a webhook configuration names.
func admissionHook(t *testing.T, decide func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) (url, caBundle string) {
	t.Helper()
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		review.Response = decide(review.Request)
		review.Response.UID = review.Request.UID
		review.Request = nil
		json.NewEncoder(w).Encode(review) //nolint:errcheck
	}))
	t.Cleanup(hook.Close)
	return hook.URL, base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hook.Certificate().Raw}))
}

// labelledNamespace creates namespace name with labels through c.
func labelledNamespace(t *testing.T, c kubernetes.Interface, name string, labels map[string]string) {
	t.Helper()
	if _, err := c.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", name, err)
	}
}

// TestPlatformPolicyNamespaceSelectorsSeeTheProjectsNamespace: a platform
// admission policy's namespaceSelector and namespaceObject are the project's
// namespace for a project's request, never the platform's namespace of that name
// nor another project's.
func TestPlatformPolicyNamespaceSelectorsSeeTheProjectsNamespace(t *testing.T) {
	m := shared
	ctx := context.Background()
	a, b := m.newProject(t, "nssel-a"), m.newProject(t, "nssel-b")
	ca, cb := m.projectKube(t, a), m.projectKube(t, b)
	platform := m.kube(t)
	// The platform's namespace is guarded; the project's namespace of the same name is not.
	labelledNamespace(t, platform, "nssel-team", map[string]string{"e2e.milo/guarded": "true", "e2e.milo/owner": "platform"})
	t.Cleanup(func() { platform.CoreV1().Namespaces().Delete(ctx, "nssel-team", metav1.DeleteOptions{}) }) //nolint:errcheck
	labelledNamespace(t, ca, "nssel-team", nil)
	// A's namespace is guarded; the platform has none of that name, and B's is not guarded.
	labelledNamespace(t, ca, "nssel-guarded", map[string]string{"e2e.milo/guarded": "true", "e2e.milo/owner": a})
	labelledNamespace(t, cb, "nssel-guarded", nil)

	m.mustKubectl(t, `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: nssel-guard}
spec:
  failurePolicy: Fail
  matchConstraints:
    namespaceSelector: {matchLabels: {e2e.milo/guarded: "true"}}
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["configmaps"]
  validations:
  - expression: "object.data[?'verdict'].orValue('') != 'forbidden'"
    messageExpression: "'guarded by ' + namespaceObject.metadata.labels['e2e.milo/owner']"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: nssel-guard}
spec:
  policyName: nssel-guard
  validationActions: [Deny]
`, "apply", "-f", "-")
	t.Cleanup(func() {
		m.kubectl(t, "", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "nssel-guard")
	})

	forbidden := func(c kubernetes.Interface, ns string) error {
		_, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "v-"},
			Data: map[string]string{"verdict": "forbidden"}}, metav1.CreateOptions{})
		return err
	}
	eventually(t, "the policy guards the platform's namespace", func() error {
		if err := forbidden(platform, "nssel-team"); err == nil || !strings.Contains(err.Error(), "guarded by platform") {
			return fmt.Errorf("platform create: %v", err)
		}
		return nil
	})
	// Several instances of the plugin may serve a project's requests, each
	// loading a new policy on its own (as upstream's, eventually): wait until
	// ten requests in a row are refused.
	eventually(t, "the policy guards A's labelled namespace, with A's namespace as namespaceObject", func() error {
		for range 10 {
			if err := forbidden(ca, "nssel-guarded"); err == nil || !strings.Contains(err.Error(), "guarded by "+a) {
				return fmt.Errorf("create in A: %v", err)
			}
		}
		return nil
	})
	for i := 0; i < 3; i++ { // several requests, as several instances may serve them
		if err := forbidden(ca, "nssel-team"); err != nil {
			t.Fatalf("A's unlabelled namespace matched by the platform's labels: %v", err)
		}
		if err := forbidden(cb, "nssel-guarded"); err != nil {
			t.Fatalf("B's unlabelled namespace matched by A's labels: %v", err)
		}
		if err := forbidden(ca, "nssel-guarded"); err == nil {
			t.Fatal("A's guarded namespace let a forbidden object in")
		}
	}
}

// TestPlatformWebhookNamespaceSelectorsSeeTheProjectsNamespace: the same for a
// platform mutating webhook, called for a project's request only when the
// project's namespace matches.
func TestPlatformWebhookNamespaceSelectorsSeeTheProjectsNamespace(t *testing.T) {
	m := shared
	ctx := context.Background()
	hookURL, caBundle := admissionHook(t, func(r *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		patch := `[{"op":"add","path":"/metadata/labels","value":{"e2e.milo/hooked":"` + r.Namespace + `"}}]`
		pt := admissionv1.PatchTypeJSONPatch
		return &admissionv1.AdmissionResponse{Allowed: true, Patch: []byte(patch), PatchType: &pt}
	})

	a := m.newProject(t, "nshook-a")
	ca := m.projectKube(t, a)
	platform := m.kube(t)
	labelledNamespace(t, platform, "nshook-team", map[string]string{"e2e.milo/hook": "true"})
	t.Cleanup(func() { platform.CoreV1().Namespaces().Delete(ctx, "nshook-team", metav1.DeleteOptions{}) }) //nolint:errcheck
	labelledNamespace(t, ca, "nshook-team", nil)
	labelledNamespace(t, ca, "nshook-hooked", map[string]string{"e2e.milo/hook": "true"})

	m.mustKubectl(t, fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: nshook}
webhooks:
- name: nshook.e2e.milo
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  clientConfig: {url: %q, caBundle: %s}
  namespaceSelector: {matchLabels: {e2e.milo/hook: "true"}}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["configmaps"]
`, hookURL, caBundle), "apply", "-f", "-")
	t.Cleanup(func() { m.kubectl(t, "", "delete", "mutatingwebhookconfiguration", "nshook") })

	create := func(c kubernetes.Interface, ns string) map[string]string {
		cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "w-"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create in %s: %v", ns, err)
		}
		return cm.Labels
	}
	eventually(t, "the webhook sees the platform's labelled namespace", func() error {
		if got := create(platform, "nshook-team")["e2e.milo/hooked"]; got != "nshook-team" {
			return fmt.Errorf("label %q", got)
		}
		return nil
	})
	eventually(t, "the webhook sees A's labelled namespace, by its name in A", func() error {
		for range 10 { // every instance serving A's requests has loaded the webhook
			if got := create(ca, "nshook-hooked")["e2e.milo/hooked"]; got != "nshook-hooked" {
				return fmt.Errorf("label %q", got)
			}
		}
		return nil
	})
	for i := 0; i < 3; i++ {
		if got, ok := create(ca, "nshook-team")["e2e.milo/hooked"]; ok {
			t.Fatalf("A's unlabelled namespace matched by the platform's labels (hooked %q)", got)
		}
	}
}
