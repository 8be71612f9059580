package server

import (
	"fmt"
	"time"

	"k8s.io/klog/v2"
	openapibuilder3 "k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"go.miloapis.com/milo/pkg/projectcrds"
)

// newProjectCRDServing prepares the serving of projects' own CRDs with the
// apiextensions server's settings; nil without --project-crds.
func newProjectCRDServing(c CompletedConfig) (*projectcrds.Serving, error) {
	if c.ProjectCRDs == nil {
		return nil, nil
	}
	g, x := c.APIExtensions.GenericConfig, c.APIExtensions.ExtraConfig
	// Projects' kinds are read and watched in etcd directly: a project's
	// objects are one key range, and a watch cache per schema class would
	// hold every project's objects of the resource once per class.
	storage, ok := x.CRDRESTOptionsGetter.(tenantRESTOptions)
	if !ok {
		return nil, fmt.Errorf("the storage of custom resources is not tenant-keyed")
	}
	storage.uncached = true
	storage.raw = (&sharedEtcd{inProcess: c.inProcess}).storage
	return projectcrds.NewServing(projectcrds.ServingConfig{
		RESTOptions:          storage,
		Admission:            g.AdmissionControl,
		ServiceResolver:      x.ServiceResolver,
		AuthResolverWrapper:  x.AuthResolverWrapper,
		Authorizer:           g.Authorization.Authorizer,
		RequestTimeout:       g.RequestTimeout,
		MinRequestTimeout:    time.Duration(g.MinRequestTimeout) * time.Second,
		StaticOpenAPISpec:    crdStaticOpenAPISpec(c),
		MaxRequestBodyBytes:  g.MaxRequestBodyBytes,
		NegotiatedSerializer: c.ControlPlane.Generic.Serializer,
	}, c.ProjectCRDs), nil
}

// crdStaticOpenAPISpec is the OpenAPI the apiextensions server builds its
// CRD handler on (ObjectMeta and the other shared definitions), from which
// server-side apply learns a custom resource's structure; without it apply
// deduces the structure from the objects.
func crdStaticOpenAPISpec(c CompletedConfig) map[string]*spec.Schema {
	config := c.APIExtensions.GenericConfig.OpenAPIV3Config
	if config == nil {
		return nil
	}
	defs, err := openapibuilder3.BuildOpenAPIDefinitionsForResources(config, "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.CustomResourceDefinition")
	if err != nil {
		klog.ErrorS(err, "Building the OpenAPI of project CRDs; server-side apply deduces their structure")
		return nil
	}
	return defs
}
