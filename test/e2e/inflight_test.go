package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.miloapis.com/milo/pkg/tenancy"
)

// TestACreateInFlightAcrossItsProjectsPurgeLeavesNothing: a create admitted
// before its project's deletion began, held in a webhook until the project
// is purged and gone, fails (its request ends with its project, or its
// transaction finds the project purged) and stores nothing: no object of
// the purged project is left in storage, where the all-projects view would
// show it under the project's name, which another project may take next.
func TestACreateInFlightAcrossItsProjectsPurgeLeavesNothing(t *testing.T) {
	m := shared
	ctx := context.Background()
	n := projectSeq.Add(1)
	label := fmt.Sprintf("inflight-%d", n)
	entered, release := make(chan struct{}, 8), make(chan struct{})
	hookURL, caBundle := admissionHook(t, func(*admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
		select {
		case entered <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-time.After(25 * time.Second):
		}
		return &admissionv1.AdmissionResponse{Allowed: true}
	})

	project := m.newProject(t, "inflight")
	c := m.projectKube(t, project)
	labelledNamespace(t, c, "held", map[string]string{"e2e.milo/inflight": label})
	m.mustKubectl(t, fmt.Sprintf(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: %[1]s}
webhooks:
- name: inflight.e2e.milo
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 30
  clientConfig: {url: %[2]q, caBundle: %[3]s}
  namespaceSelector: {matchLabels: {e2e.milo/inflight: %[1]s}}
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["secrets"]
`, label, hookURL, caBundle), "apply", "-f", "-")
	t.Cleanup(func() { m.kubectl(t, "", "delete", "validatingwebhookconfiguration", label) })

	// A create that reaches the webhook (once every instance serving the
	// project has loaded it) and waits there.
	var createErr chan error
	eventually(t, "a create held in the webhook", func() error {
		createErr = make(chan error, 1)
		go func() {
			_, err := c.CoreV1().Secrets("held").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "late", Finalizers: []string{"example.com/keep"}}}, metav1.CreateOptions{})
			createErr <- err
		}()
		select {
		case <-entered:
			return nil
		case err := <-createErr:
			if err == nil {
				// Not held: stored at once. Let it go and try again.
				s, _ := c.CoreV1().Secrets("held").Get(ctx, "late", metav1.GetOptions{})
				if s != nil {
					s.Finalizers = nil
					c.CoreV1().Secrets("held").Update(ctx, s, metav1.UpdateOptions{})      //nolint:errcheck
					c.CoreV1().Secrets("held").Delete(ctx, "late", metav1.DeleteOptions{}) //nolint:errcheck
				}
			}
			return fmt.Errorf("the create was not held: %v", err)
		}
	})

	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, project, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Released as soon as the Project is gone from storage: the server's
	// own view of the hierarchy, which ends the project's requests, may
	// still hold it, so the create may reach storage, where its
	// transaction requires the project (docs/security.md).
	eventually(t, "the project purged and gone", func() error {
		_, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, project, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("project: %v", err)
		}
		return nil
	})
	close(release)
	var err error
	select {
	case err = <-createErr:
	case <-time.After(time.Minute):
		t.Fatal("the held create did not end")
	}
	if err == nil {
		t.Error("the held create succeeded after its project was purged")
	}
	all := kubeFor(t, m.configAt(t, tenancy.AllProjectsPath))
	list, lerr := all.CoreV1().Secrets("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=late"})
	if lerr != nil {
		t.Fatal(lerr)
	}
	for _, s := range list.Items {
		if s.Annotations[tenancy.AnnotationKey] == project {
			t.Fatalf("a create in flight when its project was purged left %s/%s of the purged project in storage (create answered %v)", s.Namespace, s.Name, err)
		}
	}
}
