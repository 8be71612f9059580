package tenancy

import (
	"k8s.io/apimachinery/pkg/util/sets"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	"k8s.io/apiserver/pkg/audit"
)

// AuditOnlyProjects returns an audit backend that passes to backend only the
// events of requests made in the named projects (by the AuditProject
// annotation). An audit policy cannot select by project — its rules see the
// path inside the control plane, not the project — so this is where one
// project's requests are singled out. Events of the RequestReceived stage,
// written before the request is authorized, carry no annotation yet and are
// never passed: use a policy that omits that stage.
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
