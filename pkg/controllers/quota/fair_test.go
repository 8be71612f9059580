package quota

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/tenancy"
)

// TestItemsAreServedByOrganization: every kind of work item is put in its
// organization's turn, read from the item or the informers, never from the
// server; an item of no organization, or of an object gone, takes the
// platform's.
func TestItemsAreServedByOrganization(t *testing.T) {
	store := func(names ...string) cache.SharedIndexInformer {
		inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
		for _, n := range names {
			u := &unstructured.Unstructured{}
			u.SetName(n)
			u.SetLabels(map[string]string{tenancy.OrganizationLabel: "acme"})
			if err := inf.GetIndexer().Add(u); err != nil {
				t.Fatal(err)
			}
		}
		return inf
	}
	c := &Controller{inf: Informers{Projects: store("web"), Suspensions: store("web-suspended")}}
	for item, want := range map[string]string{
		bucketItem(quota.BucketKey{Consumer: quota.Consumer{Kind: quota.KindOrganization, Name: "acme"}, ResourceType: "x"}): "acme",
		bucketItem(quota.BucketKey{Consumer: quota.Consumer{Kind: quota.KindProject, Name: "web"}, ResourceType: "x"}):       "acme",
		bucketItem(quota.BucketKey{Consumer: quota.Consumer{Kind: quota.KindProject, Name: "gone"}, ResourceType: "x"}):      "",
		"recount\x00Project\x00web\x00x":                   "acme",
		"consumer\x00Organization\x00globex":               "globex",
		"consumer\x00Project\x00web":                       "acme",
		"projectgone\x00web\x00initech\x00uid":             "initech",
		"suspension\x00web-suspended":                      "acme",
		"suspension\x00gone":                               "",
		"grant\x00organization-globex/default-grant":       "globex",
		"claim\x00organization-acme/claim-1":               "acme",
		"going\x00organization-acme/claim-1":               "acme",
		"grant\x00milo-system/platform-grant":              "",
		"registration\x00projects-per-organization":        "",
		"claimpolicy\x00configmaps":                        "",
		"grant\x00organization-/no-organization-namespace": "",
	} {
		if got := c.organizationOf(item); got != want {
			t.Errorf("%q is served in %q's turn, want %q's", item, got, want)
		}
	}
}
