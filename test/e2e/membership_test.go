package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"go.miloapis.com/milo/pkg/tenancy"
)

func membership(name, org, user string, roles ...string) *unstructured.Unstructured {
	var rs []any
	for _, r := range roles {
		rs = append(rs, map[string]any{"name": r, "namespace": "milo-system"})
	}
	obj := objectOf("OrganizationMembership", name, map[string]any{
		"organizationRef": map[string]any{"name": org}, "userRef": map[string]any{"name": user}, "roles": rs})
	obj.SetNamespace(tenancy.OrganizationNamespace(org))
	return obj
}

// appliedRoles is a membership's status.appliedRoles as "role=binding:status".
func appliedRoles(c dynamic.Interface, org, name string) (string, error) {
	u, err := c.Resource(membershipsGVR).Namespace(tenancy.OrganizationNamespace(org)).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if gen, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration"); gen != u.GetGeneration() {
		return "", fmt.Errorf("status of generation %d, object at %d", gen, u.GetGeneration())
	}
	roles, _, _ := unstructured.NestedSlice(u.Object, "status", "appliedRoles")
	var out []string
	for _, r := range roles {
		m := r.(map[string]any)
		out = append(out, fmt.Sprintf("%s=%s:%s", m["name"], m["policyBindingName"], m["status"]))
	}
	return strings.Join(out, ","), nil
}

// bindingsIn lists the PolicyBinding names of an organization.
func bindingsIn(t *testing.T, c dynamic.Interface, org string) string {
	t.Helper()
	list, err := c.Resource(policyBindingsGVR).Namespace(tenancy.OrganizationNamespace(org)).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range list.Items {
		names = append(names, b.GetName())
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// TestOrganizationMembershipsAndTheLastOwner: the creator of an organization
// is its owner through an OrganizationMembership; each role of a membership
// becomes a PolicyBinding on the organization, follows changes of the roles,
// and goes with the membership; the last owner cannot be removed or demoted,
// except by deleting the organization.
func TestOrganizationMembershipsAndTheLastOwner(t *testing.T) {
	m := shared
	ctx := context.Background()
	org := fmt.Sprintf("members-%d", projectSeq.Add(1))
	m.createOrganizationAs(t, "alice-token", org)
	aliceOrg := m.dynamicAs(t, "alice-token", tenancy.OrganizationPath(org))
	bobOrg := m.dynamicAs(t, "bob-token", tenancy.OrganizationPath(org))
	memberships := func(c dynamic.Interface) dynamic.ResourceInterface {
		return c.Resource(membershipsGVR).Namespace(tenancy.OrganizationNamespace(org))
	}

	if got, err := appliedRoles(aliceOrg, org, "alice"); err != nil || got != "owner=alice.owner:Applied" {
		t.Fatalf("the creator's membership: %q %v", got, err)
	}
	if _, err := bobOrg.Resource(organizationsGVR).Get(ctx, org, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob before his membership: %v", err)
	}

	// alice adds bob as a viewer; the binding appears and bob can read.
	if _, err := memberships(aliceOrg).Create(ctx, membership("bob", org, "bob", "viewer"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "bob's viewer role applied", func() error {
		if got, err := appliedRoles(aliceOrg, org, "bob"); err != nil || got != "viewer=bob.viewer:Applied" {
			return fmt.Errorf("%q %v", got, err)
		}
		return nil
	})
	eventually(t, "bob reads his organization", func() error {
		_, err := bobOrg.Resource(organizationsGVR).Get(ctx, org, metav1.GetOptions{})
		return err
	})
	if _, err := memberships(bobOrg).Create(ctx, membership("carol", org, "carol", "owner"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a viewer adds an owner: %v", err)
	}

	// Memberships name their own organization and roles it may use.
	other := membership("x", org, "carol", "viewer")
	unstructured.SetNestedField(other.Object, "acme", "spec", "organizationRef", "name")
	wantInvalid(t, ignoreObject(memberships(aliceOrg).Create(ctx, other, metav1.CreateOptions{})), "spec.organizationRef.name", "can only be of organization")
	foreign := membership("y", org, "carol")
	unstructured.SetNestedSlice(foreign.Object, []any{map[string]any{"name": "viewer", "namespace": "organization-acme"}}, "spec", "roles")
	wantInvalid(t, ignoreObject(memberships(aliceOrg).Create(ctx, foreign, metav1.CreateOptions{})), "spec.roles[0].namespace", "of its own organization")

	// alice is the last owner: she can neither leave nor give up the role.
	err := memberships(aliceOrg).Delete(ctx, "alice", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "last owner") {
		t.Fatalf("deleting the last owner: %v", err)
	}
	mine, err := memberships(aliceOrg).Get(ctx, "alice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unstructured.SetNestedSlice(mine.Object, []any{map[string]any{"name": "viewer", "namespace": "milo-system"}}, "spec", "roles")
	wantInvalid(t, ignoreObject(memberships(aliceOrg).Update(ctx, mine, metav1.UpdateOptions{})), "spec.roles", "last owner")

	// Making bob owner replaces his viewer binding with an owner binding.
	eventually(t, "bob becomes owner", func() error {
		bob, err := memberships(aliceOrg).Get(ctx, "bob", metav1.GetOptions{})
		if err != nil {
			return err
		}
		unstructured.SetNestedSlice(bob.Object, []any{map[string]any{"name": "owner", "namespace": "milo-system"}}, "spec", "roles")
		_, err = memberships(aliceOrg).Update(ctx, bob, metav1.UpdateOptions{})
		return err
	})
	eventually(t, "bob's owner role applied and his viewer binding gone", func() error {
		if got, err := appliedRoles(aliceOrg, org, "bob"); err != nil || got != "owner=bob.owner:Applied" {
			return fmt.Errorf("%q %v", got, err)
		}
		if got := bindingsIn(t, aliceOrg, org); got != "alice.owner,bob.owner" {
			return fmt.Errorf("bindings %s", got)
		}
		return nil
	})

	// Now alice may leave; her binding goes with her membership, and her access with it.
	if err := memberships(aliceOrg).Delete(ctx, "alice", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("alice leaves with another owner in place: %v", err)
	}
	eventually(t, "alice's membership and binding gone", func() error {
		if _, err := memberships(bobOrg).Get(ctx, "alice", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("membership: %v", err)
		}
		if got := bindingsIn(t, bobOrg, org); got != "bob.owner" {
			return fmt.Errorf("bindings %s", got)
		}
		return nil
	})
	eventually(t, "alice loses her access", func() error {
		if _, err := aliceOrg.Resource(organizationsGVR).Get(ctx, org, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			return fmt.Errorf("alice reads the organization: %v", err)
		}
		return nil
	})
	if err := memberships(bobOrg).Delete(ctx, "bob", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("bob, now the last owner, leaves: %v", err)
	}

	// Deleting the organization takes the last owner's membership with it.
	if err := m.dynamicAs(t, "bob-token", "").Resource(organizationsGVR).Delete(ctx, org, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("the owner deletes the organization: %v", err)
	}
	eventuallyWithin(t, 2*time.Minute, "organization "+org+" gone", func() error {
		if _, err := m.dynamic(t).Resource(organizationsGVR).Get(ctx, org, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("organization: %v", err)
		}
		return nil
	})
}

func ignoreObject(_ *unstructured.Unstructured, err error) error { return err }
