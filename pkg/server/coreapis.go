package server

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"
	limitrangestore "k8s.io/kubernetes/pkg/registry/core/limitrange/storage"

	"go.miloapis.com/milo/pkg/tenantadmission"
)

// coreStorage adds LimitRanges to the core API group of the generic control
// plane, which leaves them out: Milo serves them because every Kubernetes-style
// control plane is expected to, and the LimitRanger admission plugin needs them.
// It also hands the namespace storage to tenant-aware admission.
func coreStorage(providers []controlplaneapiserver.RESTStorageProvider, namespaces *tenantadmission.Namespaces) []controlplaneapiserver.RESTStorageProvider {
	out := make([]controlplaneapiserver.RESTStorageProvider, len(providers))
	for i, p := range providers {
		if p.GroupName() == corev1.GroupName {
			p = coreWithLimitRanges{RESTStorageProvider: p, namespaces: namespaces}
		}
		out[i] = p
	}
	return out
}

type coreWithLimitRanges struct {
	controlplaneapiserver.RESTStorageProvider
	namespaces *tenantadmission.Namespaces
}

func (c coreWithLimitRanges) NewRESTStorage(resources serverstorage.APIResourceConfigSource, getter generic.RESTOptionsGetter) (genericapiserver.APIGroupInfo, error) {
	info, err := c.RESTStorageProvider.NewRESTStorage(resources, getter)
	if err != nil {
		return info, err
	}
	const resource = "limitranges"
	v1 := info.VersionedResourcesStorageMap[corev1.SchemeGroupVersion.Version]
	if ns, ok := v1["namespaces"].(rest.Getter); ok && c.namespaces != nil {
		c.namespaces.Set(ns)
	}
	if v1 == nil || !resources.ResourceEnabled(corev1.SchemeGroupVersion.WithResource(resource)) {
		return info, nil
	}
	storage, err := limitrangestore.NewREST(getter)
	if err != nil {
		return info, err
	}
	v1[resource] = storage
	return info, nil
}
