package server

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	limitrangestore "k8s.io/kubernetes/pkg/registry/core/limitrange/storage"

	"go.miloapis.com/milo/pkg/listencoding"
	"go.miloapis.com/milo/pkg/tenantstate"
)

// storageProviders adapts the generic control plane's built-in API groups:
//
//   - LimitRanges join the core group, which the generic control plane leaves out:
//     every Kubernetes-style control plane is expected to serve them, and the
//     LimitRanger admission plugin needs them;
//   - the core and RBAC storages are installed into the tenant reader, through
//     which tenant-aware admission, project RBAC and the project token
//     authenticator read a tenant's objects;
//   - every group writes its JSON lists item by item without allocating each
//     item's encoding (listencoding), so that a tenant's large lists do not
//     keep the garbage collector busy for everyone.
func storageProviders(providers []controlplaneapiserver.RESTStorageProvider, tenant *tenantstate.Reader) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, len(providers))
	for i, p := range providers {
		var adapt func(v1 map[string]rest.Storage, resources serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) error
		switch p.GroupName() {
		case corev1.GroupName:
			adapt = func(v1 map[string]rest.Storage, resources serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) error {
				tenant.Install(corev1.GroupName, v1)
				if !resources.ResourceEnabled(corev1.SchemeGroupVersion.WithResource("limitranges")) {
					return nil
				}
				storage, err := limitrangestore.NewREST(getter)
				if err != nil {
					return err
				}
				v1["limitranges"] = storage
				return nil
			}
		case rbacv1.GroupName:
			adapt = func(v1 map[string]rest.Storage, _ serverstorage.APIResourceConfigSource, _ generic.RESTOptionsGetter) error {
				tenant.Install(rbacv1.GroupName, v1)
				return nil
			}
		}
		out[i] = keepPostStartHook(p, withStorage{RESTStorageProvider: p, adapt: adapt})
	}
	return out
}

// keepPostStartHook makes sure wrapping a provider does not hide its post-start
// hook (the RBAC provider's hook bootstraps the default roles). Providers are
// not compared: one holding a func (resourcemanager.StorageProvider) cannot be.
func keepPostStartHook(original, wrapped controlplaneapiserver.RESTStorageProvider) controlplaneapiserver.RESTStorageProvider {
	hooks, ok := original.(genericapiserver.PostStartHookProvider)
	if !ok {
		return wrapped
	}
	return withPostStartHook{RESTStorageProvider: wrapped, PostStartHookProvider: hooks}
}

type withPostStartHook struct {
	controlplaneapiserver.RESTStorageProvider
	genericapiserver.PostStartHookProvider
}

// withStorage lets a provider's v1 storage map be adjusted after it is built
// (adapt, if set), and serves its group's JSON lists through listencoding.
type withStorage struct {
	controlplaneapiserver.RESTStorageProvider
	adapt func(v1 map[string]rest.Storage, resources serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) error
}

func (w withStorage) NewRESTStorage(resources serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := w.RESTStorageProvider.NewRESTStorage(resources, getter)
	if err != nil {
		return info, err
	}
	// Every group's lists are then streamed, the hierarchy's too (its codecs
	// did not stream): the same bytes, but an error part-way through a list
	// ends the answer there, as for every other group, rather than a 500.
	if info.NegotiatedSerializer != nil {
		info.NegotiatedSerializer = listencoding.Wrap(info.NegotiatedSerializer)
	}
	if v1 := info.VersionedResourcesStorageMap["v1"]; v1 != nil && w.adapt != nil {
		err = w.adapt(v1, resources, getter)
	}
	return info, err
}
