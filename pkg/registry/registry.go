// Package registry lists Milo's API groups that the server serves from typed
// storage (package typedgroup), for the settings every one of them needs:
// where and how its objects are stored, its OpenAPI, the custom resource
// definitions it replaces.
package registry

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"go.miloapis.com/milo/pkg/registry/quota"
	"go.miloapis.com/milo/pkg/registry/resourcemanager"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
)

// Groups are the groups served from typed storage.
var Groups = []*typedgroup.Group{resourcemanager.Group, quota.Group}

// Resources are every resource of Groups.
func Resources() []schema.GroupResource {
	var out []schema.GroupResource
	for _, g := range Groups {
		out = append(out, g.Resources()...)
	}
	return out
}

// GroupNames are the names of Groups.
func GroupNames() []string {
	out := make([]string, len(Groups))
	for i, g := range Groups {
		out[i] = g.Version.Group
	}
	return out
}
