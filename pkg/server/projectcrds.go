package server

import (
	"time"

	"k8s.io/klog/v2"
	openapibuilder3 "k8s.io/kube-openapi/pkg/builder3"
	"k8s.io/kube-openapi/pkg/validation/spec"

	"go.miloapis.com/milo/pkg/projectcrds"
)

// newProjectCRDServing prepares the serving of projects' own CRDs with the
// apiextensions server's settings; nil without --project-crds.
func newProjectCRDServing(c CompletedConfig) *projectcrds.Serving {
	if c.ProjectCRDs == nil {
		return nil
	}
	g, x := c.APIExtensions.GenericConfig, c.APIExtensions.ExtraConfig
	return projectcrds.NewServing(projectcrds.ServingConfig{
		RESTOptions:          x.CRDRESTOptionsGetter,
		Admission:            g.AdmissionControl,
		ServiceResolver:      x.ServiceResolver,
		AuthResolverWrapper:  x.AuthResolverWrapper,
		Authorizer:           g.Authorization.Authorizer,
		RequestTimeout:       g.RequestTimeout,
		MinRequestTimeout:    time.Duration(g.MinRequestTimeout) * time.Second,
		StaticOpenAPISpec:    crdStaticOpenAPISpec(c),
		MaxRequestBodyBytes:  g.MaxRequestBodyBytes,
		NegotiatedSerializer: c.ControlPlane.Generic.Serializer,
	}, c.ProjectCRDs)
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
