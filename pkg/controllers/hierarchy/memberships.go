package hierarchy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	resourcemanagerv1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/iam/users"
	"go.miloapis.com/milo/pkg/tenancy"
)

// syncMembership turns each role of an OrganizationMembership into a
// PolicyBinding of that role to the member on the Organization, owned by the
// membership, and reports them in status.appliedRoles. Bindings of roles the
// membership no longer lists are deleted, and so are all of them before the
// membership goes (no garbage collector runs: the finalizer waits for this).
func (c *Controllers) syncMembership(ctx context.Context, u *unstructured.Unstructured) error {
	if u.GetDeletionTimestamp() != nil {
		if err := c.deleteBindingsOf(ctx, u, nil); err != nil {
			return err
		}
		return removeFinalizer(ctx, c.dynamic, hierarchy.Memberships, u, hierarchy.MembershipFinalizer)
	}
	// Bindings are made only once the finalizer is in place, so none outlives the membership.
	if wrote, err := addFinalizers(ctx, c.dynamic, hierarchy.Memberships, u, hierarchy.MembershipFinalizer); wrote || err != nil {
		return err
	}
	return c.applyMembership(ctx, u)
}

func (c *Controllers) applyMembership(ctx context.Context, u *unstructured.Unstructured) error {
	var m resourcemanagerv1alpha1.OrganizationMembership
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
		return err
	}
	applied := make([]resourcemanagerv1alpha1.AppliedRole, 0, len(m.Spec.Roles))
	keep := map[string]bool{}
	var failed error
	for _, role := range m.Spec.Roles {
		if role.Namespace == "" {
			role.Namespace = m.Namespace
		}
		name := membershipBindingName(m.Name, role)
		keep[name] = true
		status := resourcemanagerv1alpha1.AppliedRole{Name: role.Name, Namespace: role.Namespace, PolicyBindingName: name, Status: "Applied"}
		if err := c.ensureMembershipBinding(ctx, u, &m, role, name); err != nil {
			status.Status, status.Message, status.PolicyBindingName = "Pending", err.Error(), ""
			var taken errNameTaken
			if !errors.As(err, &taken) {
				failed = err
			}
		}
		applied = append(applied, status)
	}
	if err := c.deleteBindingsOf(ctx, u, keep); err != nil {
		return err
	}
	ready := metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "RolesApplied", Message: fmt.Sprintf("%d role(s) bound on organization %s", len(applied), m.Spec.OrganizationRef.Name)}
	for _, a := range applied {
		if a.Status != "Applied" {
			ready = metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: "RolesPending", Message: "role " + a.Namespace + "/" + a.Name + ": " + a.Message}
			break
		}
	}
	if err := c.setMembershipStatus(ctx, u, applied, ready); err != nil {
		return err
	}
	return failed
}

// errNameTaken: the binding's name belongs to a binding the membership does not own.
type errNameTaken struct{ name string }

func (e errNameTaken) Error() string {
	return "PolicyBinding " + e.name + " exists and does not belong to this membership"
}

func (c *Controllers) ensureMembershipBinding(ctx context.Context, u *unstructured.Unstructured, m *resourcemanagerv1alpha1.OrganizationMembership, role resourcemanagerv1alpha1.RoleReference, name string) error {
	spec := map[string]any{
		"roleRef":  map[string]any{"name": role.Name, "namespace": role.Namespace},
		"subjects": []any{map[string]any{"kind": "User", "name": m.Spec.UserRef.Name}},
		"resourceSelector": map[string]any{"resourceRef": map[string]any{
			"apiGroup": organizations.Group, "kind": "Organization", "name": m.Spec.OrganizationRef.Name}},
	}
	client := c.dynamic.Resource(policyBindings).Namespace(m.Namespace)
	existing, err := client.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		binding := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": policyBindings.GroupVersion().String(), "kind": "PolicyBinding",
			"metadata": map[string]any{"name": name, "namespace": m.Namespace},
			"spec":     spec,
		}}
		binding.SetOwnerReferences([]metav1.OwnerReference{membershipOwner(u)})
		_, err = client.Create(ctx, binding, metav1.CreateOptions{FieldManager: fieldManager})
		if !apierrors.IsAlreadyExists(err) {
			return err
		}
		// Made a moment ago (the organization's set-up applies its owner's
		// membership at once): look at what is there.
		existing, err = client.Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return err
	}
	if !ownedBy(existing, u) {
		return errNameTaken{name}
	}
	if current, _, _ := unstructured.NestedMap(existing.Object, "spec"); reflect.DeepEqual(current, spec) {
		return nil
	}
	existing.Object["spec"] = spec
	_, err = client.Update(ctx, existing, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

func membershipOwner(u *unstructured.Unstructured) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: hierarchy.Memberships.GroupVersion().String(), Kind: "OrganizationMembership",
		Name: u.GetName(), UID: u.GetUID(), Controller: &yes}
}

func ownedBy(obj, owner *unstructured.Unstructured) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}

// deleteBindingsOf deletes the PolicyBindings the membership owns, except those in keep.
func (c *Controllers) deleteBindingsOf(ctx context.Context, u *unstructured.Unstructured, keep map[string]bool) error {
	objs, err := c.bindings.GetIndexer().ByIndex(cache.NamespaceIndex, u.GetNamespace())
	if err != nil {
		return err
	}
	for _, obj := range objs {
		b, ok := obj.(*unstructured.Unstructured)
		if !ok || keep[b.GetName()] || !ownedBy(b, u) {
			continue
		}
		err := c.dynamic.Resource(policyBindings).Namespace(b.GetNamespace()).Delete(ctx, b.GetName(),
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(b.GetUID())}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
	}
	return nil
}

func (c *Controllers) setMembershipStatus(ctx context.Context, u *unstructured.Unstructured, applied []resourcemanagerv1alpha1.AppliedRole, ready metav1.Condition) error {
	var m resourcemanagerv1alpha1.OrganizationMembership
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &m); err != nil {
		return err
	}
	ready.ObservedGeneration = u.GetGeneration()
	status := m.Status.DeepCopy()
	status.ObservedGeneration = u.GetGeneration()
	status.AppliedRoles = applied
	meta.SetStatusCondition(&status.Conditions, ready)
	if reflect.DeepEqual(status, &m.Status) {
		return nil
	}
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	updated := u.DeepCopy()
	updated.Object["status"] = raw
	_, err = c.dynamic.Resource(hierarchy.Memberships).Namespace(u.GetNamespace()).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// membershipBindingName names the binding of one role of a membership:
// {membership}.{role} for a platform role, {membership}.org.{role} for one of
// the organization's roles; hashed when longer than a name may be.
func membershipBindingName(membership string, role resourcemanagerv1alpha1.RoleReference) string {
	name := membership + "." + role.Name
	if role.Namespace != platformNamespace {
		name = membership + ".org." + role.Name
	}
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return membership[:min(len(membership), 200)] + "." + hex.EncodeToString(sum[:8])
}

const platformNamespace = "milo-system"

// makeCreatorOwner makes the organization's creator a member with the
// platform role owner, once, while the organization is being set up, and
// applies the membership at once so that the owner can act as soon as the
// organization is Ready. Later changes are the owners' business.
func (c *Controllers) makeCreatorOwner(ctx context.Context, org *unstructured.Unstructured) error {
	creator := org.GetAnnotations()[hierarchy.CreatorAnnotation]
	if creator == "" {
		return nil
	}
	ns := tenancy.OrganizationNamespace(org.GetName())
	membership := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": hierarchy.Memberships.GroupVersion().String(), "kind": "OrganizationMembership",
		"metadata": map[string]any{"name": users.ObjectName(creator), "namespace": ns,
			"finalizers": []any{hierarchy.MembershipFinalizer}},
		"spec": map[string]any{
			"organizationRef": map[string]any{"name": org.GetName()},
			"userRef":         map[string]any{"name": creator},
			"roles":           []any{map[string]any{"name": "owner", "namespace": platformNamespace}},
		},
	}}
	client := c.dynamic.Resource(hierarchy.Memberships).Namespace(ns)
	created, err := client.Create(ctx, membership, metav1.CreateOptions{FieldManager: fieldManager})
	if apierrors.IsAlreadyExists(err) {
		created, err = client.Get(ctx, membership.GetName(), metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("making %s owner of organization %s: %w", creator, org.GetName(), err)
	}
	if created.GetDeletionTimestamp() != nil {
		return nil
	}
	return c.applyMembership(ctx, created)
}
