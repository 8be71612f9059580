// Package quota serves Milo's provider quota group, quota.miloapis.com
// (ResourceRegistrations, ResourceGrants, ResourceClaims, AllowanceBuckets,
// ClaimCreationPolicies and GrantCreationPolicies), from typed storage
// (package typedgroup). A claim is stored with every charged object and a
// grant and a bucket are kept per consumer: as custom resources, each claim
// was decoded and coerced to its schema as the watch cache read it, which
// made a charged create cost twice the CPU of one under no quota.
//
// Each kind is checked against the schema of its generated definition, with
// the validators the apiserver runs for a custom resource, so what the
// definitions refused is refused with the same messages.
package quota

import (
	"maps"
	"slices"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	"k8s.io/utils/ptr"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
)

// Group is the quota group.
var Group = &typedgroup.Group{
	Version: v1alpha1.SchemeGroupVersion,
	Kinds: []typedgroup.Kind{
		kind("resourceregistrations", "resourceregistration", false, func() runtime.Object { return &v1alpha1.ResourceRegistration{} }, func() runtime.Object { return &v1alpha1.ResourceRegistrationList{} },
			selectable(func(r *v1alpha1.ResourceRegistration) fields.Set {
				return fields.Set{"spec.consumerType.kind": r.Spec.ConsumerType.Kind, "spec.consumerType.apiGroup": r.Spec.ConsumerType.APIGroup, "spec.resourceType": r.Spec.ResourceType}
			})),
		kind("resourcegrants", "resourcegrant", true, func() runtime.Object { return &v1alpha1.ResourceGrant{} }, func() runtime.Object { return &v1alpha1.ResourceGrantList{} },
			selectable(func(g *v1alpha1.ResourceGrant) fields.Set {
				return fields.Set{"spec.consumerRef.kind": g.Spec.ConsumerRef.Kind, "spec.consumerRef.name": g.Spec.ConsumerRef.Name}
			})),
		// A claim has no status subresource: it is written whole, as the
		// ledger reserves its units before it is stored.
		withStatusInMain(kind("resourceclaims", "resourceclaim", true, func() runtime.Object { return &v1alpha1.ResourceClaim{} }, func() runtime.Object { return &v1alpha1.ResourceClaimList{} },
			selectable(func(c *v1alpha1.ResourceClaim) fields.Set {
				ref := c.Spec.ResourceRef
				if ref == nil {
					ref = &v1alpha1.UnversionedObjectReference{}
				}
				return fields.Set{"spec.consumerRef.kind": c.Spec.ConsumerRef.Kind, "spec.consumerRef.name": c.Spec.ConsumerRef.Name,
					"spec.resourceRef.apiGroup": ref.APIGroup, "spec.resourceRef.kind": ref.Kind, "spec.resourceRef.name": ref.Name, "spec.resourceRef.namespace": ref.Namespace}
			}))),
		kind("allowancebuckets", "allowancebucket", true, func() runtime.Object { return &v1alpha1.AllowanceBucket{} }, func() runtime.Object { return &v1alpha1.AllowanceBucketList{} },
			selectable(func(b *v1alpha1.AllowanceBucket) fields.Set {
				return fields.Set{"spec.consumerRef.kind": b.Spec.ConsumerRef.Kind, "spec.consumerRef.name": b.Spec.ConsumerRef.Name, "spec.resourceType": b.Spec.ResourceType}
			})),
		kind("claimcreationpolicies", "claimcreationpolicy", false, func() runtime.Object { return &v1alpha1.ClaimCreationPolicy{} }, func() runtime.Object { return &v1alpha1.ClaimCreationPolicyList{} },
			selectable(func(p *v1alpha1.ClaimCreationPolicy) fields.Set {
				return fields.Set{"spec.trigger.resource.kind": p.Spec.Trigger.Resource.Kind, "spec.trigger.resource.apiVersion": p.Spec.Trigger.Resource.APIVersion}
			})),
		kind("grantcreationpolicies", "grantcreationpolicy", false, func() runtime.Object { return &v1alpha1.GrantCreationPolicy{} }, func() runtime.Object { return &v1alpha1.GrantCreationPolicyList{} },
			selectable(func(p *v1alpha1.GrantCreationPolicy) fields.Set {
				return fields.Set{"spec.trigger.resource.kind": p.Spec.Trigger.Resource.Kind, "spec.trigger.resource.apiVersion": p.Spec.Trigger.Resource.APIVersion}
			})),
	},
	AddToScheme:  v1alpha1.AddToScheme,
	Definitions:  v1alpha1.GetOpenAPIDefinitions,
	ModelPackage: "com.miloapis.quota.v1alpha1.",
	// The definitions' one default: a policy is enabled unless it says
	// otherwise, and says so.
	Defaults: func(scheme *runtime.Scheme) {
		scheme.AddTypeDefaultingFunc(&v1alpha1.ClaimCreationPolicy{}, func(obj any) {
			defaultDisabled(&obj.(*v1alpha1.ClaimCreationPolicy).Spec.Disabled)
		})
		scheme.AddTypeDefaultingFunc(&v1alpha1.GrantCreationPolicy{}, func(obj any) {
			defaultDisabled(&obj.(*v1alpha1.GrantCreationPolicy).Spec.Disabled)
		})
	},
}

func defaultDisabled(disabled **bool) {
	if *disabled == nil {
		*disabled = ptr.To(false)
	}
}

func init() {
	Group.Install(legacyscheme.Scheme)
}

// kind is a quota kind, checked against its definition's schema: the whole
// object on a write of the main resource, its status on a status write (the
// rest is as stored).
func kind(resource, singular string, namespaced bool, newObject, newList func() runtime.Object, selectable typedgroup.Kind) typedgroup.Kind {
	schema := typedgroup.MustSchemaOf(v1alpha1.SchemeGroupVersion, resource)
	return typedgroup.Kind{Resource: resource, Singular: singular, Namespaced: namespaced, New: newObject, NewList: newList,
		Name: apimachineryvalidation.NameIsDNSSubdomain, Fields: selectable.Fields, SetFields: selectable.SetFields,
		Spec: schema.Validate,
		Status: func(obj, old runtime.Object) field.ErrorList {
			var errs field.ErrorList
			for _, err := range schema.Validate(obj, old) {
				if err.Field == "status" || strings.HasPrefix(err.Field, "status.") {
					errs = append(errs, err)
				}
			}
			return errs
		}}
}

// selectable are a kind's selectable fields (its definition's
// selectableFields), read by of from an object of type T: the Fields and
// SetFields of a Kind.
func selectable[T any](of func(*T) fields.Set) typedgroup.Kind {
	var zero T
	return typedgroup.Kind{
		Fields: slices.Sorted(maps.Keys(of(&zero))),
		SetFields: func(obj runtime.Object, set fields.Set) {
			if t, ok := any(obj).(*T); ok {
				maps.Copy(set, of(t))
			}
		},
	}
}

func withStatusInMain(k typedgroup.Kind) typedgroup.Kind {
	k.StatusInMain = true
	return k
}

// StorageProvider installs the group; built, when set, is handed each
// resource's storage, so that the server may read it in-process.
func StorageProvider(built func(resource string, storage *typedgroup.REST)) typedgroup.StorageProvider {
	return typedgroup.StorageProvider{Group: Group, Built: built}
}
