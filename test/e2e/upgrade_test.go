package e2e

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	milocrds "go.miloapis.com/milo/pkg/apis/crds"
	"go.miloapis.com/milo/pkg/tenancy"
)

// TestDataDirectoryOfLayout1 starts today's server on a data directory written by
// the Milo that stored projects under their names (testdata/README.md says what it
// holds). Old projects keep their data where it is, the controllers work on them,
// new projects get storage ids, and deleting an old project and creating one of the
// same name starts empty — the recycled-name guarantee holds for data written
// before it existed.
func TestDataDirectoryOfLayout1(t *testing.T) {
	dataDir := t.TempDir()
	untar(t, filepath.Join("testdata", "layout-1-etcd.tar.gz"), dataDir)
	m, err := startMilo(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	ctx := context.Background()

	// Everything written before is there, in the platform and in both projects.
	if cm, err := m.kube(t).CoreV1().ConfigMaps("platform-keep").Get(ctx, "platform-settings", metav1.GetOptions{}); err != nil || cm.Data["k"] != "v" {
		t.Fatalf("platform configmap after the upgrade: %v %v", cm, err)
	}
	for _, p := range []string{"legacy", "legacy-doomed"} {
		c := m.projectKube(t, p)
		if cm, err := c.CoreV1().ConfigMaps("team").Get(ctx, "settings", metav1.GetOptions{}); err != nil || cm.Data["project"] != p {
			t.Fatalf("%s: configmap after the upgrade: %v %v", p, cm, err)
		}
		if s, err := c.CoreV1().Secrets("team").Get(ctx, "creds", metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "s3cret-"+p {
			t.Fatalf("%s: secret after the upgrade: %v", p, err)
		}
		if _, err := c.RbacV1().ClusterRoleBindings().Get(ctx, "legacy-admin", metav1.GetOptions{}); err != nil {
			t.Fatalf("%s: cluster role binding after the upgrade: %v", p, err)
		}
		// The project keeps its name as its storage id, recorded on the Project.
		obj, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, p, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if id := obj.GetAnnotations()[tenancy.StorageIDAnnotation]; id != p {
			t.Fatalf("%s: storage id %q, want its name", p, id)
		}
	}

	// The hierarchy written as custom resources is read by its typed storage,
	// and the CRDs it was served by are gone from storage; Milo's other
	// kinds are still custom resources.
	org, err := m.dynamic(t).Resource(organizationsGVR).Get(ctx, "legacy-org", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if typ, _, _ := unstructured.NestedString(org.Object, "spec", "type"); typ != "Standard" || len(org.GetFinalizers()) == 0 {
		t.Fatalf("old organization read as %v", org.Object)
	}
	crds := crdsAt(t, m.restConfig(t))
	for _, name := range []string{"organizations", "folders", "projects", "organizationmemberships", "projectsuspensions"} {
		if _, err := crds.Get(ctx, name+".resourcemanager.miloapis.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the CRD of %s after the upgrade: %v, want it gone", name, err)
		}
	}
	if _, err := crds.Get(ctx, "roles.iam.miloapis.com", metav1.GetOptions{}); err != nil {
		t.Errorf("the CRD of roles after the upgrade: %v", err)
	}
	// Nor can such a CRD come back: it would name the typed storage's keys.
	def, err := milocrds.Definition("resourcemanager.miloapis.com", "projects")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Create(ctx, def, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("creating the CRD of projects again: %v, want 422", err)
	}

	// The controllers serve old projects: the namespace written before gets its
	// service account and root CA, and deleting it empties and removes it.
	legacy := m.projectKube(t, "legacy")
	eventually(t, "default service account and root CA in an old namespace", func() error {
		if _, err := legacy.CoreV1().ServiceAccounts("team").Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return err
		}
		_, err := legacy.CoreV1().ConfigMaps("team").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
		return err
	})
	// An old project is bootstrapped again once, for what it lacks.
	eventually(t, "kube-system in an old project", func() error {
		_, err := legacy.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		return err
	})

	// A new project is stored under its storage id.
	if err := m.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	m.createProject(t, "fresh")
	m.waitProjectReady(t, "fresh")
	obj, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, "fresh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if id := tenancy.ProjectID(string(obj.GetUID())); obj.GetAnnotations()[tenancy.StorageIDAnnotation] != "" && obj.GetAnnotations()[tenancy.StorageIDAnnotation] != id {
		t.Fatalf("new project's storage id %q, want %q", obj.GetAnnotations()[tenancy.StorageIDAnnotation], id)
	}

	// Deleting an old project removes its data; the next project of that name,
	// in another organization, starts empty.
	if err := m.dynamic(t).Resource(projectsGVR).Delete(ctx, "legacy-doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old project deleted", func() error {
		_, err := m.dynamic(t).Resource(projectsGVR).Get(ctx, "legacy-doomed", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	if err := m.ensureOrganization("newcomer"); err != nil {
		t.Fatal(err)
	}
	recycled := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resourcemanager.miloapis.com/v1alpha1", "kind": "Project",
		"metadata": map[string]any{"name": "legacy-doomed"},
		"spec":     map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": "newcomer"}},
	}}
	if _, err := m.dynamic(t).Resource(projectsGVR).Create(ctx, recycled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	m.waitProjectReady(t, "legacy-doomed")
	c := m.projectKube(t, "legacy-doomed")
	if _, err := c.CoreV1().Secrets("team").Get(ctx, "creds", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the recycled name sees the old secret: %v", err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Get(ctx, "legacy-admin", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the recycled name inherits the old cluster role binding: %v", err)
	}
	nss, err := c.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ns := range nss.Items {
		got = append(got, ns.Name)
	}
	if strings.Join(got, ",") != "default,kube-system" {
		t.Fatalf("the recycled project starts with namespaces %v", got)
	}

	// Deleting a namespace of the old project works as in a new one.
	if err := legacy.CoreV1().Namespaces().Delete(ctx, "team", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "old namespace deleted", func() error {
		_, err := legacy.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})

	// A second start finds the layout upgraded and changes nothing.
	if code, err := m.stop(); err != nil || code != 0 {
		t.Fatalf("stop: exit %d, %v", code, err)
	}
	m, err = startMilo(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	if _, err := m.projectKube(t, "legacy").RbacV1().ClusterRoleBindings().Get(ctx, "legacy-admin", metav1.GetOptions{}); err != nil {
		t.Fatalf("old project after a second start: %v", err)
	}
	if _, err := m.projectKube(t, "legacy-doomed").CoreV1().Secrets("team").Get(ctx, "creds", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("recycled project after a second start: %v", err)
	}
}

// TestDataDirectoryWithQuotaCRDs starts today's server on a data directory
// written by the Milo that served the quota kinds as custom resources
// (testdata/README.md says what it holds). Its grant, bucket, claims (two
// stored with their namespaces, tallied) and registration are read by the
// typed storage; the ledger counts them, so the project is still at its
// limit; deleting a namespace whose claim was tallied then frees one unit,
// no more; and the quota CRDs are gone from storage and cannot come back.
func TestDataDirectoryWithQuotaCRDs(t *testing.T) {
	dataDir := t.TempDir()
	untar(t, filepath.Join("testdata", "quota-crds-etcd.tar.gz"), dataDir)
	m, err := startMilo(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	m.stopOnCleanup(t)
	ctx := context.Background()
	admin := m.dynamic(t)
	const ns = "organization-stored-org"

	crds := crdsAt(t, m.restConfig(t))
	for _, name := range []string{"resourceregistrations", "resourcegrants", "resourceclaims", "allowancebuckets", "claimcreationpolicies", "grantcreationpolicies"} {
		if _, err := crds.Get(ctx, name+".quota.miloapis.com", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the CRD of %s after the upgrade: %v, want it gone", name, err)
		}
	}
	def, err := milocrds.Definition("quota.miloapis.com", "resourceclaims")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Create(ctx, def, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("creating the CRD of claims again: %v, want 422", err)
	}

	reg, err := admin.Resource(registrationsGVR).Get(ctx, "stored-widgets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rt, _, _ := unstructured.NestedString(reg.Object, "spec", "resourceType"); rt != "e2e.example/widgets" {
		t.Fatalf("old registration read as %v", reg.Object)
	}
	// Stored as JSON, it is written in protobuf at its next write, and read so.
	reg.SetLabels(map[string]string{"rewritten": "yes"})
	if _, err := admin.Resource(registrationsGVR).Update(ctx, reg, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("updating the old registration: %v", err)
	}
	if reg, err = admin.Resource(registrationsGVR).Get(ctx, "stored-widgets", metav1.GetOptions{}); err != nil || reg.GetLabels()["rewritten"] != "yes" {
		t.Fatalf("the old registration after its update: %v, %v", reg, err)
	}
	if rt, _, _ := unstructured.NestedString(reg.Object, "spec", "resourceType"); rt != "e2e.example/widgets" {
		t.Fatalf("the old registration after its update read as %v", reg.Object)
	}
	if _, err := admin.Resource(grantsGVR).Namespace(ns).Get(ctx, "namespaces", metav1.GetOptions{}); err != nil {
		t.Fatalf("old grant: %v", err)
	}
	claims, err := admin.Resource(claimsGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(claims.Items) != 4 {
		t.Fatalf("old claims: %d, %v", len(claims.Items), err)
	}
	// The definitions' selectable fields select as they did.
	team, err := admin.Resource(claimsGVR).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.resourceRef.name=team,spec.consumerRef.kind=Project"})
	if err != nil || len(team.Items) != 1 || team.Items[0].GetAnnotations()["quota.miloapis.com/tallied"] != "true" {
		t.Fatalf("the claim of namespace team by field: %v, %v", team, err)
	}
	if _, err := admin.Resource(claimsGVR).Namespace(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.requests=1"}); !apierrors.IsBadRequest(err) {
		t.Fatalf("a field no definition made selectable: %v, want 400", err)
	}
	bucketIs(t, admin.Resource(bucketsGVR).Namespace(ns), "stored", "core/namespaces", 4, 4)

	// The project is at its limit of 4 namespaces, as stored.
	project := m.projectKube(t, "stored")
	newNamespace := func(name string) error {
		_, err := project.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		return err
	}
	if err := newNamespace("one-too-many"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "limit 4 namespace, 4 in use") {
		t.Fatalf("a namespace past the stored limit: %v", err)
	}
	// Deleting a namespace whose claim was stored with it frees its unit.
	if err := project.CoreV1().Namespaces().Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a namespace whose claim was tallied gone, and its unit free", func() error {
		if _, err := project.CoreV1().Namespaces().Get(ctx, "extra", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("still there: %v", err)
		}
		return newNamespace("after")
	})
	if err := newNamespace("after-that"); !apierrors.IsForbidden(err) {
		t.Fatalf("a second namespace where one unit was freed: %v", err)
	}
	bucketIs(t, admin.Resource(bucketsGVR).Namespace(ns), "stored", "core/namespaces", 4, 4)
}

// untar extracts a gzipped tar archive of regular files and directories into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o700); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			if err := out.Close(); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("unexpected entry %s in %s", h.Name, archive)
		}
	}
}
