package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	genericfeatures "k8s.io/apiserver/pkg/features"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientfeatures "k8s.io/client-go/features"
	cliflag "k8s.io/component-base/cli/flag"
	cpoptions "k8s.io/kubernetes/pkg/controlplane/apiserver/options"
	"k8s.io/kubernetes/pkg/kubeapiserver"
	authzmodes "k8s.io/kubernetes/pkg/kubeapiserver/authorizer/modes"
	netutils "k8s.io/utils/net"

	"go.miloapis.com/milo/pkg/catalog"
	"go.miloapis.com/milo/pkg/controllers"
	"go.miloapis.com/milo/pkg/controllers/manager"
	"go.miloapis.com/milo/pkg/fairness"
	"go.miloapis.com/milo/pkg/hierarchy"
	"go.miloapis.com/milo/pkg/iam/evaluator"
	"go.miloapis.com/milo/pkg/iam/iamadmission"
	"go.miloapis.com/milo/pkg/iam/satokens"
	"go.miloapis.com/milo/pkg/kubeconfig"
	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/projectcrds"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/registry/typedgroup"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
	"go.miloapis.com/milo/pkg/storage/sqlstorage"
	"go.miloapis.com/milo/pkg/storage/tenantstorage"
	"go.miloapis.com/milo/pkg/suspension"
	"go.miloapis.com/milo/pkg/telemetry"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/pkg/tenantadmission"
)

// Options are the flags of `milo start`: Milo's own, plus every flag of the
// Kubernetes generic control plane with defaults suited to an all-in-one server.
type Options struct {
	// DataDir holds the embedded etcd data, the generated PKI and admin.kubeconfig.
	DataDir string
	// Controllers selects the controllers run in the server (under leader
	// election, so a separate `milo controller-manager` may run as well).
	Controllers manager.Selection
	// ProjectFlows makes API Priority and Fairness give each project a flow of
	// its own (package fairness).
	ProjectFlows bool
	// ProjectListConcurrency is how many projects' LISTs run at once, all
	// projects together (package fairness); 0: the number of CPUs.
	ProjectListConcurrency int
	// MaxListItems bounds one LIST of a project or an organization context
	// (package tenantstorage); 0 leaves lists unbounded.
	MaxListItems int64
	// EtcdMaxTxnOps is the --max-txn-ops of the etcd --etcd-servers names.
	EtcdMaxTxnOps int
	// EtcdInProcess is what the API server sends the embedded etcd
	// in-process rather than over gRPC: EtcdInProcessNone (the default),
	// EtcdInProcessReads or EtcdInProcessAll.
	EtcdInProcess string
	// MaxWatches bounds the watches one project or organization context
	// holds open at once (package tenancy); 0 leaves them unbounded.
	MaxWatches int
	// TenantCPUShare is the part of the server's CPUs one project's (or
	// organization context's) requests may keep busy on average (package
	// fairness, Budget); 0 budgets nothing.
	TenantCPUShare float64
	// TenantConcurrency bounds how many requests of one project (or
	// organization context) run at once (package fairness, Seats); 0 bounds
	// nothing.
	TenantConcurrency int
	// ProjectCRDs are the rules for CRDs defined in projects (package projectcrds).
	ProjectCRDs projectcrds.Rules
	// TopProjects sizes the heaviest-tenants report (package telemetry).
	TopProjects telemetry.TopOptions
	// AuditProjects, if set, limits the audit log to these projects' requests.
	AuditProjects []string
	// StorageBackend, when set, is a SQL database served through kine in
	// place of the embedded etcd: postgres://..., mysql://... or sqlite://PATH.
	StorageBackend string
	// TypedStorageMediaType is how the typed groups' objects are written to
	// storage: protobuf, or JSON while replicas of a Milo that cannot read
	// them in protobuf share the storage (typedgroup.StorageMediaType).
	TypedStorageMediaType string

	// ControlPlane are the generic control plane's options (serving, etcd,
	// authentication, authorization, admission, audit, logging, ...).
	ControlPlane *cpoptions.Options

	// hierarchy is what the MiloHierarchy admission plugin reads; the server fills it.
	hierarchy *hierarchy.Tree
	// iam is what the MiloIAM admission plugin and the authorizer read; the server feeds it.
	iam *evaluator.Evaluator
	// projectCRDs is what the ProjectCustomResourceDefinitions admission
	// plugin, the router and the CRD handler read; the server fills it.
	projectCRDs *projectcrds.Index
	// catalog is what the MiloServices admission plugin, the router and the
	// all-projects view read; the server feeds it.
	catalog *catalog.Catalog
	// quota is what the MiloQuota admission plugin decides from; the server feeds it.
	quota *quota.Ledger
	// suspensions is what the MiloProjectSuspension admission plugin reads; the server feeds it.
	suspensions *suspension.Index
}

// What the API server sends the embedded etcd in-process
// (--etcd-in-process): its reads; its reads and writes; nothing. Its
// watches always go over gRPC.
const (
	EtcdInProcessReads = "reads"
	EtcdInProcessAll   = "true"
	EtcdInProcessNone  = "false"
)

// etcdInProcessMode is the mode --etcd-in-process names: reads, or any
// spelling of a boolean the flag took when it was one (true: reads and
// writes).
func etcdInProcessMode(v string) (string, error) {
	if v == EtcdInProcessReads {
		return v, nil
	}
	if b, err := strconv.ParseBool(v); err == nil {
		if b {
			return EtcdInProcessAll, nil
		}
		return EtcdInProcessNone, nil
	}
	return "", fmt.Errorf("--etcd-in-process: %q must be one of %s, %s and %s", v, EtcdInProcessReads, EtcdInProcessAll, EtcdInProcessNone)
}

// NewOptions returns options with Milo's defaults: loopback on port 6443, RBAC
// authorization, the admission plugins that make sense without pods and nodes.
func NewOptions() *Options {
	cp := cpoptions.NewOptions()
	cp.SecureServing.BindAddress = netutils.ParseIPSloppy("127.0.0.1")
	cp.SecureServing.BindPort = 6443
	cp.Authorization.Modes = []string{authzmodes.ModeRBAC}
	tree := &hierarchy.Tree{}
	tenantadmission.RegisterTenantAnnotation(cp.Admission.GenericAdmission.Plugins)
	hierarchy.Register(cp.Admission.GenericAdmission.Plugins, tree)
	iam := evaluator.New()
	iamadmission.Register(cp.Admission.GenericAdmission.Plugins, iam, tree)
	o := &Options{DataDir: ".milo", EtcdInProcess: EtcdInProcessNone, TypedStorageMediaType: typedgroup.StorageMediaType, Controllers: manager.Selection{"*"}, ProjectFlows: true, MaxListItems: tenantstorage.DefaultMaxListItems, EtcdMaxTxnOps: tenantstorage.DefaultMaxTxnOps, MaxWatches: tenancy.DefaultMaxWatches, TenantCPUShare: fairness.DefaultCPUShare, TenantConcurrency: fairness.DefaultSeats(), TopProjects: telemetry.DefaultTopOptions,
		ProjectCRDs: projectcrds.Rules{Enabled: true, MaxPerProject: projectcrds.DefaultMaxPerProject}, ControlPlane: cp, hierarchy: tree, iam: iam, projectCRDs: &projectcrds.Index{}, catalog: &catalog.Catalog{},
		quota: quota.NewLedger(), suspensions: suspension.NewIndex()}
	projectcrds.Register(cp.Admission.GenericAdmission.Plugins, &o.ProjectCRDs, o.projectCRDs)
	catalog.Register(cp.Admission.GenericAdmission.Plugins, o.catalog)
	quota.Register(cp.Admission.GenericAdmission.Plugins, o.quota, tree)
	suspension.Register(cp.Admission.GenericAdmission.Plugins, o.suspensions, tree)
	// Milo's own plugins run first: webhooks and policies see stamped objects.
	cp.Admission.GenericAdmission.RecommendedPluginOrder = append([]string{tenantadmission.TenantAnnotationPlugin, hierarchy.PluginName, iamadmission.PluginName, projectcrds.PluginName, catalog.PluginName, suspension.PluginName},
		cp.Admission.GenericAdmission.RecommendedPluginOrder...)
	// Quota claims last: a create every other plugin refused claims nothing.
	cp.Admission.GenericAdmission.RecommendedPluginOrder = append(cp.Admission.GenericAdmission.RecommendedPluginOrder, quota.PluginName)
	cp.Admission.GenericAdmission.DefaultOffPlugins = defaultOffAdmissionPlugins()
	cp.Authentication.ServiceAccounts.OptionalTokenGetter = satokens.PlatformGetter
	defaultSizeBasedListCostOff()
	return o
}

// defaultSizeBasedListCostOff makes Milo's default for the apiserver's
// SizeBasedListCostEstimate feature off, before the flags are parsed, so that
// --feature-gates can still turn it on (and an emulated version before the
// feature, where it does not exist, still starts). With it on, every watch
// cache keeps the size of every object under its key (about 150 bytes an
// object, on keys that carry the project's storage id) and rebuilds that map
// from all the resource's keys every minute, to charge a list seats by bytes.
// Milo's priority levels charge a list by the objects it may return (see
// docs/fairness.md), which upstream computes from the object counts it keeps
// anyway. Overriding a default is refused once the gates are in a flag set:
// the first Options made in a process set it, and later ones find it set.
func defaultSizeBasedListCostOff() {
	_ = utilfeature.DefaultMutableFeatureGate.OverrideDefault(genericfeatures.SizeBasedListCostEstimate, false)
}

// Flag groups shown by `milo start --help`; the rest are listed by --help-all.
var primaryFlagGroups = []string{"milo", "secure serving", "etcd", "authentication", "authorization", "auditing", "logs"}

// AddFlags registers every flag in named groups, Milo's own first.
func (o *Options) AddFlags(fss *cliflag.NamedFlagSets) {
	fs := fss.FlagSet("milo")
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir, ""+
		"Directory for Milo's state: the embedded etcd data (etcd/), generated certificates and keys (pki/) "+
		"and admin.kubeconfig. Created if missing. Certificates and keys found there are reused.")
	fs.StringVar(&o.StorageBackend, "storage-backend", o.StorageBackend, ""+
		"Store everything in a SQL database instead of the embedded etcd, through kine run in this process: "+
		sqlstorage.Usage+" (MySQL or MariaDB for mysql://; a database is created if missing; sqlite://, one server only). "+
		"Empty: the embedded etcd in --data-dir, or --etcd-servers. See docs/operations.md.")
	fs.StringVar(&o.TypedStorageMediaType, "typed-storage-media-type", o.TypedStorageMediaType, ""+
		"How the objects of Milo's typed groups (resourcemanager.miloapis.com, quota.miloapis.com) are written to storage: "+
		runtime.ContentTypeProtobuf+" or "+runtime.ContentTypeJSON+". Either is read whatever this says. A Milo older "+
		"than their protobuf encoding cannot read it: while one shares the storage (a rolling upgrade, a rollback) give "+
		runtime.ContentTypeJSON+" (see docs/api.md).")
	fs.Var(&o.Controllers, "controllers", ""+
		"Controllers to run in this process: '*' for all, a name to add one, '-name' to leave one out "+
		"(known: "+strings.Join(controllers.Registry().Names(), ", ")+"); 'false' runs none. They join the leader "+
		"election of every `milo controller-manager`, so only one instance acts at a time; with --controllers=false "+
		"a separate `milo controller-manager` must run. Deleted projects' storage is always purged by the server.")
	fs.Lookup("controllers").NoOptDefVal = "*"
	fs.StringVar(&o.EtcdInProcess, "etcd-in-process", o.EtcdInProcess, ""+
		"What the API server sends the embedded etcd through etcd's in-process client rather than over gRPC: "+
		"'false' (nothing), 'reads' (its reads; writes and watches over gRPC; experimental) or 'true' (reads and writes, "+
		"experimental; watches over gRPC). See docs/operations.md, Embedded etcd. Ignored with --etcd-servers or SQL storage.")
	fs.Lookup("etcd-in-process").NoOptDefVal = EtcdInProcessAll
	fs.BoolVar(&o.ProjectFlows, "project-flows", o.ProjectFlows, ""+
		"Classify every project's requests into API Priority and Fairness's priority level milo-projects, "+
		"one flow per project, so that one project's load cannot starve another's (see docs/fairness.md). "+
		"false leaves project requests to the apiserver's own FlowSchemas.")
	fs.IntVar(&o.ProjectListConcurrency, "project-list-concurrency", o.ProjectListConcurrency, ""+
		"With --project-flows, about how many LIST requests of projects run at once, all projects together, in the "+
		"priority level milo-project-lists (each project a flow of its own); the rest queue. 0 means the number of "+
		"CPUs the server may use: a large LIST is CPU work from start to end (see docs/fairness.md).")
	fs.IntVar(&o.MaxWatches, "max-project-watches", o.MaxWatches, ""+
		"The most watches one project (or one organization context) holds open at once, all its users together; "+
		"more are refused with 429 and Retry-After until one closes. The server's superusers are not counted. "+
		"0 leaves watches unbounded (see docs/fairness.md).")
	fs.Float64Var(&o.TenantCPUShare, "tenant-cpu-share", o.TenantCPUShare, ""+
		"The part of the server's CPUs one project's (or one organization context's) requests may keep busy on average, "+
		"all its users together, counted as the requests' handler time (a watch: the time its events take to write); "+
		"past it, with a few seconds' burst, its requests are refused with 429 and Retry-After until it is back within. "+
		"The server's superusers are not counted. 0 budgets nothing (see docs/fairness.md).")
	fs.IntVar(&o.TenantConcurrency, "tenant-concurrency", o.TenantConcurrency, ""+
		"How many requests of one project (or one organization context), all its users together, run at once; its further "+
		"requests wait for one to end, first come first served, and are refused with 429 after 5 s; a request counts for 500 ms at "+
		"most (one waiting on a slow client then no longer holds the others back), and at most three such per seat are in flight beside the counted ones. Watches are not counted; "+
		"neither are the server's superusers. As many of its watches write an event at once; the others wait their turn "+
		"(a write stuck on a client that does not read counts for 250 ms). The default is half the server's CPUs, at least 1. 0 bounds nothing "+
		"(see docs/fairness.md).")
	fs.StringSliceVar(&o.AuditProjects, "audit-projects", o.AuditProjects, ""+
		"Record audit events only of requests made in these projects (names, comma-separated); the audit policy "+
		"still decides their level.")
	fs.IntVar(&o.TopProjects.N, "top-projects", o.TopProjects.N, ""+
		"How many of the heaviest projects, by request rate and by stored objects, /milo/top-projects and the "+
		"milo_top_project_* metrics name (no other series names a project). 0 turns the report off.")
	fs.DurationVar(&o.TopProjects.Window, "top-projects-window", o.TopProjects.Window, ""+
		"The window request rates of --top-projects are counted over.")
	fs.DurationVar(&o.TopProjects.StoredInterval, "top-projects-count-interval", o.TopProjects.StoredInterval, ""+
		"How often the objects every project stores are counted for --top-projects: one keys-only pass over storage. "+
		"0 never counts them.")
	fs.BoolVar(&o.ProjectCRDs.Enabled, "project-crds", o.ProjectCRDs.Enabled, ""+
		"Let projects define their own CustomResourceDefinitions, each seen and served only in its project "+
		"(see docs/project-crds.md). --project-crds=false keeps every CRD the platform's.")
	fs.IntVar(&o.ProjectCRDs.MaxPerProject, "max-project-crds", o.ProjectCRDs.MaxPerProject, ""+
		"The most CustomResourceDefinitions one project defines, those being created included; more are refused with 403. 0: no bound.")
	fs.StringSliceVar(&o.ProjectCRDs.ConversionWebhookURLPrefixes, "project-crd-conversion-webhook-prefixes", o.ProjectCRDs.ConversionWebhookURLPrefixes, ""+
		"URL prefixes (https, ending in '/') a project CRD's conversion webhook may call. None by default: a conversion "+
		"webhook would make the server call whatever URL a tenant names, so project CRDs are refused one unless its URL starts with one of these.")
	fs.StringSliceVar(&o.ProjectCRDs.ReservedGroups, "project-crd-reserved-groups", o.ProjectCRDs.ReservedGroups, ""+
		"API groups, each with its subdomains, that projects may not define CustomResourceDefinitions in (422), beside "+
		"miloapis.com: the groups of CRDs the platform installs or will install, which a project holding names in first "+
		"would keep the platform from installing (409).")
	fss.FlagSet("etcd").IntVar(&o.EtcdMaxTxnOps, "etcd-max-txn-ops", o.EtcdMaxTxnOps, ""+
		"With --etcd-servers: the etcd cluster's --max-txn-ops, how many compares and operations it accepts in one transaction. "+
		"Creates waiting for the same quota count are committed together in one transaction up to it; raise both "+
		"together (a project's create takes seven of each). The embedded etcd (and `milo etcd`) accepts "+strconv.Itoa(embeddedetcd.MaxTxnOps)+".")
	fs.Int64Var(&o.MaxListItems, "max-project-list-items", o.MaxListItems, ""+
		"The most items one LIST of a project or an organization context returns: a larger page is cut to this many "+
		"(with a continue token), a list asked without a limit that would hold more is refused with 400. "+
		"The platform's superusers are not bounded. 0 leaves lists unbounded (see docs/fairness.md).")
	o.ControlPlane.AddFlags(fss)
	// Upstream's etcd flags have a --storage-backend of their own (etcd3,
	// the only one it serves): Milo's, above, is the one a command parses,
	// its flag group being added first, and upstream's is not shown.
	_ = fss.FlagSet("etcd").MarkHidden("storage-backend")
}

// PrimaryFlagGroups returns the flag groups an all-in-one user needs most; the
// others remain accepted and are shown by --help-all.
func PrimaryFlagGroups() []string { return primaryFlagGroups }

// CompletedOptions are options whose defaults have been derived and which passed validation.
type CompletedOptions struct {
	// ControlPlane are the completed generic control plane options.
	ControlPlane cpoptions.CompletedOptions
	// DataDir is the absolute data directory.
	DataDir string
	// Etcd is the embedded etcd to start, or nil when --etcd-servers names
	// an external one or the storage is SQL.
	Etcd *embeddedetcd.Config
	// SQL is the SQL storage to serve through kine, or nil.
	SQL *sqlstorage.Config
	// EtcdInProcessOn is --etcd-in-process's mode: EtcdInProcessReads,
	// EtcdInProcessAll or EtcdInProcessNone (also when empty).
	EtcdInProcessOn string
	// EtcdInProcess, once Run started the embedded etcd with
	// EtcdInProcessOn, makes clients that call it in-process (nil from it:
	// the member is one of a cluster).
	EtcdInProcess func() *clientv3.Client
	// AdminKubeconfig is the path of the kubeconfig of the admin identity.
	AdminKubeconfig string
	// TypedStorageMediaType is how the typed groups' objects are written.
	TypedStorageMediaType string
	// URL is where clients on this machine reach the server.
	URL string
	// Hierarchy is what hierarchy admission reads, to be initialized by the server.
	Hierarchy *hierarchy.Tree
	// IAM is what IAM admission reads, to be fed by the server.
	IAM *evaluator.Evaluator
	// Controllers are the controllers run in the server.
	Controllers []string
	// ProjectFlows gives each project its own APF flow.
	ProjectFlows bool
	// ProjectListConcurrency sizes the priority level of projects' LISTs.
	ProjectListConcurrency int
	// MaxListItems bounds one tenant LIST.
	MaxListItems int64
	// EtcdMaxTxnOps is how many compares and operations the etcd accepts in
	// one transaction.
	EtcdMaxTxnOps int
	// MaxWatches bounds a tenant's open watches.
	MaxWatches int
	// TenantCPUShare is each tenant's part of the server's CPUs.
	TenantCPUShare float64
	// TenantConcurrency bounds a tenant's requests in flight.
	TenantConcurrency int
	// TopProjects sizes the heaviest-tenants report.
	TopProjects telemetry.TopOptions
	// AuditProjects limits the audit log to these projects.
	AuditProjects []string
	// ProjectCRDs: projects define their own CRDs.
	ProjectCRDs bool
	// ProjectCRDIndex holds projects' CRDs once the server fills it.
	ProjectCRDIndex *projectcrds.Index
	// Catalog is the service catalog's index, which the server feeds.
	Catalog *catalog.Catalog
	// Quota is the quota ledger admission decides from, which the server feeds.
	Quota *quota.Ledger
	// Suspensions are the ProjectSuspensions in effect, which the server feeds.
	Suspensions *suspension.Index
}

// Complete prepares the data directory (PKI, admin.kubeconfig), binds the serving
// port, fills in everything derived from them and validates the result.
//
// It fails before writing anything when the port is taken or a flag is invalid,
// and everything it writes is written atomically and reused by the next start.
func (o *Options) Complete(ctx context.Context) (CompletedOptions, error) {
	if errs := o.validateMiloFlags(); len(errs) > 0 {
		return CompletedOptions{}, utilerrors.NewAggregate(errs)
	}
	etcdInProcess, _ := etcdInProcessMode(o.EtcdInProcess) // validated above
	if err := disableWatchListReflectors(); err != nil {
		return CompletedOptions{}, err
	}
	selected, err := controllers.Registry().Select(o.Controllers)
	if err != nil {
		return CompletedOptions{}, fmt.Errorf("--controllers: %w", err)
	}
	cp := o.ControlPlane
	listener, err := listen(cp)
	if err != nil {
		return CompletedOptions{}, err
	}
	closeListener := true
	defer func() {
		if closeListener {
			listener.Close() //nolint:errcheck
		}
	}()
	port := listener.Addr().(*net.TCPAddr).Port
	cp.SecureServing.Listener = listener
	cp.SecureServing.BindPort = port

	dataDir, err := prepareDataDir(o.DataDir)
	if err != nil {
		return CompletedOptions{}, err
	}
	files, err := pki.Ensure(filepath.Join(dataDir, "pki"), servingNames(cp.SecureServing.BindAddress))
	if err != nil {
		return CompletedOptions{}, fmt.Errorf("preparing certificates in %s: %w", dataDir, err)
	}
	url := "https://" + net.JoinHostPort(clientHost(cp.SecureServing.BindAddress), strconv.Itoa(port))
	applyGeneratedDefaults(cp, files, url)

	var etcd *embeddedetcd.Config
	var sql *sqlstorage.Config
	maxTxnOps := o.EtcdMaxTxnOps
	if o.StorageBackend != "" {
		sql = &sqlstorage.Config{Endpoint: o.StorageBackend, Socket: kineSocket(dataDir)}
		t := &cp.Etcd.StorageConfig.Transport
		t.ServerList = []string{"unix://" + sql.Socket}
		t.CertFile, t.KeyFile, t.TrustedCAFile = "", "", ""
	} else if len(cp.Etcd.StorageConfig.Transport.ServerList) == 0 {
		etcd, err = embeddedEtcdConfig(filepath.Join(dataDir, "etcd"), files)
		if err != nil {
			return CompletedOptions{}, err
		}
		maxTxnOps = embeddedetcd.MaxTxnOps
		t := &cp.Etcd.StorageConfig.Transport
		t.ServerList = []string{etcd.ClientURL.String()}
		t.CertFile, t.KeyFile, t.TrustedCAFile = files.EtcdClient.CertFile, files.EtcdClient.KeyFile, files.CA.CertFile
	}

	if err := withoutEventsWatchCache(cp); err != nil {
		return CompletedOptions{}, err
	}
	completed, err := cp.Complete(ctx, nil, nil)
	if err != nil {
		return CompletedOptions{}, err
	}
	if errs := completed.Validate(); len(errs) > 0 {
		return CompletedOptions{}, utilerrors.NewAggregate(errs)
	}

	adminKubeconfig := filepath.Join(dataDir, "admin.kubeconfig")
	admin := kubeconfig.ClientCert{Name: "milo-admin", Server: url, CAFile: files.CA.CertFile, CertFile: files.Admin.CertFile, KeyFile: files.Admin.KeyFile}
	if err := admin.Write(adminKubeconfig); err != nil {
		return CompletedOptions{}, err
	}
	closeListener = false
	return CompletedOptions{ControlPlane: completed, DataDir: dataDir, Etcd: etcd, SQL: sql, AdminKubeconfig: adminKubeconfig, URL: url, Hierarchy: o.hierarchy, IAM: o.iam, Controllers: selected, ProjectFlows: o.ProjectFlows, ProjectListConcurrency: o.ProjectListConcurrency, MaxListItems: o.MaxListItems, EtcdMaxTxnOps: maxTxnOps, MaxWatches: o.MaxWatches, EtcdInProcessOn: etcdInProcess, TenantCPUShare: o.TenantCPUShare, TenantConcurrency: o.TenantConcurrency, TopProjects: o.TopProjects, AuditProjects: o.AuditProjects, TypedStorageMediaType: o.TypedStorageMediaType, ProjectCRDs: o.ProjectCRDs.Enabled, ProjectCRDIndex: o.projectCRDs, Catalog: o.catalog, Quota: o.quota, Suspensions: o.suspensions}, nil
}

func (o *Options) validateMiloFlags() []error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("--data-dir must not be empty"))
	}
	if o.MaxListItems < 0 {
		errs = append(errs, errors.New("--max-project-list-items must not be negative"))
	}
	if _, err := etcdInProcessMode(o.EtcdInProcess); err != nil {
		errs = append(errs, err)
	}
	if o.EtcdMaxTxnOps < 1 {
		errs = append(errs, errors.New("--etcd-max-txn-ops must be positive"))
	}
	if o.TypedStorageMediaType != runtime.ContentTypeProtobuf && o.TypedStorageMediaType != runtime.ContentTypeJSON {
		errs = append(errs, fmt.Errorf("--typed-storage-media-type: %q is neither %s nor %s", o.TypedStorageMediaType, runtime.ContentTypeProtobuf, runtime.ContentTypeJSON))
	}
	if o.StorageBackend != "" {
		if err := sqlstorage.Validate(o.StorageBackend); err != nil {
			errs = append(errs, fmt.Errorf("--storage-backend: %w", err))
		}
		if len(o.ControlPlane.Etcd.StorageConfig.Transport.ServerList) > 0 {
			errs = append(errs, errors.New("--storage-backend and --etcd-servers name two storages: give one"))
		}
	}
	if o.StorageBackend == "" && len(o.ControlPlane.Etcd.StorageConfig.Transport.ServerList) == 0 && o.ControlPlane.Etcd.StorageConfig.CompactionInterval <= 0 {
		// The embedded etcd compacts only when the API server asks it to:
		// without an interval its history would grow until it fills its
		// quota, after which etcd refuses every write.
		errs = append(errs, errors.New("--etcd-compaction-interval must be positive with the embedded etcd: nothing else compacts its history, which would grow until etcd refuses writes (keep the default of 5m unless measured otherwise)"))
	}
	for _, prefix := range o.ProjectCRDs.ConversionWebhookURLPrefixes {
		if u, err := url.Parse(prefix); err != nil || u.Scheme != "https" || u.Host == "" || !strings.HasSuffix(u.Path, "/") || u.RawQuery != "" || u.Fragment != "" {
			errs = append(errs, fmt.Errorf("--project-crd-conversion-webhook-prefixes: %q is not an https URL whose path ends in '/' (without one, a prefix would also allow hosts that merely start like it)", prefix))
		}
	}
	if o.ProjectCRDs.MaxPerProject < 0 {
		errs = append(errs, errors.New("--max-project-crds must not be negative"))
	}
	for _, group := range o.ProjectCRDs.ReservedGroups {
		if msgs := validation.IsDNS1123Subdomain(group); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--project-crd-reserved-groups: %q is not an API group: %s", group, strings.Join(msgs, "; ")))
		}
	}
	if o.ProjectCRDs.Enabled && slices.Contains(o.ControlPlane.Admission.GenericAdmission.DisablePlugins, projectcrds.PluginName) {
		errs = append(errs, fmt.Errorf("--project-crds needs the admission plugin %s: it keeps projects' CRDs from calling URLs of their choosing (--project-crds=false turns projects' CRDs off)", projectcrds.PluginName))
	}
	if o.MaxWatches < 0 {
		errs = append(errs, errors.New("--max-project-watches must not be negative"))
	}
	if o.TenantCPUShare < 0 || o.TenantCPUShare > 1 || math.IsNaN(o.TenantCPUShare) {
		errs = append(errs, errors.New("--tenant-cpu-share must be between 0 and 1"))
	}
	if o.TenantConcurrency < 0 {
		errs = append(errs, errors.New("--tenant-concurrency must not be negative"))
	}
	errs = append(errs, o.TopProjects.Validate()...)
	if o.ProjectListConcurrency < 0 {
		errs = append(errs, errors.New("--project-list-concurrency must not be negative"))
	}
	ss := o.ControlPlane.SecureServing
	if ss.BindPort < 0 || ss.BindPort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d must be between 0 and 65535", ss.BindPort))
	}
	if ss.BindAddress == nil {
		errs = append(errs, errors.New("--bind-address must be an IP address"))
	}
	return errs
}

// listen binds the serving port first of all, so that a port in use is reported
// before anything is written to the data directory.
func listen(cp *cpoptions.Options) (net.Listener, error) {
	if cp.SecureServing.Listener != nil {
		return cp.SecureServing.Listener, nil
	}
	addr := net.JoinHostPort(cp.SecureServing.BindAddress.String(), strconv.Itoa(cp.SecureServing.BindPort))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s (--bind-address, --secure-port): %w", addr, err)
	}
	return l, nil
}

// prepareDataDir creates the data directory, owner-only, and checks it is writable.
func prepareDataDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("data directory %q: %w", dir, err)
	}
	if info, err := os.Stat(abs); err == nil && !info.IsDir() {
		return "", fmt.Errorf("data directory %s is not a directory", abs)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("cannot create data directory: %w", err)
	}
	probe, err := os.CreateTemp(abs, ".write-check-*")
	if err != nil {
		return "", fmt.Errorf("data directory %s is not writable: %w", abs, err)
	}
	probe.Close()           //nolint:errcheck
	os.Remove(probe.Name()) //nolint:errcheck
	return abs, nil
}

// servingNames lists what the serving certificate must be valid for: loopback,
// the bind address, and, when bound to every interface, the host's names and addresses.
func servingNames(bind net.IP) pki.ServingNames {
	names := pki.ServingNames{DNS: []string{"localhost"}, IPs: []net.IP{net.ParseIP("127.0.0.1"), net.IPv6loopback}}
	if !bind.IsUnspecified() {
		if !bind.IsLoopback() {
			names.IPs = append(names.IPs, bind)
		}
		return names
	}
	if host, err := os.Hostname(); err == nil {
		names.DNS = append(names.DNS, host)
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipnet, ok := a.(*net.IPNet); ok && !ipnet.IP.IsLoopback() && !ipnet.IP.IsLinkLocalUnicast() {
				names.IPs = append(names.IPs, ipnet.IP)
			}
		}
	}
	return names
}

// clientHost is the address local clients use to reach a server bound to bind.
func clientHost(bind net.IP) string {
	switch {
	case bind.IsUnspecified() && bind.To4() == nil:
		return "::1"
	case bind.IsUnspecified():
		return "127.0.0.1"
	default:
		return bind.String()
	}
}

// applyGeneratedDefaults points every certificate and key flag the user left
// empty at the generated PKI. Flags the user set win.
func applyGeneratedDefaults(cp *cpoptions.Options, files pki.Files, url string) {
	cert := &cp.SecureServing.ServerCert.CertKey
	if cert.CertFile == "" && cert.KeyFile == "" {
		cert.CertFile, cert.KeyFile = files.Serving.CertFile, files.Serving.KeyFile
	}
	if cp.Authentication.ClientCert != nil && cp.Authentication.ClientCert.ClientCA == "" {
		cp.Authentication.ClientCert.ClientCA = files.CA.CertFile
	}
	if rh := cp.Authentication.RequestHeader; rh != nil && rh.ClientCAFile == "" {
		rh.ClientCAFile = files.FrontProxyCA.CertFile
		rh.AllowedNames = []string{pki.FrontProxyClientName}
		rh.UsernameHeaders = []string{"X-Remote-User"}
		rh.UIDHeaders = []string{"X-Remote-Uid"}
		rh.GroupHeaders = []string{"X-Remote-Group"}
		rh.ExtraHeaderPrefixes = []string{"X-Remote-Extra-"}
	}
	if cp.ProxyClientCertFile == "" && cp.ProxyClientKeyFile == "" {
		cp.ProxyClientCertFile, cp.ProxyClientKeyFile = files.FrontProxyClient.CertFile, files.FrontProxyClient.KeyFile
	}
	if sa := cp.Authentication.ServiceAccounts; sa != nil {
		if len(sa.KeyFiles) == 0 && cp.ServiceAccountSigningEndpoint == "" {
			sa.KeyFiles = []string{files.ServiceAccountKey}
		}
		if len(sa.Issuers) == 0 {
			sa.Issuers = []string{url}
		}
	}
	if cp.ServiceAccountSigningKeyFile == "" && cp.ServiceAccountSigningEndpoint == "" {
		cp.ServiceAccountSigningKeyFile = files.ServiceAccountKey
	}
}

// kineSocket is where kine serves the SQL storage: in the data directory,
// unless that path is too long for a unix socket.
func kineSocket(dataDir string) string {
	socket := filepath.Join(dataDir, "kine.sock")
	if len(socket) < 100 {
		return socket
	}
	sum := sha256.Sum256([]byte(dataDir))
	return filepath.Join(os.TempDir(), fmt.Sprintf("milo-kine-%x.sock", sum[:8]))
}

func embeddedEtcdConfig(dir string, files pki.Files) (*embeddedetcd.Config, error) {
	clientURL, httpURL, peerURL, err := embeddedetcd.PickURLs()
	if err != nil {
		return nil, fmt.Errorf("choosing ports for the embedded etcd: %w", err)
	}
	return &embeddedetcd.Config{
		Dir:       dir,
		ClientURL: clientURL,
		HTTPURL:   httpURL,
		PeerURL:   peerURL,
		CertFile:  files.EtcdServer.CertFile,
		KeyFile:   files.EtcdServer.KeyFile,
		CAFile:    files.CA.CertFile,
	}, nil
}

// disableWatchListReflectors turns off client-go's WatchListClient feature in the
// server process. With it on, a reflector streams its initial state into a
// temporary store keyed by namespace/name before handing it over; the watch cache
// is filled by such a reflector, and objects of different projects that share a
// namespace and name would collide there and be lost from the cache. With it off,
// the cache is filled by paginated lists, which keep every object.
func disableWatchListReflectors() error {
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(clientfeatures.WatchListClient): false}); err != nil {
		return fmt.Errorf("disabling %s: %w", clientfeatures.WatchListClient, err)
	}
	return nil
}

// DataDirEtcd prepares the data directory dir as `milo start` does (its
// PKI, its embedded etcd's configuration) for a command that works on its
// storage with the server stopped, and returns the etcd to start and the
// client certificate to reach it with.
func DataDirEtcd(dir string) (*embeddedetcd.Config, pki.Files, error) {
	abs, err := prepareDataDir(dir)
	if err != nil {
		return nil, pki.Files{}, err
	}
	files, err := pki.Ensure(filepath.Join(abs, "pki"), servingNames(net.ParseIP("127.0.0.1")))
	if err != nil {
		return nil, pki.Files{}, fmt.Errorf("preparing certificates in %s: %w", abs, err)
	}
	etcd, err := embeddedEtcdConfig(filepath.Join(abs, "etcd"), files)
	return etcd, files, err
}

// withoutEventsWatchCache gives Events no watch cache unless the user sized
// one (--watch-cache-sizes), as kube-apiserver does: a cache would hold every
// Event for its TTL, and the controllers record one as each project becomes
// Ready. Reads of Events go to storage, which keeps a project's Events under
// one key range.
func withoutEventsWatchCache(cp *cpoptions.Options) error {
	if !cp.Etcd.EnableWatchCache {
		return nil
	}
	sizes := kubeapiserver.DefaultWatchCacheSizes()
	user, err := genericoptions.ParseWatchCacheSizes(cp.Etcd.WatchCacheSizes)
	if err != nil {
		return err
	}
	maps.Copy(sizes, user)
	cp.Etcd.WatchCacheSizes, err = genericoptions.WriteWatchCacheSizes(sizes)
	return err
}
