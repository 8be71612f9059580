// Package controllers lists Milo's controllers: the registry that `milo start`
// and `milo controller-manager` select from with --controllers.
package controllers

import (
	"context"
	"errors"

	"go.miloapis.com/milo/pkg/controllers/clusterroleaggregation"
	"go.miloapis.com/milo/pkg/controllers/crdlifecycle"
	"go.miloapis.com/milo/pkg/controllers/garbagecollector"
	"go.miloapis.com/milo/pkg/controllers/hierarchy"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/controllers/namespace"
	"go.miloapis.com/milo/pkg/controllers/resourcequota"
	"go.miloapis.com/milo/pkg/controllers/serviceaccount"
	"go.miloapis.com/milo/pkg/controllers/servicecatalog"
)

// Registry returns every controller Milo has, by name.
func Registry() manager.Registry {
	return manager.Registry{
		// Organizations, Folders and Projects: bootstrap, Ready, cascade
		// deletion; Roles, memberships and the platform's role aggregation.
		"hierarchy": func(s manager.Shared) (manager.Runner, error) {
			c, err := hierarchy.New(s.Config, s.Hierarchy, s.Workers, s.Events)
			if err == nil {
				c.StoredByResource = s.StoredByResource
				c.Purge = s.Purge
				c.OrganizationGone = s.OrganizationGone
			}
			return c, err
		},
		// Deleted namespaces are emptied and removed, in every project.
		namespace.Name: func(s manager.Shared) (manager.Runner, error) {
			c := namespace.New(s.Clients, s.Events)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
		// Projects' aggregated ClusterRoles get the rules they select.
		clusterroleaggregation.Name: func(s manager.Shared) (manager.Runner, error) {
			c := clusterroleaggregation.New(s.Clients)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
		// The CRDs projects define get their names accepted, and go when deleted.
		crdlifecycle.Name: func(s manager.Shared) (manager.Runner, error) {
			c := crdlifecycle.New(s.Clients)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
		// Dependents go with their owners, in every project and on the platform.
		garbagecollector.Name: func(s manager.Shared) (manager.Runner, error) {
			c := garbagecollector.New(s.Clients)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
		// ResourceQuotas report what they limit (status.hard, status.used).
		resourcequota.Name: func(s manager.Shared) (manager.Runner, error) {
			c := resourcequota.New(s.Clients)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
		// Services say whether the platform serves what they list.
		servicecatalog.Name: func(s manager.Shared) (manager.Runner, error) {
			c := servicecatalog.New(s.Clients)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
		// Every namespace has a default ServiceAccount and kube-root-ca.crt.
		serviceaccount.Name: func(s manager.Shared) (manager.Runner, error) {
			if len(s.RootCA) == 0 {
				return nil, errors.New("no root CA to publish")
			}
			c := serviceaccount.New(s.Clients, s.RootCA)
			return manager.RunFunc(func(ctx context.Context) { c.Run(ctx, s.Workers) }), nil
		},
	}
}
