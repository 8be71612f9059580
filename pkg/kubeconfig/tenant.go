package kubeconfig

import (
	"fmt"
	"net/url"
	"strings"

	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"go.miloapis.com/milo/pkg/tenancy"
)

// Target is the control plane a derived context points at.
type Target struct {
	// Project or Organization names it; exactly one is set.
	Project, Organization string
}

// contextName is the name of the derived context, cluster and user entry.
func (t Target) contextName() string {
	if t.Project != "" {
		return "project-" + t.Project
	}
	return "organization-" + t.Organization
}

func (t Target) path() (string, error) {
	switch {
	case t.Project != "" && t.Organization != "":
		return "", fmt.Errorf("name a project or an organization, not both")
	case t.Project != "":
		if !tenancy.ValidProjectName(t.Project) {
			return "", fmt.Errorf("%q is not a valid project name", t.Project)
		}
		return tenancy.ProjectPath(t.Project), nil
	case t.Organization != "":
		if !tenancy.ValidProjectName(t.Organization) {
			return "", fmt.Errorf("%q is not a valid organization name", t.Organization)
		}
		return tenancy.OrganizationPath(t.Organization), nil
	default:
		return "", fmt.Errorf("name a project or an organization")
	}
}

// Derive adds to cfg a context for target, made from the context named from
// (the current context when empty): the same credentials and server, with the
// server URL pointing at the target's control plane. A server URL that already
// points at a project or organization is re-pointed, so contexts can be derived
// from each other. It returns the name of the new context.
func Derive(cfg *clientcmdapi.Config, from string, target Target) (string, error) {
	tenantPath, err := target.path()
	if err != nil {
		return "", err
	}
	if from == "" {
		from = cfg.CurrentContext
	}
	base, ok := cfg.Contexts[from]
	if !ok {
		return "", fmt.Errorf("context %q not found in the kubeconfig", from)
	}
	cluster, ok := cfg.Clusters[base.Cluster]
	if !ok {
		return "", fmt.Errorf("cluster %q of context %q not found in the kubeconfig", base.Cluster, from)
	}
	server, err := url.Parse(cluster.Server)
	if err != nil {
		return "", fmt.Errorf("server URL of cluster %q: %w", base.Cluster, err)
	}
	if i := strings.Index(server.Path, "/apis/resourcemanager.miloapis.com/v1alpha1/"); i >= 0 {
		server.Path = server.Path[:i]
	}
	server.Path = strings.TrimSuffix(server.Path, "/") + tenantPath
	server.RawPath = ""

	name := target.contextName()
	derived := cluster.DeepCopy()
	derived.Server = server.String()
	cfg.Clusters[name] = derived
	ctx := base.DeepCopy()
	ctx.Cluster = name
	ctx.Namespace = ""
	if target.Organization != "" {
		ctx.Namespace = tenancy.OrganizationNamespace(target.Organization)
	}
	cfg.Contexts[name] = ctx
	return name, nil
}

// Only returns a standalone kubeconfig holding just the named context, its
// cluster and its user, with that context current.
func Only(cfg *clientcmdapi.Config, contextName string) (*clientcmdapi.Config, error) {
	ctx, ok := cfg.Contexts[contextName]
	if !ok {
		return nil, fmt.Errorf("context %q not found", contextName)
	}
	out := clientcmdapi.NewConfig()
	out.Contexts[contextName] = ctx.DeepCopy()
	if c, ok := cfg.Clusters[ctx.Cluster]; ok {
		out.Clusters[ctx.Cluster] = c.DeepCopy()
	}
	if u, ok := cfg.AuthInfos[ctx.AuthInfo]; ok {
		out.AuthInfos[ctx.AuthInfo] = u.DeepCopy()
	}
	out.CurrentContext = contextName
	return out, nil
}
