package resourcequota

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCountedResource(t *testing.T) {
	for name, want := range map[corev1.ResourceName]*schema.GroupResource{
		"count/configmaps":                 {Resource: "configmaps"},
		"count/widgets.example.com":        {Group: "example.com", Resource: "widgets"},
		"count/leases.coordination.k8s.io": {Group: "coordination.k8s.io", Resource: "leases"},
		"secrets":                          {Resource: "secrets"},
		"requests.cpu":                     nil,
		"pods":                             nil,
		"count/":                           nil,
	} {
		gr, ok := CountedResource(name)
		if ok != (want != nil) || (want != nil && gr != *want) {
			t.Errorf("CountedResource(%s) = %v %v, want %v", name, gr, ok, want)
		}
	}
}
