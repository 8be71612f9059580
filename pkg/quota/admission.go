package quota

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/dynamic"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/utils/ptr"

	quotav1alpha1 "go.miloapis.com/milo/pkg/apis/quota/v1alpha1"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/tenancy"
)

// PluginName is the name of the quota admission plugin.
const PluginName = "MiloQuota"

// Register adds the plugin, which decides from ledger and resolves
// consumers' organizations with hierarchy, to plugins. It
//
//   - claims, for each create a ClaimCreationPolicy matches, the units its
//     consumer's buckets hold, and refuses the create (403) when one would
//     be exceeded; the claim is stored with the object, in its transaction
//     (on etcd), or before it, named after the policy and the object's uid;
//   - asks the ledger to check the claims of an object whose delete it
//     admits (and of every object of a Project being deleted);
//   - keeps the quota objects the platform's: they are written at the
//     platform only (403 in an organization's context, whatever the role),
//     and a grant lives in its consumer's organization's namespace (422).
func Register(plugins *admission.Plugins, ledger *Ledger, hierarchy tenancy.HierarchyLookup) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete), ledger: ledger, hierarchy: hierarchy}, nil
	})
}

type plugin struct {
	*admission.Handler
	ledger    *Ledger
	hierarchy tenancy.HierarchyLookup
	client    dynamic.Interface
}

var (
	_ admission.ValidationInterface     = &plugin{}
	_ initializer.WantsDynamicClient    = &plugin{}
	_ admission.InitializationValidator = &plugin{}
)

// SetDynamicClient receives the loopback client claims are written with.
func (p *plugin) SetDynamicClient(c dynamic.Interface) { p.client = c }

// ValidateInitialization reports a plugin built without its client.
func (p *plugin) ValidateInitialization() error {
	if p.client == nil {
		return errors.New("the quota admission plugin needs a dynamic client")
	}
	return nil
}

var (
	projectsResource       = schema.GroupResource{Group: ConsumerGroup, Resource: "projects"}
	namespacesResource     = schema.GroupResource{Resource: "namespaces"}
	resourceQuotasResource = schema.GroupResource{Resource: "resourcequotas"}
)

// refuseQuotaCounts refuses a ResourceQuota that counts quota objects:
// held in an organization's namespace, whose editors write ResourceQuotas,
// it would stop the server storing the claims and grants it owes.
func refuseQuotaCounts(a admission.Attributes) error {
	q, ok := a.GetObject().(*api.ResourceQuota)
	if !ok {
		return nil
	}
	for name := range q.Spec.Hard {
		if strings.HasSuffix(string(name), "."+quotav1alpha1.GroupName) {
			return apierrors.NewInvalid(api.Kind("ResourceQuota"), a.GetName(), field.ErrorList{field.Forbidden(field.NewPath("spec", "hard").Key(string(name)),
				"the objects of "+quotav1alpha1.GroupName+" are the server's; they cannot be limited")})
		}
	}
	return nil
}

func (p *plugin) Validate(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	gr := a.GetResource().GroupResource()
	if gr.Group == quotav1alpha1.GroupName {
		return p.validateQuotaObject(ctx, a)
	}
	if a.GetSubresource() != "" {
		return nil
	}
	switch a.GetOperation() {
	case admission.Delete:
		if a.IsDryRun() {
			return nil
		}
		t := tenancy.From(ctx)
		project := ""
		if t.Kind == tenancy.Project {
			project = t.Name
		}
		name := a.GetName()
		if name == "" { // one object of a deletecollection
			if old, err := meta.Accessor(a.GetOldObject()); err == nil {
				name = old.GetName()
			}
		}
		p.ledger.TriggerDeleted(TriggerRef{Project: project, Group: gr.Group, Resource: gr.Resource, Namespace: objectNamespace(a), Name: name}.Key())
		if t.Kind != tenancy.Project && gr == projectsResource {
			p.ledger.ProjectDeleted(name)
		}
		return nil
	case admission.Create:
		if gr == resourceQuotasResource {
			return refuseQuotaCounts(a)
		}
		return p.claim(ctx, a, o)
	case admission.Update:
		if gr == resourceQuotasResource {
			return refuseQuotaCounts(a)
		}
	}
	return nil
}

// claim charges a create to the buckets the matching policies name.
func (p *plugin) claim(ctx context.Context, a admission.Attributes, o admission.ObjectInterfaces) error {
	kind := a.GetKind()
	if !p.ledger.Synced() {
		// What the policies are is not known yet: nothing is created
		// unclaimed, but the server's own bootstrap writes.
		if u := a.GetUserInfo(); u != nil && u.GetName() == user.APIServerUser {
			return nil
		}
		return apierrors.NewServiceUnavailable("quotas are loading; retry in a moment")
	}
	policies := p.ledger.PoliciesFor(kind.GroupKind())
	if len(policies) == 0 {
		return nil
	}
	obj := a.GetObject()
	accessor, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	t := tenancy.From(ctx)
	trigger := TriggerRef{Group: kind.Group, Version: a.GetResource().Version, Resource: a.GetResource().Resource, Kind: kind.Kind,
		Namespace: objectNamespace(a), Name: accessor.GetName(), UID: string(accessor.GetUID())}
	if t.Kind == tenancy.Project {
		trigger.Project = t.Name
	}
	// What the policies' expressions see is made once one is to be run:
	// a create no policy charges (its consumer has no grant), or that only
	// policies without expressions charge, converts nothing.
	var vars *Vars
	varsOf := func() (Vars, error) {
		if vars == nil {
			content, err := toMap(obj, a.GetKind().GroupVersion(), o)
			if err != nil {
				return Vars{}, err
			}
			vars = &Vars{Trigger: content, User: userVars(a), RequestInfo: map[string]any{
				"verb": "create", "apiGroup": kind.Group, "apiVersion": kind.Version, "resource": a.GetResource().Resource,
				"subresource": a.GetSubresource(), "name": accessor.GetName(), "namespace": a.GetNamespace()}}
		}
		return *vars, nil
	}
	consumers := &consumersOf{ledger: p.ledger, ctx: ctx, tenant: t, object: accessor, namespace: a.GetNamespace(), gr: a.GetResource().GroupResource(), hierarchy: p.hierarchy}
	var plans []ClaimPlan
	for _, policy := range policies {
		// A policy that charges the object's own consumer, who has no
		// grant for what it claims, has nothing to decide: its
		// expressions are not run (one that fails would refuse creates of
		// consumers it does not limit).
		if !policy.NamesConsumer() {
			if c, ok := consumers.Default(policy.ConsumerKind(consumers)); !ok || !p.ledger.HasGrant(c, policy.ResourceTypes()) {
				continue
			}
		}
		var v Vars
		if policy.ReadsVars() {
			if v, err = varsOf(); err != nil {
				return apierrors.NewInternalError(err)
			}
		}
		plan, ok, err := policy.Plan(v, trigger, consumers)
		if err != nil {
			return apierrors.NewForbidden(a.GetResource().GroupResource(), accessor.GetName(),
				fmt.Errorf("quota policy %s cannot be applied: %w", policy.Name, err))
		}
		if ok {
			plans = append(plans, plan)
		}
	}
	reserved, err := p.ledger.Reserve(plans)
	var exceeded *Exceeded
	if errors.As(err, &exceeded) {
		return apierrors.NewForbidden(a.GetResource().GroupResource(), accessor.GetName(), exceeded)
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if a.IsDryRun() {
		for _, plan := range reserved {
			p.ledger.Release(plan.Namespace, plan.Name)
		}
		p.ledger.ReleaseObject(trigger.ObjectKey())
		return nil
	}
	release := func(plans []ClaimPlan) {
		for _, plan := range plans {
			p.ledger.Release(plan.Namespace, plan.Name)
		}
		p.ledger.ReleaseObject(trigger.ObjectKey())
	}
	if kind.GroupKind() == projectKind {
		if err := p.countedWithProject(ctx, accessor, trigger); err != nil {
			release(reserved)
			return err
		}
	}
	if len(reserved) == 0 {
		return nil
	}
	// On etcd the claims are stored in the object's own transaction: one
	// durable write, and a create that fails stores no claim.
	// Claims whose metadata the API would refuse (a policy's template made
	// them) are stored through it instead, to answer its error.
	// Their units are added to their buckets' tallies in that transaction
	// too, which every replica reads: see TalliedAnnotation.
	if joint := tenantstorage.JointFrom(ctx); joint != nil {
		if companions, ok := claimObjects(reserved); ok && joint.Add(accessor.GetUID(), companions,
			func() { release(reserved) }, func() { p.ledger.StoredWithObject(reserved) }) {
			refuse := func(e *Exceeded) error {
				return apierrors.NewForbidden(a.GetResource().GroupResource(), accessor.GetName(), e)
			}
			if !joint.Tally(p.ledger.Guard(reserved, refuse)) {
				return apierrors.NewInternalError(fmt.Errorf("the quota claims of %s %s were not stored", trigger.Kind, trigger.Name))
			}
			return nil
		}
	}
	for i, plan := range reserved {
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(plan.Object())
		if err == nil {
			_, err = p.client.Resource(quotav1alpha1.ClaimsResource).Namespace(plan.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			// The claims stored so far are checked, found without their
			// object, and deleted by the quota controller.
			release(reserved[i:])
			return apierrors.NewInternalError(fmt.Errorf("storing the quota claim of %s %s: %w", trigger.Kind, trigger.Name, err))
		}
	}
	return nil
}

// claimObjects are the claims of plans as they are stored with their
// object: the fields the server sets on a create (uid, creation time,
// generation) set, and marked tallied. False when one's metadata is not
// valid.
func claimObjects(plans []ClaimPlan) ([]tenantstorage.Companion, bool) {
	now := metav1.Now()
	out := make([]tenantstorage.Companion, 0, len(plans))
	for _, plan := range plans {
		claim := plan.Object()
		if errs := apivalidation.ValidateObjectMetaAccessor(claim, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata")); len(errs) > 0 {
			return nil, false
		}
		if claim.Annotations == nil {
			claim.Annotations = map[string]string{}
		}
		claim.Annotations[TalliedAnnotation] = "true"
		claim.UID = uuid.NewUUID()
		claim.CreationTimestamp = now
		claim.Generation = 1
		out = append(out, tenantstorage.Companion{Resource: quotav1alpha1.ClaimsResource.GroupResource(), Object: claim})
	}
	return out, true
}

// objectNamespace is the namespace of the object a request is for: a
// Namespace's requests name it as its own namespace, but it has none.
func objectNamespace(a admission.Attributes) string {
	if a.GetResource().GroupResource() == namespacesResource {
		return ""
	}
	return a.GetNamespace()
}

// toMap renders the object as policies see it: in the version of the
// request, as its clients write it (built-in kinds reach admission in
// their internal form, which has no JSON names).
func toMap(obj runtime.Object, gv schema.GroupVersion, o admission.ObjectInterfaces) (map[string]any, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.Object, nil
	}
	if o != nil {
		external, err := o.GetObjectConvertor().ConvertToVersion(obj.DeepCopyObject(), gv)
		if err != nil {
			return nil, fmt.Errorf("converting %s to %s: %w", obj.GetObjectKind().GroupVersionKind().Kind, gv, err)
		}
		obj = external
	}
	return runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
}

func userVars(a admission.Attributes) map[string]any {
	u := a.GetUserInfo()
	if u == nil {
		return nil
	}
	groups := make([]any, 0, len(u.GetGroups()))
	for _, g := range u.GetGroups() {
		groups = append(groups, g)
	}
	extra := map[string]any{}
	for k, vs := range u.GetExtra() {
		l := make([]any, 0, len(vs))
		for _, v := range vs {
			l = append(l, v)
		}
		extra[k] = l
	}
	return map[string]any{"name": u.GetName(), "uid": u.GetUID(), "groups": groups, "extra": extra}
}

// consumersOf resolves the consumers of one object being created.
type consumersOf struct {
	ledger    *Ledger
	ctx       context.Context
	tenant    tenancy.Tenant
	object    metav1.Object
	namespace string
	gr        schema.GroupResource
	hierarchy tenancy.HierarchyLookup
}

func (c *consumersOf) Default(kind string) (Consumer, bool) {
	switch {
	case kind == KindProject && c.tenant.Kind == tenancy.Project:
		return Consumer{Kind: KindProject, Name: c.tenant.Name}, true
	case kind != KindOrganization:
		return Consumer{}, false
	case c.tenant.Kind == tenancy.Project:
		org, _, err := c.hierarchy.OrganizationOf(c.ctx, projectsResource, c.tenant.Name)
		return Consumer{Kind: KindOrganization, Name: org}, err == nil && org != ""
	case tenancy.IsOrganizationScoped(c.gr):
		// A Folder or Project: its organization label, set by admission before this plugin.
		org := c.object.GetLabels()[tenancy.OrganizationLabel]
		return Consumer{Kind: KindOrganization, Name: org}, org != ""
	}
	if org, ok := tenancy.OrganizationOfNamespace(c.namespace); ok {
		return Consumer{Kind: KindOrganization, Name: org}, true
	}
	if c.tenant.Kind == tenancy.Organization {
		return Consumer{Kind: KindOrganization, Name: c.tenant.Name}, true
	}
	return Consumer{}, false
}

func (c *consumersOf) KindFor(resourceType string) string { return c.ledger.ConsumerKind(resourceType) }

func (c *consumersOf) Organization(consumer Consumer) (string, error) {
	return OrganizationOf(c.ctx, c.hierarchy, consumer)
}

// OrganizationOf returns the organization of a consumer: an Organization's
// own name, a Project's organization.
func OrganizationOf(ctx context.Context, h tenancy.HierarchyLookup, c Consumer) (string, error) {
	switch c.Kind {
	case KindOrganization:
		return c.Name, nil
	case KindProject:
		org, found, err := h.OrganizationOf(ctx, projectsResource, c.Name)
		if err != nil {
			return "", err
		}
		if !found || org == "" {
			return "", fmt.Errorf("project %q not found", c.Name)
		}
		return org, nil
	}
	return "", fmt.Errorf("Milo charges Organizations and Projects, not %q", c.Kind)
}

// refuseTallyMark keeps TalliedAnnotation the server's: only a claim stored
// with its object, which added to its buckets' tallies, carries it, and its
// delete takes from them. Set on a claim written through the API, it would
// take what was never added; taken off, it would leave units counted.
func refuseTallyMark(a admission.Attributes) error {
	if a.GetOperation() != admission.Create && a.GetOperation() != admission.Update {
		return nil
	}
	mark := func(obj runtime.Object) *string {
		if m, err := meta.Accessor(obj); err == nil {
			if v, ok := m.GetAnnotations()[TalliedAnnotation]; ok {
				return &v
			}
		}
		return nil
	}
	now, was := mark(a.GetObject()), (*string)(nil)
	if a.GetOperation() == admission.Update {
		was = mark(a.GetOldObject())
	}
	if ptr.Equal(now, was) {
		return nil
	}
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{field.Forbidden(field.NewPath("metadata", "annotations").Key(TalliedAnnotation),
		"set by the server on the claims it stores with their object, and kept as it set it")})
}

// validateQuotaObject keeps the quota kinds the platform's.
func (p *plugin) validateQuotaObject(ctx context.Context, a admission.Attributes) error {
	gr := a.GetResource().GroupResource()
	if t := tenancy.From(ctx); t.Kind != tenancy.Platform {
		return apierrors.NewForbidden(gr, a.GetName(), fmt.Errorf("quotas are the platform's: they are written at the platform, not in the %s", t))
	}
	if gr == quotav1alpha1.ClaimsResource.GroupResource() {
		return refuseTallyMark(a)
	}
	if gr != quotav1alpha1.GrantsResource.GroupResource() || a.GetSubresource() != "" || (a.GetOperation() != admission.Create && a.GetOperation() != admission.Update) {
		return nil
	}
	g, ok := As[quotav1alpha1.ResourceGrant](a.GetObject())
	if !ok {
		return nil
	}
	c := Consumer{Kind: g.Spec.ConsumerRef.Kind, Name: g.Spec.ConsumerRef.Name}
	path := field.NewPath("spec", "consumerRef")
	if err := grantPlacement(a.GetNamespace(), c); err != nil {
		return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{field.Invalid(path, g.Spec.ConsumerRef, err.Error())})
	}
	if c.Kind == KindProject {
		org, err := OrganizationOf(ctx, p.hierarchy, c)
		if err != nil {
			return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{field.Invalid(path.Child("name"), c.Name, err.Error())})
		}
		if want := tenancy.OrganizationNamespace(org); want != a.GetNamespace() {
			return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{field.Invalid(path, g.Spec.ConsumerRef,
				fmt.Sprintf("project %s is in organization %s: its grants live in %s", c.Name, org, want))})
		}
	}
	return nil
}

// projectKind is the kind organizations' Projects are counted of.
var projectKind = schema.GroupKind{Group: ConsumerGroup, Kind: KindProject}

// countedWithProject has a Project's create move its organization's count
// of Projects in storage, in the Project's own transaction, where a grant
// limits them and the server counts them there (on etcd): the create is
// stored only where it fits with the count as etcd holds it then, whichever
// replica stored the others. A create that cannot carry the count (its
// request ended) is refused rather than stored uncounted. A Project created
// through an update (a server-side apply, a PUT: no Joint) is stored
// uncounted, checked by this server's ledger alone; the count, which its
// delete takes from, is then found below the server's cache of Projects
// and counted again (projectsGuard.low).
func (p *plugin) countedWithProject(ctx context.Context, project metav1.Object, trigger TriggerRef) error {
	t := p.ledger.projectTallies()
	joint := tenantstorage.JointFrom(ctx)
	if t == nil || joint == nil {
		return nil
	}
	org := project.GetLabels()[tenancy.OrganizationLabel]
	g := t.guard(ctx, org, func(e *Exceeded) error { return apierrors.NewForbidden(projectsResource, project.GetName(), e) })
	if g == nil {
		return nil
	}
	if !joint.Add(project.GetUID(), nil, func() { p.ledger.ReleaseObject(trigger.ObjectKey()) }, nil) || !joint.Tally(g) {
		return apierrors.NewInternalError(fmt.Errorf("the count of organization %s's Projects cannot be stored with Project %s: retry", org, project.GetName()))
	}
	return nil
}
