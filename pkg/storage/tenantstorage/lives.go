package tenantstorage

import (
	"context"
	"errors"
	"fmt"
	"path"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/tenancy"
)

// A create in a project is admitted while its Project lives, but it
// reaches storage later: held in an admission webhook, or only behind the
// server's other work. Were the Project deleted and its keys purged in
// between, the create would store an object under the purged storage id,
// which no request by name reaches again but the all-projects view would
// show under a name another project may take next. Ending a project's
// requests when the server's cache of Projects sees the deletion narrows
// that to the moment the cache lags etcd, on each replica; to close it, a
// create requires, in its own transaction, that its project lives.
//
// What it requires is the project's lives key, one small key per project
// beside the Projects (livesKey): stored with the Project's create, made
// for a live Project that has none (one stored before the key existed, or
// created by an update) at its first create, and deleted by the purge
// before any of the project's objects. A create that finds it gone
// answers, as for any project that does not exist, 404.

// livesSegment is the path, under the storage prefix, of every project's
// lives key.
const livesSegment = "_milo/lives"

// livesKeyOf is the lives key of the project with storage id id, under
// storagePrefix; livesRangeOf the range that holds it alone.
func livesKeyOf(storagePrefix, id string) string { return livesRangeOf(storagePrefix, id) + "project" }

func livesRangeOf(storagePrefix, id string) string {
	return path.Join("/", storagePrefix, livesSegment, id) + "/"
}

// lives is what the Joints need to make a create require its project.
type lives struct {
	storagePrefix string
	projects      schema.GroupResource
}

// RequireLiveProjects makes every create in a project whose storage these
// Joints reach (and every update that creates) require, in its own
// transaction, that the project lives: that it is not purged. projects is
// the resource of Projects, kept in the same etcd, whose creates store
// their project's lives key. Purge deletes it (see livesRangeOf). Call it
// before the storage is built.
func (j *Joints) RequireLiveProjects(storagePrefix string, projects schema.GroupResource) {
	if j == nil || !j.reaches(projects) {
		return
	}
	j.resources[projects] = true // its store reads the Projects
	j.lives = &lives{storagePrefix: storagePrefix, projects: projects}
}

// expiring are the resources whose objects expire (an etcd lease, which
// upstream's store keeps): their writes require no lives key, and one
// stored in a purged project is gone with its lease; nor are they metered
// (unmetered).
var expiring = map[schema.GroupResource]bool{{Resource: "events"}: true, {Group: "events.k8s.io", Resource: "events"}: true}

// livesKey returns the lives key a create in ctx's project requires, or
// "" when it requires none (not a project, or not storage these Joints
// reach, or not asked to).
func (s *store) livesKey(ctx context.Context) string {
	j := s.joints
	if j == nil || j.lives == nil || !j.reaches(s.resource) || expiring[s.resource] {
		return ""
	}
	t := tenancy.From(ctx)
	if !t.IsProject() || t.ID == "" {
		return ""
	}
	return livesKeyOf(j.lives.storagePrefix, t.ID)
}

// createdLives returns the put of the lives key of the Project obj, when s
// is the Projects' storage and its creates store it.
func (s *store) createdLives(obj any) []clientv3.Op {
	j := s.joints
	if j == nil || j.lives == nil || s.resource != j.lives.projects {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	id := tenancy.StorageIDOf(m)
	if !tenancy.ValidProjectID(id) {
		return nil
	}
	return []clientv3.Op{clientv3.OpPut(livesKeyOf(j.lives.storagePrefix, id), m.GetName())}
}

// livesGone reports whether the read of a lives key (an OpGet of it,
// counted only) found none.
func livesGone(r *etcdserverpb.ResponseOp) bool {
	rr := r.GetResponseRange()
	return rr != nil && rr.Count == 0
}

// errNotLive says a create found its project's lives key gone.
var errNotLive = errors.New("the project's lives key is gone")

// projectGone is the answer to a write in ctx's project once it is purged:
// what a request for a project that does not exist gets.
func projectGone(ctx context.Context) error {
	return apierrors.NewNotFound(schema.GroupResource{Group: "resourcemanager.miloapis.com", Resource: "projects"}, tenancy.From(ctx).Name)
}

// revive stores the lives key of ctx's project where it has none, on the
// condition that the project's Project, read from etcd, is the one of the
// request's storage id and is not being deleted; projectGone otherwise. A
// Project being deleted is never given its key again, so a purge (which
// runs once the deletion began) cannot be outrun by it.
func (j *Joints) revive(ctx context.Context) error {
	t := tenancy.From(ctx)
	ps := j.storeOf(j.lives.projects)
	if ps == nil {
		return fmt.Errorf("no storage of %s is built yet", j.lives.projects)
	}
	stub := ps.newFunc()
	sm, err := meta.Accessor(stub)
	if err != nil {
		return err
	}
	sm.SetName(t.Name)
	key, err := ps.keyFunc(stub)
	if err != nil {
		return err
	}
	full := ps.etcdKey(key)
	lives := livesKeyOf(j.lives.storagePrefix, t.ID)
	for range maxTallyRounds {
		got, err := j.kv.Get(ctx, full)
		if err != nil {
			return err
		}
		if len(got.Kvs) == 0 {
			return projectGone(ctx)
		}
		_, p, _, err := ps.decodeStored(ctx, full, got.Kvs[0].Value, got.Kvs[0].ModRevision)
		if err != nil {
			return err
		}
		m, err := meta.Accessor(p)
		if err != nil {
			return err
		}
		if m.GetDeletionTimestamp() != nil || tenancy.StorageIDOf(m) != t.ID {
			return projectGone(ctx)
		}
		resp, err := j.kv.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(full), "=", got.Kvs[0].ModRevision)).
			Then(clientv3.OpPut(lives, t.Name)).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
		// The Project was written since it was read: read it again.
	}
	return apierrors.NewTooManyRequests("the project was changed by other requests at each try: retry", 1)
}
