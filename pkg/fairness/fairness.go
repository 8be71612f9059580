// Package fairness shares the server between projects: API Priority and
// Fairness with every project's requests a flow of their own (this file), and
// each tenant's seats and CPU budget, which the tenant router applies after
// authorization (Seats, Budget).
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
	"runtime"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/apis/flowcontrol/bootstrap"
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
	// ProjectListsName names Milo's FlowSchema and priority level for
	// projects' LIST requests.
	ProjectListsName = "milo-project-lists"
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
	return priorityLevel(ProjectsName, flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: ptr.To[int32](100),
		LendablePercent:          ptr.To[int32](50),
		LimitResponse:            queuing(128, 6),
	})
}

// FlowSchema selects every project request (ProjectRequestsGroup) that
// ListsFlowSchema does not into PriorityLevel, one flow per project. Its
// precedence is above every upstream FlowSchema but exempt's and probes', so
// that a project's service accounts in its own kube-system never borrow the
// platform's system priority levels.
func FlowSchema() *flowcontrolv1.FlowSchema {
	return projectsFlowSchema(ProjectsName, 3, []string{"*"},
		[]flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}})
}

// Lists sizes the priority level of projects' LIST requests.
type Lists struct {
	// Concurrency is how many project LISTs run at once, all projects
	// together; 0 means the number of CPUs the process may use. A LIST of a
	// large collection is CPU work from start to end (reading the watch
	// cache, encoding megabytes), so more of them at once than there are
	// cores only slows every other request down.
	Concurrency int
	// ServerConcurrency is the server's concurrency limit that APF divides
	// between the priority levels (--max-requests-inflight plus
	// --max-mutating-requests-inflight).
	ServerConcurrency int
}

// shares returns the nominal concurrency shares that give the lists' priority
// level at most l.Concurrency seats, when the other priority levels hold
// others shares between them: APF gives a level
// ceil(ServerConcurrency * shares / all shares) seats.
func (l Lists) shares(others int) int32 {
	want := l.Concurrency
	if want <= 0 {
		want = runtime.GOMAXPROCS(0)
	}
	if l.ServerConcurrency <= want {
		return int32(max(others, 1)) // as large a part as the server allows
	}
	return int32(max(1, want*others/(l.ServerConcurrency-want)))
}

// ListsPriorityLevel is the priority level of projects' LIST requests, with
// the given shares (see Lists): few seats, neither lent nor borrowed, so that
// one project's large lists queue behind each other instead of taking every
// core from the requests of other projects and of the platform; each project
// is a flow of its own in the level's queues.
func ListsPriorityLevel(shares int32) *flowcontrolv1.PriorityLevelConfiguration {
	return priorityLevel(ProjectListsName, flowcontrolv1.LimitedPriorityLevelConfiguration{
		NominalConcurrencyShares: ptr.To(shares),
		LendablePercent:          ptr.To[int32](0),
		BorrowingLimitPercent:    ptr.To[int32](0),
		LimitResponse:            queuing(64, 4),
	})
}

// ListsFlowSchema selects projects' LIST requests (ProjectRequestsGroup, verb
// list) into ListsPriorityLevel, one flow per project. Its precedence, 2, is
// above FlowSchema's, which takes every other project request.
func ListsFlowSchema() *flowcontrolv1.FlowSchema {
	return projectsFlowSchema(ProjectListsName, 2, []string{"list"}, nil)
}

// priorityLevel is one of Milo's limited priority levels.
func priorityLevel(name string, limited flowcontrolv1.LimitedPriorityLevelConfiguration) *flowcontrolv1.PriorityLevelConfiguration {
	return &flowcontrolv1.PriorityLevelConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		Spec:       flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited, Limited: &limited},
	}
}

// queuing queues what a level cannot run yet, in shuffle-sharded queues.
func queuing(queues, handSize int32) flowcontrolv1.LimitResponse {
	return flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue,
		Queuing: &flowcontrolv1.QueuingConfiguration{Queues: queues, HandSize: handSize, QueueLengthLimit: 50}}
}

// projectsFlowSchema selects project requests (ProjectRequestsGroup) of the
// given verbs on every resource, and the given non-resource rules, into the
// priority level of the same name, one flow per project.
func projectsFlowSchema(name string, precedence int32, verbs []string, nonResource []flowcontrolv1.NonResourcePolicyRule) *flowcontrolv1.FlowSchema {
	return &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{AutoUpdateAnnotation: "true"}},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: name},
			MatchingPrecedence:         precedence,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByNamespaceType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: ProjectRequestsGroup}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{
					Verbs: verbs, APIGroups: []string{"*"}, Resources: []string{"*"},
					ClusterScope: true, Namespaces: []string{"*"},
				}},
				NonResourceRules: nonResource,
			}},
		},
	}
}

// Ensure creates Milo's priority levels and FlowSchemas, and brings them back
// to Milo's spec when they carry AutoUpdateAnnotation set to "true" (as the
// apiserver does with its suggested configuration); an operator who sets it to
// "false" keeps their changes. The lists' shares are computed from the other
// priority levels' shares as they are now.
func Ensure(ctx context.Context, c kubernetes.Interface, lists Lists) error {
	levels, err := c.FlowcontrolV1().PriorityLevelConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	// The lists' seats are a part of the server's concurrency, computed from
	// every level's shares: wait until the apiserver has created its own
	// levels, or the part would be computed against too few.
	for _, upstream := range append(append([]*flowcontrolv1.PriorityLevelConfiguration{}, bootstrap.MandatoryPriorityLevelConfigurations...), bootstrap.SuggestedPriorityLevelConfigurations...) {
		if !hasLevel(levels.Items, upstream.Name) {
			return fmt.Errorf("the apiserver's priority level %s does not exist yet", upstream.Name)
		}
	}
	others := 0
	for _, pl := range levels.Items {
		switch {
		case pl.Name == ProjectListsName:
		case pl.Spec.Limited != nil && pl.Spec.Limited.NominalConcurrencyShares != nil:
			others += int(*pl.Spec.Limited.NominalConcurrencyShares)
		case pl.Spec.Exempt != nil && pl.Spec.Exempt.NominalConcurrencyShares != nil:
			others += int(*pl.Spec.Exempt.NominalConcurrencyShares)
		}
	}
	if !hasLevel(levels.Items, ProjectsName) { // created below
		others += int(*PriorityLevel().Spec.Limited.NominalConcurrencyShares)
	}
	for _, want := range []*flowcontrolv1.PriorityLevelConfiguration{PriorityLevel(), ListsPriorityLevel(lists.shares(others))} {
		err := ensure[flowcontrolv1.PriorityLevelConfiguration](ctx, c.FlowcontrolV1().PriorityLevelConfigurations(), want,
			func(o *flowcontrolv1.PriorityLevelConfiguration) (*metav1.ObjectMeta, *flowcontrolv1.PriorityLevelConfigurationSpec) {
				return &o.ObjectMeta, &o.Spec
			})
		if err != nil {
			return fmt.Errorf("priority level %s: %w", want.Name, err)
		}
	}
	for _, want := range []*flowcontrolv1.FlowSchema{FlowSchema(), ListsFlowSchema()} {
		err := ensure[flowcontrolv1.FlowSchema](ctx, c.FlowcontrolV1().FlowSchemas(), want,
			func(o *flowcontrolv1.FlowSchema) (*metav1.ObjectMeta, *flowcontrolv1.FlowSchemaSpec) {
				return &o.ObjectMeta, &o.Spec
			})
		if err != nil {
			return fmt.Errorf("flow schema %s: %w", want.Name, err)
		}
	}
	return nil
}

func hasLevel(levels []flowcontrolv1.PriorityLevelConfiguration, name string) bool {
	for _, pl := range levels {
		if pl.Name == name {
			return true
		}
	}
	return false
}

// objects are the typed clients of one kind of APF object.
type objects[T any] interface {
	Get(context.Context, string, metav1.GetOptions) (*T, error)
	Create(context.Context, *T, metav1.CreateOptions) (*T, error)
	Update(context.Context, *T, metav1.UpdateOptions) (*T, error)
}

// ensure creates want, or, when the stored object carries AutoUpdateAnnotation
// "true" and its spec differs from want's, writes want's spec back.
func ensure[T, S any](ctx context.Context, c objects[T], want *T, parts func(*T) (*metav1.ObjectMeta, *S)) error {
	wantMeta, wantSpec := parts(want)
	got, err := c.Get(ctx, wantMeta.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := c.Create(ctx, want, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		return nil
	}
	if err != nil {
		return err
	}
	gotMeta, gotSpec := parts(got)
	if gotMeta.Annotations[AutoUpdateAnnotation] != "true" || apiequality.Semantic.DeepDerivative(*wantSpec, *gotSpec) {
		return nil
	}
	*gotSpec = *wantSpec
	_, err = c.Update(ctx, got, metav1.UpdateOptions{})
	return err
}
