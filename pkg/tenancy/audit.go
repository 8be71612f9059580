package tenancy

import (
	"k8s.io/apimachinery/pkg/util/sets"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
)

// AuditOnlyProjects returns an audit backend that passes to backend only the
// events of requests made in the named projects (by the AuditProject
// annotation, which the server adds as it authenticates a request, so every
// stage's event carries it). An audit policy cannot select by project — its
// rules see the path inside the control plane, not the project — so this is
// where one project's requests are singled out. Requests the tenant router
// refuses before the handler chain (a malformed project name, a forbidden
// impersonation) are not audited at all.
func AuditOnlyProjects(backend audit.Backend, projects []string) audit.Backend {
	if backend == nil || len(projects) == 0 {
		return backend
	}
	return &projectAudit{Backend: backend, projects: sets.New(projects...)}
}

type projectAudit struct {
	audit.Backend
	projects sets.Set[string]
}

func (p *projectAudit) ProcessEvents(events ...*auditinternal.Event) bool {
	kept := make([]*auditinternal.Event, 0, len(events))
	for _, e := range events {
		if p.projects.Has(e.Annotations[AuditProject]) {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return true
	}
	return p.Backend.ProcessEvents(kept...)
}

func (p *projectAudit) String() string { return "projects<" + p.Backend.String() + ">" }
