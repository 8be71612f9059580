package projectcrds

import (
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// widget is a CRD of two versions with a schema that has a default, a CEL
// rule, printer columns, selectable fields and both subresources.
func widget() *apiextensionsv1.CustomResourceDefinition {
	schema := func(defaultJSON string) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"size":  {Type: "integer", Default: &apiextensionsv1.JSON{Raw: []byte("3")}},
						"shape": {Type: "object", XPreserveUnknownFields: ptr.To(true), Default: &apiextensionsv1.JSON{Raw: []byte(defaultJSON)}},
						"color": {Type: "string"},
					},
					XValidations: apiextensionsv1.ValidationRules{{Rule: "self.size <= 10", Message: "too large"}},
				},
				"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}}},
			},
		}}
	}
	version := func(name string, storage bool) apiextensionsv1.CustomResourceDefinitionVersion {
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage,
			Schema: schema(`{"sides":4,"corners":"round"}`),
			Subresources: &apiextensionsv1.CustomResourceSubresources{
				Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
				Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: ".spec.size", StatusReplicasPath: ".status.replicas"},
			},
			AdditionalPrinterColumns: []apiextensionsv1.CustomResourceColumnDefinition{
				{Name: "Size", Type: "integer", JSONPath: ".spec.size"},
				{Name: "Color", Type: "string", JSONPath: ".spec.color"},
			},
			SelectableFields: []apiextensionsv1.SelectableField{{JSONPath: ".spec.color"}},
		}
	}
	names := apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList", ShortNames: []string{"wd"}}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Names: names, Scope: apiextensionsv1.NamespaceScoped,
			Versions:   []apiextensionsv1.CustomResourceDefinitionVersion{version("v1", true), version("v1beta1", false)},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{AcceptedNames: names, StoredVersions: []string{"v1"}},
	}
}

func classOf(t *testing.T, crd *apiextensionsv1.CustomResourceDefinition) Class {
	t.Helper()
	c, err := ClassOf(crd)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestEqualSpecsShareAClass: the same CRD in another project, written
// differently where that changes nothing, is of the same class.
func TestEqualSpecsShareAClass(t *testing.T) {
	base := classOf(t, widget())
	if !strings.HasPrefix(string(base), classPrefix) {
		t.Errorf("class %q lacks its prefix", base)
	}
	for name, change := range map[string]func(*apiextensionsv1.CustomResourceDefinition){
		"another project's metadata": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.UID, c.ResourceVersion, c.Generation = "another", "42", 7
			c.Annotations = map[string]string{"tenancy.miloapis.com/project": "other"}
			c.CreationTimestamp = metav1.NewTime(time.Unix(1e9, 0))
		},
		"conditions and stored versions": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: apiextensionsv1.Established, Status: apiextensionsv1.ConditionTrue}}
			c.Status.StoredVersions = []string{"v1beta1", "v1"}
		},
		"versions listed in another order": func(c *apiextensionsv1.CustomResourceDefinition) {
			v := c.Spec.Versions
			v[0], v[1] = v[1], v[0]
		},
		"a default's keys in another order and spacing": func(c *apiextensionsv1.CustomResourceDefinition) {
			for i := range c.Spec.Versions {
				shape := c.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties["shape"]
				shape.Default = &apiextensionsv1.JSON{Raw: []byte(`{ "corners": "round",  "sides": 4 }`)}
				c.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"].Properties["shape"] = shape
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			crd := widget()
			change(crd)
			if got := classOf(t, crd); got != base {
				t.Errorf("class %s, want %s", got, base)
			}
		})
	}
}

// TestServingDifferencesMakeAnotherClass: any change to how instances are
// served, validated, defaulted, shown or named makes another class.
func TestServingDifferencesMakeAnotherClass(t *testing.T) {
	spec := func(c *apiextensionsv1.CustomResourceDefinition, i int) *apiextensionsv1.JSONSchemaProps {
		p := c.Spec.Versions[i].Schema.OpenAPIV3Schema.Properties["spec"]
		return &p
	}
	setSpec := func(c *apiextensionsv1.CustomResourceDefinition, f func(*apiextensionsv1.JSONSchemaProps)) {
		p := spec(c, 0)
		f(p)
		c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = *p
	}
	changes := map[string]func(*apiextensionsv1.CustomResourceDefinition){
		"group":         func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Group = "example.org" },
		"plural":        func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Names.Plural = "gadgets" },
		"short names":   func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Names.ShortNames = nil },
		"categories":    func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Names.Categories = []string{"all"} },
		"accepted kind": func(c *apiextensionsv1.CustomResourceDefinition) { c.Status.AcceptedNames.Kind = "" },
		"scope":         func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Scope = apiextensionsv1.ClusterScoped },
		"served":        func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[1].Served = false },
		"storage version": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].Storage, c.Spec.Versions[1].Storage = false, true
		},
		"deprecation": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[1].Deprecated, c.Spec.Versions[1].DeprecationWarning = true, ptr.To("use v1")
		},
		"a field's type": func(c *apiextensionsv1.CustomResourceDefinition) {
			setSpec(c, func(p *apiextensionsv1.JSONSchemaProps) {
				color := p.Properties["color"]
				color.Type = "integer"
				p.Properties["color"] = color
			})
		},
		"a new field": func(c *apiextensionsv1.CustomResourceDefinition) {
			setSpec(c, func(p *apiextensionsv1.JSONSchemaProps) {
				p.Properties["weight"] = apiextensionsv1.JSONSchemaProps{Type: "number"}
			})
		},
		"a default": func(c *apiextensionsv1.CustomResourceDefinition) {
			setSpec(c, func(p *apiextensionsv1.JSONSchemaProps) {
				size := p.Properties["size"]
				size.Default = &apiextensionsv1.JSON{Raw: []byte("4")}
				p.Properties["size"] = size
			})
		},
		"a CEL rule": func(c *apiextensionsv1.CustomResourceDefinition) {
			setSpec(c, func(p *apiextensionsv1.JSONSchemaProps) {
				p.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.size <= 20", Message: "too large"}}
			})
		},
		"a CEL message": func(c *apiextensionsv1.CustomResourceDefinition) {
			setSpec(c, func(p *apiextensionsv1.JSONSchemaProps) {
				p.XValidations = apiextensionsv1.ValidationRules{{Rule: "self.size <= 10", Message: "at most 10"}}
			})
		},
		"printer columns' order": func(c *apiextensionsv1.CustomResourceDefinition) {
			cols := c.Spec.Versions[0].AdditionalPrinterColumns
			cols[0], cols[1] = cols[1], cols[0]
		},
		"a selectable field": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Versions[0].SelectableFields = append(c.Spec.Versions[0].SelectableFields, apiextensionsv1.SelectableField{JSONPath: ".spec.size"})
		},
		"no scale subresource": func(c *apiextensionsv1.CustomResourceDefinition) { c.Spec.Versions[0].Subresources.Scale = nil },
		"preserve unknown fields": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.PreserveUnknownFields = true
		},
		"conversion": func(c *apiextensionsv1.CustomResourceDefinition) {
			c.Spec.Conversion = &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{URL: ptr.To("https://convert.example.com")}, ConversionReviewVersions: []string{"v1"}}}
		},
	}
	base := classOf(t, widget())
	seen := map[Class]string{base: "the original"}
	for name, change := range changes {
		crd := widget()
		change(crd)
		got := classOf(t, crd)
		if other, ok := seen[got]; ok {
			t.Errorf("%s: class %s, the same as %s's", name, got, other)
		}
		seen[got] = name
	}
}
