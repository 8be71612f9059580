package projectcrds

import (
	"fmt"
	"strings"

	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Taken are the names already in use in one API group as one project sees
// it: the accepted names of the project's other CRDs of the group, and what
// the project is served in that group by the platform (built-in kinds, Milo's
// kinds, platform CRDs). Another project's CRDs are never in it: projects do
// not compete for names.
type Taken struct {
	// Resources holds plurals, singulars and short names.
	Resources sets.Set[string]
	// Kinds holds kinds and list kinds.
	Kinds sets.Set[string]
}

// Claim adds names to t, as a CRD whose names were accepted holds them.
func (t *Taken) Claim(names apiextensionsv1.CustomResourceDefinitionNames) {
	if t.Resources == nil {
		t.Resources = sets.New[string]()
	}
	if t.Kinds == nil {
		t.Kinds = sets.New[string]()
	}
	for _, r := range append([]string{names.Plural, names.Singular}, names.ShortNames...) {
		if r != "" {
			t.Resources.Insert(r)
		}
	}
	for _, k := range []string{names.Kind, names.ListKind} {
		if k != "" {
			t.Kinds.Insert(k)
		}
	}
}

// AcceptNames decides which of crd's requested names it may hold, given the
// names others hold in its group (taken, which may include crd's own accepted
// names): the names a CRD already holds stay its own; a new name is accepted
// unless another holds it. It returns the accepted names and the
// NamesAccepted and Established conditions to set, with upstream's reasons
// (PluralConflict, SingularConflict, ShortNamesConflict, KindConflict,
// ListKindConflict; NoConflicts), so that clients waiting for a CRD see what
// they see on any cluster. Established is only ever set to False here
// (Installing, or NotAccepted when it was never set): it becomes True when
// the CRD is served, which is another controller's word.
func AcceptNames(crd *apiextensionsv1.CustomResourceDefinition, taken Taken) (apiextensionsv1.CustomResourceDefinitionNames, apiextensionsv1.CustomResourceDefinitionCondition, apiextensionsv1.CustomResourceDefinitionCondition) {
	want, held := crd.Spec.Names, crd.Status.AcceptedNames
	accepted := held
	var conflicts []string
	reason := ""
	// accept sets *to to name unless another holds it (a name the CRD
	// already holds is its own); the last conflict found names the reason,
	// as upstream.
	accept := func(conflictReason, name, mine string, used sets.Set[string], to *string) {
		if name != mine && used.Has(name) {
			reason, conflicts = conflictReason, append(conflicts, fmt.Sprintf("%q is already in use", name))
			return
		}
		*to = name
	}
	accept("PluralConflict", want.Plural, held.Plural, taken.Resources, &accepted.Plural)
	accept("SingularConflict", want.Singular, held.Singular, taken.Resources, &accepted.Singular)
	mine, shortConflicts := sets.New(held.ShortNames...), 0
	for _, s := range want.ShortNames {
		var ignored string
		before := len(conflicts)
		accept("ShortNamesConflict", s, "", taken.Resources.Difference(mine), &ignored)
		shortConflicts += len(conflicts) - before
	}
	if shortConflicts == 0 {
		accepted.ShortNames = want.ShortNames
	}
	accept("KindConflict", want.Kind, held.Kind, taken.Kinds, &accepted.Kind)
	accept("ListKindConflict", want.ListKind, held.ListKind, taken.Kinds, &accepted.ListKind)
	accepted.Categories = want.Categories

	namesAccepted := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.NamesAccepted,
		Status: apiextensionsv1.ConditionTrue, Reason: "NoConflicts", Message: "no conflicts found"}
	if len(conflicts) > 0 {
		namesAccepted.Status, namesAccepted.Reason, namesAccepted.Message = apiextensionsv1.ConditionFalse, reason, strings.Join(conflicts, "; ")
	}
	established := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
		Status: apiextensionsv1.ConditionFalse, Reason: "NotAccepted", Message: "not all names are accepted"}
	if old := apiextensionshelpers.FindCRDCondition(crd, apiextensionsv1.Established); old != nil {
		established = *old
	}
	if established.Status != apiextensionsv1.ConditionTrue && namesAccepted.Status == apiextensionsv1.ConditionTrue {
		established = apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established,
			Status: apiextensionsv1.ConditionFalse, Reason: "Installing", Message: "the initial names have been accepted"}
	}
	return accepted, namesAccepted, established
}
