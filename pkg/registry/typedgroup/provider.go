package typedgroup

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
)

// StorageProvider installs a group in the generic control plane.
type StorageProvider struct {
	Group *Group
	// Built, when set, is handed each resource's storage as it is made, so
	// that the server may read the group's objects in-process.
	Built func(resource string, storage *REST)
	// PrepareForCreate, when set, is called on each new object of the
	// group, prepared for its create (its uid set).
	PrepareForCreate func(ctx context.Context, obj runtime.Object)
}

// GroupName is the group's name.
func (p StorageProvider) GroupName() string { return p.Group.Version.Group }

// NewRESTStorage makes the storage of every enabled resource of the group.
func (p StorageProvider) NewRESTStorage(resources serverstorage.APIResourceConfigSource, optsGetter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	g := p.Group
	info := genericapiserver.NewDefaultAPIGroupInfo(g.Version.Group, legacyscheme.Scheme, legacyscheme.ParameterCodec, legacyscheme.Codecs)
	storage := map[string]rest.Storage{}
	for _, k := range g.Kinds {
		if !resources.ResourceEnabled(g.Version.WithResource(k.Resource)) {
			continue
		}
		main, status, err := g.newStorage(k, optsGetter, p.PrepareForCreate)
		if err != nil {
			return info, err
		}
		storage[k.Resource] = main
		if p.Built != nil {
			p.Built(k.Resource, main)
		}
		if status != nil {
			storage[k.Resource+"/status"] = status
		}
	}
	if len(storage) > 0 {
		info.VersionedResourcesStorageMap[g.Version.Version] = storage
	}
	return info, nil
}
