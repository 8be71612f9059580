package resourcemanager

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/kubernetes/pkg/api/legacyscheme"

	v1alpha1 "go.miloapis.com/milo/pkg/apis/resourcemanager/v1alpha1"
)

// StorageMediaType is how the group's objects are stored: JSON, as they were
// stored when they were custom resources, so that data written then and now
// is one format (the types have no protobuf encoding).
const StorageMediaType = runtime.ContentTypeJSON

// Resources are the group's resources, for storage settings made before the
// storage exists (key prefixes, media type).
func Resources() []schema.GroupResource {
	out := make([]schema.GroupResource, len(kinds))
	for i, k := range kinds {
		out[i] = v1alpha1.Resource(k.resource)
	}
	return out
}

// KeyPrefix is where a resource's objects are stored under the storage prefix:
// where they were stored as custom resources.
func KeyPrefix(gr schema.GroupResource) string { return gr.Group + "/" + gr.Resource }

// StorageProvider installs the group in the generic control plane.
type StorageProvider struct {
	// Built, when set, is handed each resource's storage as it is made, so
	// that the server may read the hierarchy in-process (hierarchy.Tree).
	Built func(resource string, storage rest.Getter)
	// Bootstrap, when set, is asked at each Project's create, its uid set,
	// to have the project's bootstrap stored with it, and reports whether
	// it will be: the Project is then stored Ready (see strategy).
	Bootstrap func(ctx context.Context, project *v1alpha1.Project) bool
}

// GroupName is resourcemanager.miloapis.com.
func (StorageProvider) GroupName() string { return v1alpha1.GroupName }

// NewRESTStorage makes the storage of every enabled resource of the group.
func (p StorageProvider) NewRESTStorage(resources serverstorage.APIResourceConfigSource, optsGetter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info := genericapiserver.NewDefaultAPIGroupInfo(v1alpha1.GroupName, legacyscheme.Scheme, legacyscheme.ParameterCodec, legacyscheme.Codecs)
	info.NegotiatedSerializer = withoutProtobuf{legacyscheme.Codecs}
	storage := map[string]rest.Storage{}
	for _, k := range kinds {
		if !resources.ResourceEnabled(v1alpha1.SchemeGroupVersion.WithResource(k.resource)) {
			continue
		}
		main, status, err := newStorage(k, optsGetter, p.Bootstrap)
		if err != nil {
			return info, err
		}
		storage[k.resource] = main
		if p.Built != nil {
			p.Built(k.resource, main)
		}
		storage[k.resource+"/status"] = status
	}
	if len(storage) > 0 {
		info.VersionedResourcesStorageMap[v1alpha1.SchemeGroupVersion.Version] = storage
	}
	return info, nil
}

// withoutProtobuf offers every encoding but protobuf, which the group's types
// do not have: a client asking for protobuf first is answered in the JSON it
// also accepts, as for a custom resource.
type withoutProtobuf struct{ runtime.NegotiatedSerializer }

func (w withoutProtobuf) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, s := range w.NegotiatedSerializer.SupportedMediaTypes() {
		if s.MediaType != runtime.ContentTypeProtobuf {
			out = append(out, s)
		}
	}
	return out
}
