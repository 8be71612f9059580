package typedgroup

import (
	"bytes"
	"encoding/json"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// StoredTimes wraps the storage codec of a group that was served as custom
// resources. A custom resource's schema admits a date-time without a zone
// ("2024-05-01T10:00:00"), which metav1.Time refuses: an object stored with
// one would fail to decode into its Go type, and with it every list of its
// resource (a whole quota ledger would never load). Such an object is read
// as if its zoneless times were in UTC, the zone the server writes; it is
// stored that way at its next write. Objects that decode are untouched: the
// repair costs nothing until one fails.
func StoredTimes(c runtime.Codec) runtime.Codec { return storedTimes{c} }

type storedTimes struct{ runtime.Codec }

func (c storedTimes) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if err == nil {
		return obj, gvk, nil
	}
	fixed, ok := zonedTimes(data)
	if !ok {
		return obj, gvk, err
	}
	return c.Codec.Decode(fixed, defaults, into)
}

// zonelessLayouts are the date-times without a zone the CRDs' schemas
// admitted (kube-openapi's ISO8601 local time).
var zonelessLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05"}

// zonedTimes is the JSON object data with every string that is a date-time
// without a zone written in UTC with one; false if there is none, or data
// is not JSON.
func zonedTimes(data []byte) ([]byte, bool) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber() // amounts and generations stay exact
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, false
	}
	changed := false
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		case string:
			for _, layout := range zonelessLayouts {
				if at, err := time.Parse(layout, t); err == nil {
					changed = true
					return at.UTC().Format(time.RFC3339Nano)
				}
			}
		}
		return x
	}
	v = walk(v)
	if !changed {
		return nil, false
	}
	out, err := json.Marshal(v)
	return out, err == nil
}
