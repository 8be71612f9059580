package server

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/version"
	genericfeatures "k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	cliflag "k8s.io/component-base/cli/flag"
)

func parse(t *testing.T, args ...string) *Options {
	t.Helper()
	o := NewOptions()
	var fss cliflag.NamedFlagSets
	o.AddFlags(&fss)
	fs := pflag.NewFlagSet("start", pflag.ContinueOnError)
	// In order, as the command adds them: where two groups name one flag
	// (--storage-backend), the first group's is the one parsed.
	for _, name := range fss.Order {
		fs.AddFlagSet(fss.FlagSets[name])
	}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestDefaults(t *testing.T) {
	o := parse(t)
	if o.DataDir != ".milo" {
		t.Errorf("data dir %q", o.DataDir)
	}
	ss := o.ControlPlane.SecureServing
	if ss.BindAddress.String() != "127.0.0.1" || ss.BindPort != 6443 {
		t.Errorf("serving on %s:%d, want 127.0.0.1:6443", ss.BindAddress, ss.BindPort)
	}
	if got := o.ControlPlane.Authorization.Modes; len(got) != 1 || got[0] != "RBAC" {
		t.Errorf("authorization modes %v, want [RBAC]", got)
	}
	off := o.ControlPlane.Admission.GenericAdmission.DefaultOffPlugins
	for _, on := range []string{"NamespaceLifecycle", "ResourceQuota", "LimitRanger", "ServiceAccount", "ValidatingAdmissionWebhook", "ValidatingAdmissionPolicy"} {
		if off.Has(on) {
			t.Errorf("%s is off by default", on)
		}
	}
	for _, podOnly := range []string{"DefaultTolerationSeconds", "PodSecurity", "NodeRestriction"} {
		if !off.Has(podOnly) {
			t.Errorf("%s is on by default, but Milo serves no pods or nodes", podOnly)
		}
	}
}

func TestFlagsOverrideDefaults(t *testing.T) {
	o := parse(t, "--data-dir=/srv/milo", "--bind-address=0.0.0.0", "--secure-port=7443", "--etcd-servers=https://etcd-0:2379,https://etcd-1:2379", "--authorization-mode=RBAC,AlwaysDeny")
	if o.DataDir != "/srv/milo" || o.ControlPlane.SecureServing.BindPort != 7443 || !o.ControlPlane.SecureServing.BindAddress.IsUnspecified() {
		t.Errorf("flags not applied: %+v", o)
	}
	if got := o.ControlPlane.Etcd.StorageConfig.Transport.ServerList; len(got) != 2 {
		t.Errorf("etcd servers %v", got)
	}
	if got := o.ControlPlane.Authorization.Modes; len(got) != 2 {
		t.Errorf("authorization modes %v", got)
	}
}

func TestCompleteEmbeddedDefaults(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "state")
	o := parse(t, "--data-dir="+dataDir, "--secure-port=0")
	c, err := o.Complete(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.ControlPlane.SecureServing.Listener.Close()

	port := c.ControlPlane.SecureServing.Listener.Addr().(*net.TCPAddr).Port
	if port == 0 || !strings.HasSuffix(c.URL, ":"+itoa(port)) {
		t.Errorf("URL %s does not name the bound port %d", c.URL, port)
	}
	if c.Etcd == nil || c.Etcd.ClientURL.Scheme != "https" || !strings.HasPrefix(c.Etcd.ClientURL.Host, "127.0.0.1:") {
		t.Fatalf("embedded etcd config %+v, want https on loopback", c.Etcd)
	}
	tr := c.ControlPlane.Etcd.StorageConfig.Transport
	if len(tr.ServerList) != 1 || tr.ServerList[0] != c.Etcd.ClientURL.String() || tr.CertFile == "" || tr.TrustedCAFile == "" {
		t.Errorf("apiserver etcd transport %+v does not point at the embedded etcd with TLS", tr)
	}
	cp := c.ControlPlane
	for name, path := range map[string]string{
		"serving cert":    cp.SecureServing.ServerCert.CertKey.CertFile,
		"client CA":       cp.Authentication.ClientCert.ClientCA,
		"front proxy CA":  cp.Authentication.RequestHeader.ClientCAFile,
		"proxy client":    cp.ProxyClientCertFile,
		"SA signing key":  cp.ServiceAccountSigningKeyFile,
		"admin kubeconfg": c.AdminKubeconfig,
	} {
		if !strings.HasPrefix(path, dataDir) {
			t.Errorf("%s %q is not in the data directory", name, path)
		} else if _, err := os.Stat(path); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := cp.Authentication.ServiceAccounts.Issuers; len(got) != 1 || got[0] != c.URL {
		t.Errorf("service account issuer %v, want [%s]", got, c.URL)
	}
	if cp.ServiceAccountIssuer == nil {
		t.Error("no service account token generator")
	}
	info, err := os.Stat(dataDir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Errorf("data directory mode: %v %v, want 0700", info.Mode().Perm(), err)
	}
}

func TestCompleteWithExternalEtcdStartsNoEmbeddedOne(t *testing.T) {
	o := parse(t, "--data-dir="+t.TempDir(), "--secure-port=0", "--etcd-servers=https://127.0.0.1:2379")
	c, err := o.Complete(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.ControlPlane.SecureServing.Listener.Close()
	if c.Etcd != nil {
		t.Errorf("embedded etcd configured although --etcd-servers was given")
	}
	if got := c.ControlPlane.Etcd.StorageConfig.Transport.ServerList; len(got) != 1 || got[0] != "https://127.0.0.1:2379" {
		t.Errorf("etcd servers %v", got)
	}
}

func TestCompleteFailsBeforeWritingWhenPortIsTaken(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dataDir := filepath.Join(t.TempDir(), "state")
	o := parse(t, "--data-dir="+dataDir, "--secure-port="+itoa(busy.Addr().(*net.TCPAddr).Port))
	_, err = o.Complete(context.Background())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("err = %v, want address already in use", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("data directory created although the start failed: %v", err)
	}
}

func TestCompleteRejectsNoCompactionOfTheEmbeddedEtcd(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "state")
	o := parse(t, "--data-dir="+dataDir, "--secure-port=0", "--etcd-compaction-interval=0")
	if _, err := o.Complete(context.Background()); err == nil || !strings.Contains(err.Error(), "--etcd-compaction-interval must be positive") {
		t.Fatalf("err = %v", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("data directory created although the start failed: %v", err)
	}
	// An etcd of the operator's own may be compacted by them.
	o = parse(t, "--data-dir="+dataDir, "--secure-port=0", "--etcd-compaction-interval=0", "--etcd-servers=https://127.0.0.1:1")
	if errs := o.validateMiloFlags(); len(errs) > 0 {
		t.Fatalf("errors with --etcd-servers: %v", errs)
	}
	// kine compacts a SQL storage itself.
	o = parse(t, "--data-dir="+dataDir, "--secure-port=0", "--etcd-compaction-interval=0", "--storage-backend=postgres://127.0.0.1:5432/milo")
	if errs := o.validateMiloFlags(); len(errs) > 0 {
		t.Fatalf("errors with --storage-backend: %v", errs)
	}
}

func TestCompleteRejectsEmptyDataDir(t *testing.T) {
	o := parse(t, "--data-dir=", "--secure-port=0")
	if _, err := o.Complete(context.Background()); err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("err = %v", err)
	}
}

func TestTypedStorageMediaType(t *testing.T) {
	for value, ok := range map[string]bool{"application/vnd.kubernetes.protobuf": true, "application/json": true, "application/yaml": false, "": false} {
		o := parse(t, "--typed-storage-media-type="+value)
		errs := o.validateMiloFlags()
		if got := len(errs) == 0; got != ok {
			t.Errorf("--typed-storage-media-type=%q: errors %v, want accepted %v", value, errs, ok)
		}
	}
	if o := parse(t); o.TypedStorageMediaType != "application/vnd.kubernetes.protobuf" {
		t.Errorf("the default is %q, want protobuf", o.TypedStorageMediaType)
	}
}

func TestClientHost(t *testing.T) {
	for bind, want := range map[string]string{"0.0.0.0": "127.0.0.1", "::": "::1", "127.0.0.1": "127.0.0.1", "192.0.2.1": "192.0.2.1"} {
		if got := clientHost(net.ParseIP(bind)); got != want {
			t.Errorf("clientHost(%s) = %s, want %s", bind, got, want)
		}
	}
}

func TestMiloCRDsCoverTheAPIContract(t *testing.T) {
	crds, err := MiloCRDs()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range crds {
		got[c.Spec.Group+"/"+c.Spec.Names.Kind] = string(c.Spec.Scope)
	}
	want := map[string]string{
		"resourcemanager.miloapis.com/Organization":           "Cluster",
		"resourcemanager.miloapis.com/Folder":                 "Cluster",
		"resourcemanager.miloapis.com/Project":                "Cluster",
		"resourcemanager.miloapis.com/OrganizationMembership": "Namespaced",
		"iam.miloapis.com/Role":                               "Namespaced",
		"iam.miloapis.com/PolicyBinding":                      "Namespaced",
		"iam.miloapis.com/User":                               "Cluster",
		"iam.miloapis.com/Group":                              "Namespaced",
		"iam.miloapis.com/GroupMembership":                    "Namespaced",
		"iam.miloapis.com/ServiceAccount":                     "Namespaced",
		"iam.miloapis.com/ProtectedResource":                  "Cluster",
		"services.miloapis.com/Service":                       "Cluster",
		"services.miloapis.com/ServiceActivation":             "Cluster",
		"resourcemanager.miloapis.com/ProjectSuspension":      "Cluster",
		"quota.miloapis.com/ResourceRegistration":             "Cluster",
		"quota.miloapis.com/ResourceGrant":                    "Namespaced",
		"quota.miloapis.com/ResourceClaim":                    "Namespaced",
		"quota.miloapis.com/AllowanceBucket":                  "Namespaced",
		"quota.miloapis.com/ClaimCreationPolicy":              "Cluster",
		"quota.miloapis.com/GrantCreationPolicy":              "Cluster",
	}
	for kind, scope := range want {
		if got[kind] != scope {
			t.Errorf("%s: scope %q, want %q", kind, got[kind], scope)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d CRDs, want %d: %v", len(got), len(want), got)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestProjectCRDFlags: project CRDs are on by default, and a conversion
// webhook prefix must be an https URL ending in '/', so that it cannot also
// allow a host that merely starts like it.
func TestProjectCRDFlags(t *testing.T) {
	if o := parse(t); !o.ProjectCRDs.Enabled || len(o.ProjectCRDs.ConversionWebhookURLPrefixes) != 0 {
		t.Errorf("project CRDs by default: %+v", o.ProjectCRDs)
	}
	if o := parse(t, "--project-crds=false"); o.ProjectCRDs.Enabled {
		t.Errorf("--project-crds=false left them on: %+v", o.ProjectCRDs)
	}
	if o := parse(t, "--project-crd-reserved-groups=cert-manager.io,gateway.networking.k8s.io"); len(o.ProjectCRDs.ReservedGroups) != 2 || len(o.validateMiloFlags()) != 0 {
		t.Errorf("reserved groups not applied or refused: %+v %v", o.ProjectCRDs, o.validateMiloFlags())
	}
	if errs := parse(t, "--project-crd-reserved-groups=Not_A/Group").validateMiloFlags(); len(errs) != 1 {
		t.Errorf("a reserved group that is no API group: %v, want one error", errs)
	}
	o := parse(t, "--project-crds", "--project-crd-conversion-webhook-prefixes=https://convert.example.net/,https://hooks.example.net/crds/")
	if !o.ProjectCRDs.Enabled || len(o.ProjectCRDs.ConversionWebhookURLPrefixes) != 2 || len(o.validateMiloFlags()) != 0 {
		t.Errorf("flags not applied or refused: %+v %v", o.ProjectCRDs, o.validateMiloFlags())
	}
	for _, bad := range []string{"https://convert.example.net", "http://convert.example.net/", "https://convert.example.net/x?y=/", "/relative/"} {
		if errs := parse(t, "--project-crd-conversion-webhook-prefixes="+bad).validateMiloFlags(); len(errs) != 1 {
			t.Errorf("prefix %q: %v, want one error", bad, errs)
		}
	}
}

// Milo's default for SizeBasedListCostEstimate is off (no per-object size map in
// every watch cache); --feature-gates still turns it on.
func TestSizeBasedListCostEstimateIsOffUnlessAsked(t *testing.T) {
	parse(t)
	// A version emulated from before the feature existed still starts: Milo
	// changes its default, it sets no value. (Checked before the flags below
	// set one.)
	gate := utilfeature.DefaultMutableFeatureGate.DeepCopy()
	if err := gate.SetEmulationVersion(version.MustParse("1.33")); err != nil {
		t.Fatalf("emulating 1.33: %v", err)
	}
	if gate.Enabled(genericfeatures.SizeBasedListCostEstimate) {
		t.Error("SizeBasedListCostEstimate on at emulated version 1.33")
	}
	for _, c := range []struct {
		args []string
		want bool
	}{{nil, false}, {[]string{"--feature-gates=SizeBasedListCostEstimate=true"}, true}} { // the registry keeps the last flags: this order
		parse(t, c.args...)
		if err := compatibility.DefaultComponentGlobalsRegistry.Set(); err != nil {
			t.Fatal(err)
		}
		if got := utilfeature.DefaultFeatureGate.Enabled(genericfeatures.SizeBasedListCostEstimate); got != c.want {
			t.Errorf("with %v: SizeBasedListCostEstimate %v, want %v", c.args, got, c.want)
		}
	}
}

// The embedded etcd is reached over gRPC by default; the flag still takes
// what it took as a boolean, bare meaning reads and writes.
func TestEtcdInProcessModes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, EtcdInProcessNone},
		{[]string{"--etcd-in-process"}, EtcdInProcessAll},
		{[]string{"--etcd-in-process=reads"}, EtcdInProcessReads},
		{[]string{"--etcd-in-process=true"}, EtcdInProcessAll},
		{[]string{"--etcd-in-process=1"}, EtcdInProcessAll},
		{[]string{"--etcd-in-process=false"}, EtcdInProcessNone},
		{[]string{"--etcd-in-process=FALSE"}, EtcdInProcessNone},
	} {
		o := parse(t, tc.args...)
		if errs := o.validateMiloFlags(); len(errs) != 0 {
			t.Errorf("%v refused: %v", tc.args, errs)
			continue
		}
		if got, _ := etcdInProcessMode(o.EtcdInProcess); got != tc.want {
			t.Errorf("%v: mode %q, want %q", tc.args, got, tc.want)
		}
	}
	if errs := parse(t, "--etcd-in-process=writes").validateMiloFlags(); len(errs) != 1 {
		t.Errorf("an unknown mode gave %v, want one error", errs)
	}
}
