package projectcrds

import (
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
)

func names(plural, singular, kind string, short ...string) apiextensionsv1.CustomResourceDefinitionNames {
	return apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Singular: singular, Kind: kind, ListKind: kind + "List", ShortNames: short}
}

func taken(held ...apiextensionsv1.CustomResourceDefinitionNames) Taken {
	var t Taken
	for _, n := range held {
		t.Claim(n)
	}
	return t
}

// TestAcceptNames: a CRD's names are accepted unless another holds them in
// its group; names it holds stay its own; conditions as upstream sets them.
func TestAcceptNames(t *testing.T) {
	widgets := names("widgets", "widget", "Widget", "wd")
	// widgetsWith is the widgets' names changed by change.
	widgetsWith := func(change func(*apiextensionsv1.CustomResourceDefinitionNames)) apiextensionsv1.CustomResourceDefinitionNames {
		n := widgets
		change(&n)
		return n
	}
	established := apiextensionsv1.CustomResourceDefinitionCondition{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue, Reason: "InitialNamesAccepted"}
	for _, tc := range []struct {
		name            string
		want, held      apiextensionsv1.CustomResourceDefinitionNames
		conditions      []apiextensionsv1.CustomResourceDefinitionCondition
		taken           Taken
		wantAccepted    apiextensionsv1.CustomResourceDefinitionNames
		wantReason      string
		wantEstablished apiextensionsv1.ConditionStatus
		wantEstReason   string
	}{
		{name: "a new CRD in an empty group", want: widgets, taken: taken(),
			wantAccepted: widgets, wantReason: "NoConflicts", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "Installing"},
		{name: "another CRD of the group holds other names", want: widgets, taken: taken(names("gadgets", "gadget", "Gadget", "gd")),
			wantAccepted: widgets, wantReason: "NoConflicts", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "Installing"},
		{name: "the plural is another's", want: widgets, taken: taken(names("widgets", "other", "Other")),
			wantAccepted: widgetsWith(func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Plural = "" }), wantReason: "PluralConflict", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "NotAccepted"},
		{name: "the singular is another's short name", want: widgets, taken: taken(names("others", "other", "Other", "widget")),
			wantAccepted: widgetsWith(func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Singular = "" }), wantReason: "SingularConflict", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "NotAccepted"},
		{name: "a short name is another's", want: widgets, taken: taken(names("wds", "wdx", "Wd", "wd")),
			wantAccepted: widgetsWith(func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.ShortNames = nil }), wantReason: "ShortNamesConflict", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "NotAccepted"},
		{name: "the kind is another's", want: widgets, taken: taken(names("others", "other", "Widget")),
			wantAccepted: widgetsWith(func(n *apiextensionsv1.CustomResourceDefinitionNames) { n.Kind, n.ListKind = "", "" }), wantReason: "ListKindConflict", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "NotAccepted"},
		{name: "the names it holds are its own", want: widgets, held: widgets, conditions: []apiextensionsv1.CustomResourceDefinitionCondition{established},
			taken:        taken(widgets),
			wantAccepted: widgets, wantReason: "NoConflicts", wantEstablished: apiextensionsv1.ConditionTrue, wantEstReason: "InitialNamesAccepted"},
		{name: "a new plural another holds: the old one is kept, and it stays served", want: names("gadgets", "widget", "Widget", "wd"), held: widgets,
			conditions: []apiextensionsv1.CustomResourceDefinitionCondition{established}, taken: taken(widgets, names("gadgets", "gadget", "Gadget")),
			wantAccepted: widgets, wantReason: "PluralConflict", wantEstablished: apiextensionsv1.ConditionTrue, wantEstReason: "InitialNamesAccepted"},
		{name: "a new short name it does not hold yet, free", want: names("widgets", "widget", "Widget", "wd", "wdg"), held: widgets, taken: taken(widgets),
			wantAccepted: names("widgets", "widget", "Widget", "wd", "wdg"), wantReason: "NoConflicts", wantEstablished: apiextensionsv1.ConditionFalse, wantEstReason: "Installing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			crd := &apiextensionsv1.CustomResourceDefinition{
				Spec:   apiextensionsv1.CustomResourceDefinitionSpec{Group: "example.com", Names: tc.want},
				Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: tc.held, Conditions: tc.conditions},
			}
			crd.Spec.Names.Categories = []string{"all"}
			tc.wantAccepted.Categories = []string{"all"}
			accepted, namesAccepted, est := AcceptNames(crd, tc.taken)
			if !reflect.DeepEqual(accepted, tc.wantAccepted) {
				t.Errorf("accepted names %+v, want %+v", accepted, tc.wantAccepted)
			}
			wantStatus := apiextensionsv1.ConditionTrue
			if tc.wantReason != "NoConflicts" {
				wantStatus = apiextensionsv1.ConditionFalse
			}
			if namesAccepted.Type != apiextensionsv1.NamesAccepted || namesAccepted.Status != wantStatus || namesAccepted.Reason != tc.wantReason || namesAccepted.Message == "" {
				t.Errorf("NamesAccepted %+v, want %s with reason %s", namesAccepted, wantStatus, tc.wantReason)
			}
			if est.Type != apiextensionsv1.Established || est.Status != tc.wantEstablished || est.Reason != tc.wantEstReason {
				t.Errorf("Established %+v, want %s with reason %s", est, tc.wantEstablished, tc.wantEstReason)
			}
		})
	}
}
