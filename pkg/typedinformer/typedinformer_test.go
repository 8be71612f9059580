package typedinformer

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
)

// claim is a stored ResourceClaim as the server answers it; a bad one has a
// condition time without a zone, which a custom resource's date-time admits
// and metav1.Time does not parse.
func claim(name, rv string, bad bool) string {
	at := "2026-01-01T00:00:00Z"
	if bad {
		at = "2026-01-01T00:00:00"
	}
	return fmt.Sprintf(`{"apiVersion":"quota.miloapis.com/v1alpha1","kind":"ResourceClaim","metadata":{"namespace":"org-a","name":%q,"resourceVersion":%q,"managedFields":[{"manager":"m","operation":"Update"}]},`+
		`"spec":{"requests":[{"resourceType":"t","amount":1}]},"status":{"allocations":[{"resourceType":"t","status":"Granted","lastTransitionTime":"2026-01-01T00:00:00Z"}],`+
		`"conditions":[{"type":"Granted","status":"True","reason":"R","message":"m","lastTransitionTime":%q}]}}`, name, rv, at)
}

// An object its Go type cannot hold is left out of the informer's lists; a
// watch event holding one ends the watch, and the reflector lists again
// (without it) and watches on from there. The informer syncs and goes on
// with the others.
func TestAnObjectThatDoesNotDecodeDoesNotStopTheInformer(t *testing.T) {
	var lists, watches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/quota.miloapis.com/v1alpha1/resourceclaims" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		rv := r.URL.Query().Get("resourceVersion")
		if r.URL.Query().Get("watch") != "true" {
			// The first list, then what is stored once the watch's events are.
			if lists.Add(1) == 1 {
				fmt.Fprintf(w, `{"apiVersion":"quota.miloapis.com/v1alpha1","kind":"ResourceClaimList","metadata":{"resourceVersion":"10"},"items":[%s,%s,%s]}`,
					claim("listed", "8", false), claim("listed-bad", "9", true), claim("listed-too", "10", false))
			} else {
				fmt.Fprintf(w, `{"apiVersion":"quota.miloapis.com/v1alpha1","kind":"ResourceClaimList","metadata":{"resourceVersion":"12"},"items":[%s,%s,%s,%s,%s]}`,
					claim("listed", "8", false), claim("listed-bad", "9", true), claim("listed-too", "10", false), claim("watched", "11", false), claim("watched-bad", "12", true))
			}
			return
		}
		switch rv {
		case "10":
			// From the first list: a good event, then one that does not decode.
			watches.Add(1)
			for _, ev := range []string{claim("watched", "11", false), claim("watched-bad", "12", true)} {
				fmt.Fprintf(w, `{"type":"ADDED","object":%s}`+"\n", ev)
				w.(http.Flusher).Flush()
			}
			<-r.Context().Done()
		case "12":
			// From the second list: nothing more happens.
			watches.Add(1)
			<-r.Context().Done()
		default:
			// A watch list (resourceVersion ""): the reflector lists instead.
			http.Error(w, "unexpected resourceVersion "+rv, http.StatusBadRequest)
		}
	}))
	defer srv.Close()

	client, err := NewClient(&rest.Config{Host: srv.URL}, quotav1alpha1.SchemeGroupVersion, quotav1alpha1.AddToScheme)
	if err != nil {
		t.Fatal(err)
	}
	var slimmed atomic.Int32
	inf := New(client, "resourceclaims", &quotav1alpha1.ResourceClaim{}, 0, cache.Indexers{}, func(o runtime.Object) {
		o.(*quotav1alpha1.ResourceClaim).Status.Allocations = nil
		slimmed.Add(1)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	want := []string{"org-a/listed", "org-a/listed-too", "org-a/watched"}
	var keys []string
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		keys = inf.GetStore().ListKeys()
		slices.Sort(keys)
		return slices.Equal(keys, want) && watches.Load() == 2, nil
	}); err != nil {
		t.Fatalf("cached %v, want %v", keys, want)
	}
	for _, obj := range inf.GetStore().List() {
		c, ok := obj.(*quotav1alpha1.ResourceClaim)
		if !ok {
			t.Fatalf("cached a %T, want its Go type", obj)
		}
		if c.ManagedFields != nil || c.Status.Allocations != nil || len(c.Status.Conditions) != 1 || c.Spec.Requests[0].Amount != 1 {
			t.Errorf("%s cached as %+v: want it without managed fields or allocations, and the rest whole", c.Name, c)
		}
	}
	if n := slimmed.Load(); n < 3 {
		t.Errorf("slim ran %d times, want at least once for each object cached", n)
	}
	if l, w := lists.Load(), watches.Load(); l != 2 || w != 2 {
		t.Errorf("%d lists and %d watches, want 2 of each: one watch ended at the event, and the reflector listed again", l, w)
	}
}
