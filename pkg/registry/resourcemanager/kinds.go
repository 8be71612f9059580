package resourcemanager

import (
	"reflect"
	"regexp"
	"slices"
	"unicode/utf8"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
)

// kinds are the group's resources, as API.md describes them. Their one
// default, an Organization's type, is the scheme's (install.go).
var kinds = []typedgroup.Kind{
	{Resource: "organizations", Singular: "organization",
		New: func() runtime.Object { return &v1alpha1.Organization{} }, NewList: func() runtime.Object { return &v1alpha1.OrganizationList{} },
		Name: func(name string, prefix bool) []string {
			if len(name) > 50 {
				return []string{"organization names are at most 50 characters"}
			}
			return dnsLabel(name, prefix, "organization names are DNS labels: lower-case letters, digits and '-', starting and ending with a letter or digit")
		},
		Spec: func(obj, old runtime.Object) field.ErrorList {
			o := obj.(*v1alpha1.Organization)
			errs := oneOf(field.NewPath("spec", "type"), o.Spec.Type, v1alpha1.OrganizationTypePersonal, v1alpha1.OrganizationTypeStandard)
			if old, ok := old.(*v1alpha1.Organization); ok && old.Spec.Type != "" && old.Spec.Type != o.Spec.Type {
				errs = append(errs, field.Invalid(field.NewPath("spec", "type"), o.Spec.Type, "type is immutable"))
			}
			return errs
		},
		Status: conditionsOnly},
	{Resource: "folders", Singular: "folder",
		New: func() runtime.Object { return &v1alpha1.Folder{} }, NewList: func() runtime.Object { return &v1alpha1.FolderList{} },
		Name: func(name string, prefix bool) []string {
			return dnsLabel(name, prefix, "folder names are DNS labels: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit")
		},
		Spec: func(obj, _ runtime.Object) field.ErrorList {
			return parentRef(field.NewPath("spec", "parentRef"), obj.(*v1alpha1.Folder).Spec.ParentRef)
		},
		Status: conditionsOnly},
	{Resource: "projects", Singular: "project",
		New: func() runtime.Object { return &v1alpha1.Project{} }, NewList: func() runtime.Object { return &v1alpha1.ProjectList{} },
		Name: func(name string, prefix bool) []string {
			return dnsLabel(name, prefix, "project names are DNS labels: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit")
		},
		Spec: func(obj, _ runtime.Object) field.ErrorList {
			return parentRef(field.NewPath("spec", "ownerRef"), obj.(*v1alpha1.Project).Spec.OwnerRef)
		},
		Status: conditionsOnly},
	{Resource: "organizationmemberships", Singular: "organizationmembership", Namespaced: true,
		New:     func() runtime.Object { return &v1alpha1.OrganizationMembership{} },
		NewList: func() runtime.Object { return &v1alpha1.OrganizationMembershipList{} },
		Name:    apimachineryvalidation.NameIsDNSSubdomain,
		Spec: func(obj, old runtime.Object) field.ErrorList {
			m := obj.(*v1alpha1.OrganizationMembership)
			spec := field.NewPath("spec")
			errs := required(spec.Child("organizationRef", "name"), m.Spec.OrganizationRef.Name)
			errs = append(errs, required(spec.Child("userRef", "name"), m.Spec.UserRef.Name)...)
			for i, r := range m.Spec.Roles {
				errs = append(errs, required(spec.Child("roles").Index(i).Child("name"), r.Name)...)
			}
			if old, ok := old.(*v1alpha1.OrganizationMembership); ok {
				errs = append(errs, immutable(spec.Child("organizationRef"), m.Spec.OrganizationRef, old.Spec.OrganizationRef, "organizationRef is immutable")...)
				errs = append(errs, immutable(spec.Child("userRef"), m.Spec.UserRef, old.Spec.UserRef, "userRef is immutable")...)
			}
			return errs
		},
		Status: func(obj, _ runtime.Object) field.ErrorList {
			m := obj.(*v1alpha1.OrganizationMembership)
			var errs field.ErrorList
			for i, r := range m.Status.AppliedRoles {
				if r.Status != "" {
					errs = append(errs, oneOf(field.NewPath("status", "appliedRoles").Index(i).Child("status"), r.Status, "Applied", "Pending")...)
				}
			}
			return append(errs, conditions(m.Status.Conditions)...)
		}},
	{Resource: "projectsuspensions", Singular: "projectsuspension",
		New:     func() runtime.Object { return &v1alpha1.ProjectSuspension{} },
		NewList: func() runtime.Object { return &v1alpha1.ProjectSuspensionList{} },
		Name:    apimachineryvalidation.NameIsDNSSubdomain,
		Spec: func(obj, old runtime.Object) field.ErrorList {
			s := obj.(*v1alpha1.ProjectSuspension)
			spec := field.NewPath("spec")
			// The definition required projectRef.name and requestedBy to be
			// present; absent and empty are one here, and both refused.
			errs := required(spec.Child("projectRef", "name"), s.Spec.ProjectRef.Name)
			errs = append(errs, required(spec.Child("requestedBy"), s.Spec.RequestedBy)...)
			errs = append(errs, oneOf(spec.Child("reason"), s.Spec.Reason, v1alpha1.ReasonAbuse, v1alpha1.ReasonBilling, v1alpha1.ReasonCompliance, v1alpha1.ReasonAdministrative)...)
			errs = append(errs, oneOf(spec.Child("reinstateAuthority"), s.Spec.ReinstateAuthority, v1alpha1.AuthorityOperator, v1alpha1.AuthorityConsumer)...)
			if old, ok := old.(*v1alpha1.ProjectSuspension); ok {
				errs = append(errs, immutable(spec.Child("projectRef"), s.Spec.ProjectRef, old.Spec.ProjectRef, "projectRef is immutable")...)
				errs = append(errs, immutable(spec.Child("reason"), s.Spec.Reason, old.Spec.Reason, "reason is immutable")...)
				errs = append(errs, immutable(spec.Child("reinstateAuthority"), s.Spec.ReinstateAuthority, old.Spec.ReinstateAuthority, "reinstateAuthority is immutable")...)
				errs = append(errs, immutable(spec.Child("requestedBy"), s.Spec.RequestedBy, old.Spec.RequestedBy, "requestedBy is immutable")...)
			}
			return errs
		},
		Status: func(obj, _ runtime.Object) field.ErrorList {
			if phase := obj.(*v1alpha1.ProjectSuspension).Status.Phase; phase != "" {
				return oneOf(field.NewPath("status", "phase"), phase, v1alpha1.SuspensionActive, v1alpha1.SuspensionLifted)
			}
			return nil
		}},
}

var dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// dnsLabel is the name rule of the hierarchy's kinds: a DNS label, with the
// message their definitions have always given.
func dnsLabel(name string, prefix bool, msg string) []string {
	if prefix {
		// A generateName: the server cuts it to 58 characters and appends
		// 5; the name it makes is checked as a name.
		if !dnsLabelRE.MatchString(name + "x") {
			return []string{msg}
		}
		return nil
	}
	if len(name) > 63 || !dnsLabelRE.MatchString(name) {
		return []string{msg}
	}
	return nil
}

// parentRef checks a Folder's parentRef or a Project's ownerRef.
func parentRef(path *field.Path, ref v1alpha1.ParentReference) field.ErrorList {
	errs := oneOf(path.Child("kind"), ref.Kind, v1alpha1.ParentKindOrganization, v1alpha1.ParentKindFolder)
	errs = append(errs, required(path.Child("name"), ref.Name)...)
	if utf8.RuneCountInString(ref.Name) > 63 {
		errs = append(errs, field.TooLong(path.Child("name"), ref.Name, 63))
	}
	return errs
}

// conditionsOnly is the status rule of a kind whose status holds nothing
// to check but its conditions.
func conditionsOnly(obj, _ runtime.Object) field.ErrorList {
	return conditions(reflect.ValueOf(obj).Elem().FieldByName("Status").FieldByName("Conditions").Interface().([]metav1.Condition))
}

func conditions(c []metav1.Condition) field.ErrorList {
	return metav1validation.ValidateConditions(c, field.NewPath("status", "conditions"))
}

func required(path *field.Path, value string) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	return nil
}

// oneOf requires value to be one of allowed (an enum of the definition).
func oneOf[T ~string](path *field.Path, value T, allowed ...T) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	if slices.Contains(allowed, value) {
		return nil
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		names[i] = string(a)
	}
	return field.ErrorList{field.NotSupported(path, value, names)}
}

func immutable[T comparable](path *field.Path, value, old T, msg string) field.ErrorList {
	if value != old {
		return field.ErrorList{field.Invalid(path, value, msg)}
	}
	return nil
}
