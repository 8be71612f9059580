package tenantstorage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"

	"k8s.io/klog/v2"

	"go.miloapis.com/milo/pkg/storage/keyranges"
	"go.miloapis.com/milo/pkg/tenancy"
)

// LayoutVersion is the storage layout this server writes. Version 2 stores a
// project's objects under its storage id (made from its UID) instead of its
// name; version 1 (no marker) stored them under the name.
const LayoutVersion = "2"

// layoutKey, under the storage prefix, records the layout version. Its "_"
// segment is no API group or resource name, so no resource's keys are under it.
const layoutKey = "_milo/storage-layout"

// projectsKeyPrefix is where the platform's Project objects are stored.
const projectsKeyPrefix = "resourcemanager.miloapis.com/projects/" + tenancy.PlatformSegment + "/"

// UpgradeLayout brings a data directory written by an earlier Milo to the
// current layout before anything reads it. Projects that existed before storage
// ids keep their name as storage id, so their objects stay where they are: it
// is recorded on each such Project (tenancy.StorageIDAnnotation). Every project
// created afterwards is stored under an id made from its UID, so a recycled
// name never meets an old project's keys.
//
// It is idempotent and safe to interrupt: the marker is written last, and
// projects already marked are left alone. Several servers may run it at once;
// each write is conditional on the revision it read.
func UpgradeLayout(ctx context.Context, keys keyranges.Store, storagePrefix string) error {
	marker := path.Join("/", storagePrefix, layoutKey)
	kv, found, err := keys.Get(ctx, marker)
	if err != nil {
		return fmt.Errorf("reading the storage layout version: %w", err)
	}
	if found {
		if v := string(kv.Value); v != LayoutVersion {
			return fmt.Errorf("storage layout version %q is not %q: this data directory was written by another Milo version", v, LayoutVersion)
		}
		return nil
	}
	prefix := path.Join("/", storagePrefix, projectsKeyPrefix) + "/"
	projects, err := keys.List(ctx, prefix)
	if err != nil {
		return fmt.Errorf("listing projects to upgrade the storage layout: %w", err)
	}
	marked := 0
	for _, kv := range projects {
		wrote, err := keepNameAsID(ctx, keys, kv.Key, kv.Value, kv.Revision)
		if err != nil {
			return err
		}
		if wrote {
			marked++
		}
	}
	if err := keys.Put(ctx, marker, []byte(LayoutVersion)); err != nil {
		return fmt.Errorf("recording the storage layout version: %w", err)
	}
	klog.FromContext(ctx).Info("Storage layout upgraded", "version", LayoutVersion, "projectsKeepingTheirNameAsID", marked)
	return nil
}

// protobufPrefix starts every object the apiserver stores in protobuf.
var protobufPrefix = []byte("k8s\x00")

// keepNameAsID records on one stored Project that its storage id is its name.
// A data directory of the layout before storage ids was written while
// Projects were custom resources: they are stored as JSON.
func keepNameAsID(ctx context.Context, keys keyranges.Store, key string, value []byte, revision int64) (bool, error) {
	for {
		if bytes.HasPrefix(value, protobufPrefix) {
			// Written by a server of this layout (in protobuf), which
			// gives every Project its storage id: another server ran
			// the upgrade first and serves already.
			return false, nil
		}
		var obj map[string]any
		dec := json.NewDecoder(bytes.NewReader(value))
		dec.UseNumber() // numbers come back exactly as they were
		if err := dec.Decode(&obj); err != nil {
			return false, fmt.Errorf("upgrading the storage layout: project %s is not stored as JSON (is storage encrypted?): %w", key, err)
		}
		metadata, _ := obj["metadata"].(map[string]any)
		name, _ := metadata["name"].(string)
		if metadata == nil || !tenancy.ValidProjectName(name) {
			return false, fmt.Errorf("upgrading the storage layout: project %s has no valid name", key)
		}
		annotations, _ := metadata["annotations"].(map[string]any)
		if _, ok := annotations[tenancy.StorageIDAnnotation]; ok {
			return false, nil
		}
		if annotations == nil {
			annotations = map[string]any{}
			metadata["annotations"] = annotations
		}
		annotations[tenancy.StorageIDAnnotation] = name
		updated, err := json.Marshal(obj)
		if err != nil {
			return false, err
		}
		written, now, found, err := keys.CompareAndPut(ctx, key, updated, revision)
		if err != nil {
			return false, fmt.Errorf("upgrading the storage layout of project %s: %w", name, err)
		}
		if written {
			return true, nil
		}
		// Changed since it was read: read it again, unless it is gone.
		if !found {
			return false, nil
		}
		value, revision = now.Value, now.Revision
	}
}
