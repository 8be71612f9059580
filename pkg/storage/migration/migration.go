// Package migration copies a storage written by upstream Milo into Milo's key
// layout.
//
// Upstream Milo stores a project's objects under a storage prefix of the
// project's own, /projects/<project>/<resource prefix>/[<namespace>/]<name>,
// and the platform's under /registry/<resource prefix>/[<namespace>/]<name>.
// Milo keeps every tenant in one key range per resource:
// /registry/<resource prefix>/<segment>/[<namespace>/]<name>, the segment a
// project's storage id or _platform. Migrating reads every object of the
// source, finds its resource prefix by taking its namespace and name off its
// key, stamps a project's objects with their project (the tenant
// annotations), marks each Project to keep its name as storage id (as Milo
// does for the projects of a data directory older than storage ids), and
// creates the object at its new key — never overwriting: a key already there
// is left as it is, so running a migration again changes nothing. The source
// is only read. Resource versions are new: they are the target's revisions.
package migration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/tenancy"
)

// Config says where the source keeps what.
type Config struct {
	// ProjectsPrefix holds the projects' objects in the source ("/projects").
	ProjectsPrefix string
	// RegistryPrefix holds the platform's objects, in the source and in the target ("/registry").
	RegistryPrefix string
	// Scheme knows every built-in kind the source stores in protobuf.
	Scheme *runtime.Scheme
}

// Report says what a migration did.
type Report struct {
	// Written and Present count objects created in the target and found there already.
	Written, Present int
	// Skipped are source keys that hold no object to migrate, and why.
	Skipped map[string]string
	// Projects counts each project's objects in the source.
	Projects map[string]int
}

// projectsResource is the resource prefix of Projects.
const projectsResource = "resourcemanager.miloapis.com/projects"

// Run migrates every object of source into target.
func Run(ctx context.Context, source, target keyranges.Store, c Config) (Report, error) {
	r := Report{Skipped: map[string]string{}, Projects: map[string]int{}}
	codec := protobuf.NewSerializer(c.Scheme, c.Scheme)
	targetRegistry := strings.TrimSuffix(c.RegistryPrefix, "/")
	// prefixesOf records, per project, the resource prefixes its objects are under: to count them after.
	prefixesOf := map[string]map[string]bool{}
	migrate := func(kv keyranges.KV, project string) error {
		rel := strings.TrimPrefix(kv.Key, strings.TrimSuffix(c.RegistryPrefix, "/")+"/")
		if project != "" {
			rel = strings.TrimPrefix(kv.Key, strings.TrimSuffix(c.ProjectsPrefix, "/")+"/"+project+"/")
		}
		obj, encode, err := decode(kv.Value, codec)
		if err != nil {
			r.Skipped[kv.Key] = err.Error()
			return nil
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			r.Skipped[kv.Key] = err.Error()
			return nil
		}
		tail := m.GetName()
		if m.GetNamespace() != "" {
			tail = m.GetNamespace() + "/" + tail
		}
		prefix, ok := strings.CutSuffix(rel, "/"+tail)
		if !ok || prefix == "" {
			r.Skipped[kv.Key] = fmt.Sprintf("the key does not end in the object's namespace and name %q", tail)
			return nil
		}
		if prefix == "events" || strings.HasSuffix(prefix, "/events") {
			r.Skipped[kv.Key] = "an Event (it expires on its own)"
			return nil
		}
		segment := tenancy.PlatformSegment
		t := tenancy.Tenant{Kind: tenancy.Platform}
		if project != "" {
			if !tenancy.ValidProjectName(project) {
				return fmt.Errorf("project %q is not a valid project name, so it cannot keep it as its storage id", project)
			}
			segment = project
			t = tenancy.Tenant{Kind: tenancy.Project, Name: project, ID: project}
			r.Projects[project]++
			if prefixesOf[project] == nil {
				prefixesOf[project] = map[string]bool{}
			}
			prefixesOf[project][prefix] = true
		}
		tenancy.Stamp(m, t)
		if project == "" && prefix == projectsResource {
			// The project keeps its name as storage id: its objects are migrated under it.
			annotations := m.GetAnnotations()
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[tenancy.StorageIDAnnotation] = m.GetName()
			m.SetAnnotations(annotations)
		}
		value, err := encode(obj)
		if err != nil {
			return fmt.Errorf("encoding %s: %w", kv.Key, err)
		}
		written, err := target.Create(ctx, targetRegistry+"/"+prefix+"/"+segment+"/"+tail, value)
		if err != nil {
			return err
		}
		if written {
			r.Written++
		} else {
			r.Present++
		}
		return nil
	}
	platform, err := source.List(ctx, strings.TrimSuffix(c.RegistryPrefix, "/")+"/")
	if err != nil {
		return r, err
	}
	for _, kv := range platform {
		if err := migrate(kv, ""); err != nil {
			return r, err
		}
	}
	projects, err := source.List(ctx, strings.TrimSuffix(c.ProjectsPrefix, "/")+"/")
	if err != nil {
		return r, err
	}
	for _, kv := range projects {
		rest := strings.TrimPrefix(kv.Key, strings.TrimSuffix(c.ProjectsPrefix, "/")+"/")
		project, _, ok := strings.Cut(rest, "/")
		if !ok {
			r.Skipped[kv.Key] = "not under a project"
			continue
		}
		if err := migrate(kv, project); err != nil {
			return r, err
		}
	}
	// Every project's objects are in the target, each once.
	for _, project := range sortedKeys(prefixesOf) {
		var ranges []string
		for prefix := range prefixesOf[project] {
			ranges = append(ranges, path.Join(targetRegistry, prefix, project)+"/")
		}
		n, err := target.Count(ctx, ranges...)
		if err != nil {
			return r, err
		}
		if int(n) != r.Projects[project] {
			return r, fmt.Errorf("project %s: %d objects in the source, %d in the target", project, r.Projects[project], n)
		}
	}
	return r, nil
}

// decode reads a stored object: protobuf for built-in kinds (Kubernetes'
// "k8s\x00" envelope), JSON for custom resources. encode writes it back in
// the same form.
func decode(value []byte, codec *protobuf.Serializer) (runtime.Object, func(runtime.Object) ([]byte, error), error) {
	if bytes.HasPrefix(value, []byte("k8s\x00")) {
		obj, gvk, err := codec.Decode(value, nil, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("not an object Milo knows: %w", err)
		}
		return obj, func(o runtime.Object) ([]byte, error) {
			o.GetObjectKind().SetGroupVersionKind(*gvk)
			var b bytes.Buffer
			err := codec.Encode(o, &b)
			return b.Bytes(), err
		}, nil
	}
	var u unstructured.Unstructured
	if err := json.Unmarshal(value, &u.Object); err != nil || u.GetKind() == "" || u.GetName() == "" {
		return nil, nil, fmt.Errorf("not a stored object")
	}
	return &u, func(o runtime.Object) ([]byte, error) { return json.Marshal(o.(*unstructured.Unstructured).Object) }, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
