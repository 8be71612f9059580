// Package fairness makes API Priority and Fairness share the server between
// projects: every project's requests are one flow of their own.
//
// APF classifies a request by its user and resource (FlowSchemas) into a
// priority level, and within the level by a flow distinguisher — the user or the
// namespace — into queues, shuffle-sharded so that one flow cannot fill every
// queue. Neither distinguisher tells projects apart: two projects' `default`
// namespaces are one namespace to APF, and a project's users are anyone. Milo
// classifies a project's request as if it were made by a member of the group
// ProjectRequestsGroup in a namespace named for the project (its storage id), for
// classification only: the request itself, its user and its namespace are left as
// they are. Milo's FlowSchema selects that group and distinguishes by namespace,
// so each project is a flow of Milo's priority level for projects. Requests of
// outsiders to a project (see Classify) and platform requests are classified by
// the apiserver's own configuration.
package fairness

import (
	"context"
	"fmt"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/apiserver/pkg/authentication/user"
	utilflowcontrol "k8s.io/apiserver/pkg/util/flowcontrol"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"go.miloapis.com/milo/pkg/tenancy"
)

const (
	// ProjectRequestsGroup is the group a project's requests are classified as
	// made by. It is a system: group: tenants cannot impersonate it.
	ProjectRequestsGroup = "system:milo:project-requests"
	// ProjectsName names Milo's FlowSchema and priority level for projects.
	ProjectsName = "milo-projects"
	// AutoUpdateAnnotation set to "true" on Milo's priority level and
	// FlowSchema lets the server bring them back to Milo's spec on every start;
	// an operator sets it to "false" to keep changes. (Not the apiserver's own
	// annotation: the apiserver deletes objects carrying that one that are not
	// in its own configuration.)
	AutoUpdateAnnotation = "fairness.miloapis.com/autoupdate-spec"
	// flowPrefix starts the namespace a project's requests are classified in.
	flowPrefix = "milo-project:"
)

// Members tells whether a user holds a grant of Milo IAM in the request's
// project (pkg/iam/authz).
type Members interface {
	HasGrants(ctx context.Context, u user.Info) bool
}

// Wrap returns APF that classifies project requests by project (see the package
// documentation). fc nil (APF disabled) stays nil.
func Wrap(fc utilflowcontrol.Interface, members Members) utilflowcontrol.Interface {
	if fc == nil {
		return nil
	}
	return projectFlows{Interface: fc, members: members}
}

type projectFlows struct {
	utilflowcontrol.Interface
	members Members
}

func (p projectFlows) Handle(ctx context.Context, digest utilflowcontrol.RequestDigest,
	noteFn func(fs *flowcontrolv1.FlowSchema, pl *flowcontrolv1.PriorityLevelConfiguration, flowDistinguisher string),
	workEstimator func() fcrequest.WorkEstimate, queueNoteFn fq.QueueNoteFn, execFn func()) {
	p.Interface.Handle(ctx, Classify(ctx, digest, p.members), noteFn, workEstimator, queueNoteFn, execFn)
}

// Classify returns the digest APF classifies a request by. APF runs before
// authorization, so a request naming a project is not yet known to be allowed
// there: it joins the project's flow only when its user belongs to the project
// — the project's own service accounts (no other service account authenticates
// in a project) and whoever Milo IAM grants something there — and the project
// is resolved. Anyone else's request is classified as upstream would, by its
// user, so an outsider can neither crowd a project's queues nor spread over
// many flows by naming projects. A member's request is classified as made by a
// member of ProjectRequestsGroup in the project's flow namespace.
func Classify(ctx context.Context, digest utilflowcontrol.RequestDigest, members Members) utilflowcontrol.RequestDigest {
	t := tenancy.From(ctx)
	if !t.IsProject() || t.ID == "" || digest.RequestInfo == nil || digest.User == nil {
		return digest
	}
	if _, _, err := serviceaccount.SplitUsername(digest.User.GetName()); err != nil && (members == nil || !members.HasGrants(ctx, digest.User)) {
		return digest
	}
	info := *digest.RequestInfo
	info.Namespace = flowPrefix + t.ID
	u := &user.DefaultInfo{
		Name:   digest.User.GetName(),
		UID:    digest.User.GetUID(),
		Groups: append(append([]string{}, digest.User.GetGroups()...), ProjectRequestsGroup),
		Extra:  digest.User.GetExtra(),
	}
	return utilflowcontrol.RequestDigest{RequestInfo: &info, User: u}
}

// PriorityLevel is Milo's priority level for projects' requests: the largest
// share of the server's concurrency (projects are most of a Milo server's
// work), lending half of it when idle, queuing each project's requests in its
// own shuffle-sharded queues.
func PriorityLevel() *flowcontrolv1.PriorityLevelConfiguration {
	return &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ProjectsName, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		Spec: flowcontrolv1.PriorityLevelConfigurationSpec{
			Type: flowcontrolv1.PriorityLevelEnablementLimited,
			Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
				NominalConcurrencyShares: ptr.To[int32](100),
				LendablePercent:          ptr.To[int32](50),
				LimitResponse: flowcontrolv1.LimitResponse{
					Type:    flowcontrolv1.LimitResponseTypeQueue,
					Queuing: &flowcontrolv1.QueuingConfiguration{Queues: 128, HandSize: 6, QueueLengthLimit: 50},
				},
			},
		},
	}
}

// FlowSchema selects every project request (ProjectRequestsGroup) into
// PriorityLevel, one flow per project. Its precedence is above every
// upstream FlowSchema but exempt's, so that a project's service accounts in its
// own kube-system never borrow the platform's system priority levels.
func FlowSchema() *flowcontrolv1.FlowSchema {
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: ProjectsName, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: ProjectsName},
			MatchingPrecedence:         2,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByNamespaceType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: ProjectRequestsGroup}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					ClusterScope: true, Namespaces: []string{"*"},
				}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}
}

// Ensure creates Milo's priority level and FlowSchema, and brings them back to
// Milo's spec when they carry AutoUpdateAnnotation set to "true" (as the
// apiserver does with its suggested configuration); an operator who sets it to
// "false" keeps their changes.
func Ensure(ctx context.Context, c kubernetes.Interface) error {
	pls := c.FlowcontrolV1().PriorityLevelConfigurations()
	want := PriorityLevel()
	got, err := pls.Get(ctx, want.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := pls.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating priority level %s: %w", want.Name, err)
		}
	case err != nil:
		return err
	case got.Annotations[AutoUpdateAnnotation] == "true" && !apiequality.Semantic.DeepDerivative(want.Spec, got.Spec):
		got.Spec = want.Spec
		if _, err := pls.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating priority level %s: %w", want.Name, err)
		}
	}
	fss := c.FlowcontrolV1().FlowSchemas()
	wantFS := FlowSchema()
	gotFS, err := fss.Get(ctx, wantFS.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := fss.Create(ctx, wantFS, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating flow schema %s: %w", wantFS.Name, err)
		}
	case err != nil:
		return err
	case gotFS.Annotations[AutoUpdateAnnotation] == "true" && !apiequality.Semantic.DeepDerivative(wantFS.Spec, gotFS.Spec):
		gotFS.Spec = wantFS.Spec
		if _, err := fss.Update(ctx, gotFS, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating flow schema %s: %w", wantFS.Name, err)
		}
	}
	return nil
}
