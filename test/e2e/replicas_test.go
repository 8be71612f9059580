package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"go.miloapis.com/milo/pkg/pki"
	"go.miloapis.com/milo/pkg/quota"
	"go.miloapis.com/milo/pkg/storage/embeddedetcd"
	"go.miloapis.com/milo/pkg/tenancy"
	"go.miloapis.com/milo/test/framework"
)

// etcdMember is one `milo etcd` process of a test's cluster.
type etcdMember struct {
	args []string
	cmd  *exec.Cmd
	logs *framework.SyncBuffer
	done chan struct{}
}

// start runs the member and waits until it serves.
func (e *etcdMember) start(t *testing.T) {
	t.Helper()
	e.cmd = exec.Command(miloBin, e.args...)
	e.logs = &framework.SyncBuffer{}
	e.cmd.Stderr = e.logs
	stdout, err := e.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.done = make(chan struct{})
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "is serving") {
				close(serving)
			}
		}
	}()
	go func() {
		_ = e.cmd.Wait()
		close(e.done)
	}()
	t.Cleanup(e.kill)
	select {
	case <-serving:
	case <-e.done:
		t.Fatalf("etcd member exited: %s", e.logs.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("etcd member not serving within 2 minutes: %s", e.logs.String())
	}
}

// kill stops the member at once, as a crash would.
func (e *etcdMember) kill() {
	select {
	case <-e.done:
	default:
		_ = e.cmd.Process.Kill()
		<-e.done
	}
}

// etcdCluster starts three `milo etcd` members on loopback with mutual TLS
// from files, and returns them and the flags a `milo start` needs to use them.
func etcdCluster(t *testing.T, dir string, files pki.Files) ([]*etcdMember, []string) {
	t.Helper()
	var clients, peers []string
	for range 3 {
		c, _, p, err := embeddedetcd.PickURLs()
		if err != nil {
			t.Fatal(err)
		}
		clients, peers = append(clients, c.String()), append(peers, p.String())
	}
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i]))
	}
	members := make([]*etcdMember, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		members[i] = &etcdMember{args: []string{"etcd", "--name", fmt.Sprintf("m%d", i), "--data-dir", filepath.Join(dir, fmt.Sprintf("etcd-%d", i)),
			"--listen-client-url", clients[i], "--listen-peer-url", peers[i], "--initial-cluster", strings.Join(initial, ","),
			"--cert-file", files.EtcdServer.CertFile, "--key-file", files.EtcdServer.KeyFile, "--trusted-ca-file", files.CA.CertFile}}
	}
	// A member of a new cluster serves once a quorum has started.
	for _, m := range members {
		wg.Go(func() { m.start(t) })
	}
	wg.Wait()
	return members, []string{"--etcd-servers", strings.Join(clients, ","), "--etcd-cafile", files.CA.CertFile,
		"--etcd-certfile", files.EtcdClient.CertFile, "--etcd-keyfile", files.EtcdClient.KeyFile}
}

// copyDir copies the files of one directory (a replica's PKI) into another.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(to, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// retriable reports whether a client retries err: a 5xx, a timeout, a
// dropped connection — what a storage member's loss may cause.
func retriable(err error) bool {
	var netErr net.Error
	return apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsTooManyRequests(err) || errors.As(err, &netErr) || strings.Contains(err.Error(), "connection") || strings.Contains(err.Error(), "EOF")
}

// TestReplicasOnAnEtcdCluster runs two `milo start` replicas sharing one
// set of PKI on a three-member etcd cluster: what one writes the other
// reads and watches at the same resourceVersions; a member killed under a
// steady load costs nothing but retried requests, loses nothing, and the
// watchers resume; the replica leading the controllers killed in the middle
// of a project deletion, the other finishes it.
func TestReplicasOnAnEtcdCluster(t *testing.T) {
	dir := t.TempDir()
	files, err := pki.Ensure(filepath.Join(dir, "etcd-pki"), pki.ServingNames{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	members, etcdArgs := etcdCluster(t, dir, files)
	tls, err := transport.TLSInfo{CertFile: files.EtcdClient.CertFile, KeyFile: files.EtcdClient.KeyFile, TrustedCAFile: files.CA.CertFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(etcdArgs[1], ","), TLS: tls, DialTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { etcd.Close() })
	replicaStory(t, dir, etcdArgs, replicaLoad{
		during: func(i, writes int) {
			if i == writes/3 {
				members[0].kill()
			}
		},
		after: func() { members[0].start(t) },
		both: func(t *testing.T, r1, r2 *milo) {
			quotaAcrossReplicas(t, r1, r2)
			objectsAcrossReplicas(t, r1, r2)
			bytesAcrossReplicas(t, r1, r2)
			projectsAcrossReplicas(t, r1, r2, etcd)
		},
	})
}

// quotaAcrossReplicas: a project's namespaces, limited by a grant, are
// created through both replicas at once, each deciding from a quota ledger
// of its own: exactly the limit is stored (the buckets' tallies in etcd,
// which both read and move, keep the count); deleting some frees exactly
// as many.
func quotaAcrossReplicas(t *testing.T, r1, r2 *milo) {
	ctx := context.Background()
	const project = "rep-quota"
	r1.createProject(t, project)
	r1.waitProjectReady(t, project)
	ns := tenancy.OrganizationNamespace("acme")
	admin := r1.dynamic(t)
	if _, err := admin.Resource(grantsGVR).Namespace(ns).Create(ctx, quotaObject("ResourceGrant", ns, "rep-quota-namespaces",
		grantSpec("Project", project, "core/namespaces", 14)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	buckets := admin.Resource(bucketsGVR).Namespace(ns)
	bucketIs(t, buckets, project, "core/namespaces", 14, 2) // its default and kube-system, claimed when the bucket appears
	// Each replica charges once its ledger holds the grant: one namespace
	// charged through each (one its ledger did not charge yet is not
	// counted, and harmless).
	for i, r := range []*milo{r1, r2} {
		n := 0
		eventually(t, fmt.Sprintf("replica %d charges a namespace", i+1), func() error {
			n++
			made, err := r.projectKube(t, project).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("warm-%d-%d", i+1, n)}}, metav1.CreateOptions{})
			if err != nil {
				return err
			}
			_, err = admin.Resource(claimsGVR).Namespace(ns).Get(ctx, quota.ClaimName("namespaces-per-project", string(made.UID)), metav1.GetOptions{})
			return err
		})
	}
	bucketIs(t, buckets, project, "core/namespaces", 14, 4)

	// burst creates n namespaces at once, every other one through each
	// replica, and returns those created; every other answer must be the
	// quota's refusal.
	burst := func(prefix string, n int) []string {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var created []string
		var other []error
		for i := range n {
			wg.Go(func() {
				r := []*milo{r1, r2}[i%2]
				name := fmt.Sprintf("%s-%d", prefix, i)
				var err error
				for attempt := 0; ; attempt++ {
					_, err = r.projectKube(t, project).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
					if attempt > 0 && apierrors.IsAlreadyExists(err) {
						err = nil // an earlier try was stored
					}
					if err == nil || !retriable(err) || attempt == 10 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created = append(created, name)
				case !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `resource type "core/namespaces"`):
					other = append(other, err)
				}
			})
		}
		wg.Wait()
		if len(other) > 0 {
			t.Fatalf("%d namespaces created through two replicas at once: unexpected errors %v", n, other)
		}
		// What is stored, as listed: a try whose answer was lost may have
		// been stored, and its retry refused.
		list, err := r1.projectKube(t, project).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var stored []string
		for _, ns := range list.Items {
			if strings.HasPrefix(ns.Name, prefix+"-") {
				stored = append(stored, ns.Name)
			}
		}
		if len(stored) != len(created) {
			t.Logf("%d namespaces answered created, %d stored", len(created), len(stored))
		}
		return stored
	}
	if created := burst("burst", 50); len(created) != 10 {
		t.Fatalf("50 namespaces created through two replicas at once, 10 free: %d stored", len(created))
	} else {
		bucketIs(t, buckets, project, "core/namespaces", 14, 14)
		// Three deleted (through either replica) free three units.
		for i, name := range created[:3] {
			if err := []*milo{r1, r2}[i%2].projectKube(t, project).CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	bucketIs(t, buckets, project, "core/namespaces", 14, 11)
	// The tallies' mark is the server's: a claim written with it, or a
	// tallied claim written without it, is refused.
	claims := admin.Resource(claimsGVR).Namespace(ns)
	forged := quotaObject("ResourceClaim", ns, "forged-tally", map[string]any{
		"consumerRef": map[string]any{"apiGroup": "resourcemanager.miloapis.com", "kind": "Project", "name": project},
		"requests":    []any{map[string]any{"resourceType": "core/namespaces", "amount": int64(1)}}})
	forged.SetAnnotations(map[string]string{quota.TalliedAnnotation: "true"})
	if _, err := claims.Create(ctx, forged, metav1.CreateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), quota.TalliedAnnotation) {
		t.Fatalf("a claim created with the tallies' mark: %v", err)
	}
	eventually(t, "a tallied claim updated without the mark is refused", func() error {
		list, err := claims.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, c := range list.Items {
			if c.GetAnnotations()[quota.TalliedAnnotation] != "true" {
				continue
			}
			annotations := c.GetAnnotations()
			delete(annotations, quota.TalliedAnnotation)
			c.SetAnnotations(annotations)
			_, err := claims.Update(ctx, &c, metav1.UpdateOptions{})
			if apierrors.IsInvalid(err) && strings.Contains(err.Error(), quota.TalliedAnnotation) {
				return nil
			}
			if apierrors.IsConflict(err) {
				return err // changed since the list: again
			}
			t.Fatalf("a tallied claim updated without the mark: %v", err)
		}
		return errors.New("no claim carries the tallies' mark")
	})
	if created := burst("again", 10); len(created) != 3 {
		t.Fatalf("10 namespaces created through two replicas at once after 3 were deleted: %d stored, want 3", len(created))
	}
	bucketIs(t, buckets, project, "core/namespaces", 14, 14)
}

// projectsAcrossReplicas: an organization's Projects, limited by a grant
// of the built-in projects-per-organization type, are created through both
// replicas at once, each deciding from its own ledger and cache of
// Projects: the count of the organization's Projects both move in etcd
// keeps what is stored at the limit; Projects deleted through either
// replica free exactly as many once purged.
func projectsAcrossReplicas(t *testing.T, r1, r2 *milo, etcd *clientv3.Client) {
	ctx := context.Background()
	const org = "rep-projects"
	replicas := []*milo{r1, r2}
	admin := r1.dynamic(t)
	if _, err := admin.Resource(organizationsGVR).Create(ctx, objectOf("Organization", org, map[string]any{"type": "Standard"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := tenancy.OrganizationNamespace(org)
	eventually(t, "the organization's namespace", func() error {
		_, err := r1.kube(t).CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
	grants := admin.Resource(grantsGVR).Namespace(ns)
	setLimit := func(limit int64) {
		t.Helper()
		// Again on a conflict: the quota controller writes the grant's
		// status.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			grant, err := grants.Get(ctx, "projects", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = grants.Create(ctx, quotaObject("ResourceGrant", ns, "projects", grantSpec("Organization", org, quota.ProjectsPerOrganization, limit)), metav1.CreateOptions{})
			} else if err == nil {
				grant.Object["spec"] = grantSpec("Organization", org, quota.ProjectsPerOrganization, limit)
				_, err = grants.Update(ctx, grant, metav1.UpdateOptions{})
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	refused := func(err error) bool {
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), `resource type "`+quota.ProjectsPerOrganization+`"`)
	}
	create := func(r *milo, name string) error {
		_, err := r.dynamic(t).Resource(projectsGVR).Create(ctx, objectOf("Project", name, map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}}), metav1.CreateOptions{})
		return err
	}
	// Each replica has seen the grant: one Project through each, once it
	// is no longer refused with nothing free.
	setLimit(0)
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d refuses a project with none free", i+1), func() error {
			err := create(r, fmt.Sprintf("%s-none-%d", org, i))
			if refused(err) {
				return nil
			}
			return fmt.Errorf("not refused: %v", err)
		})
	}
	setLimit(10)
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d creates a project", i+1), func() error {
			err := create(r, fmt.Sprintf("%s-warm-%d", org, i))
			if apierrors.IsAlreadyExists(err) {
				return nil
			}
			return err
		})
	}
	// A Project created through an update (a server-side apply) does not
	// move the count; its delete takes from it all the same. The count,
	// left one low, is counted again at the next create: the burst below
	// stays at the limit.
	applied := objectOf("Project", org+"-applied", map[string]any{"ownerRef": map[string]any{"kind": "Organization", "name": org}})
	if _, err := admin.Resource(projectsGVR).Apply(ctx, applied.GetName(), applied, metav1.ApplyOptions{FieldManager: "e2e"}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Resource(projectsGVR).Delete(ctx, applied.GetName(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the applied project purged", func() error {
		_, err := admin.Resource(projectsGVR).Get(ctx, applied.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	stored := func(prefix string) []string {
		t.Helper()
		list, err := admin.Resource(projectsGVR).List(ctx, metav1.ListOptions{LabelSelector: tenancy.OrganizationLabel + "=" + org})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range list.Items {
			if strings.HasPrefix(p.GetName(), prefix) {
				names = append(names, p.GetName())
			}
		}
		return names
	}
	burst := func(prefix string, n int) []string {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var other []error
		for i := range n {
			wg.Go(func() {
				name := fmt.Sprintf("%s-%d", prefix, i)
				var err error
				for attempt := 0; ; attempt++ {
					err = create(replicas[i%2], name)
					if attempt > 0 && apierrors.IsAlreadyExists(err) {
						err = nil // an earlier try was stored
					}
					if err == nil || !retriable(err) || attempt == 10 {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
				if err != nil && !refused(err) {
					mu.Lock()
					other = append(other, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(other) > 0 {
			t.Fatalf("%d projects created through two replicas at once: unexpected errors %v", n, other)
		}
		return stored(prefix + "-")
	}
	if created := burst(org+"-burst", 30); len(created) != 8 {
		t.Fatalf("30 projects created through two replicas at once, 8 free: %d stored", len(created))
	} else {
		for i, name := range created[:3] {
			if err := replicas[i%2].dynamic(t).Resource(projectsGVR).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, "the deleted projects purged", func() error {
			if left := stored(org + "-burst-"); len(left) != 5 {
				return fmt.Errorf("%d left", len(left))
			}
			return nil
		})
	}
	if created := burst(org+"-again", 10); len(created) != 3 {
		t.Fatalf("10 projects created through two replicas at once after 3 were purged: %d stored, want 3", len(created))
	}

	// In etcd: each live Project's lives key (what its creates require),
	// and the organization's count. The organization deleted, its
	// Projects purged: none of them is left.
	keys := func(prefix string) []string {
		t.Helper()
		resp, err := etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, string(kv.Key))
		}
		return out
	}
	list, err := admin.Resource(projectsGVR).List(ctx, metav1.ListOptions{LabelSelector: tenancy.OrganizationLabel + "=" + org})
	if err != nil {
		t.Fatal(err)
	}
	var lives []string
	for _, p := range list.Items {
		lives = append(lives, "/registry/_milo/lives/"+tenancy.StorageIDOf(&p)+"/project")
	}
	for _, key := range lives {
		if len(keys(key)) != 1 {
			t.Fatalf("a live project has no lives key %s", key)
		}
	}
	counts := quota.ProjectsCountsPrefix("/registry", org)
	if len(keys(counts)) == 0 {
		t.Fatalf("no count of the organization's Projects under %s", counts)
	}
	if err := admin.Resource(organizationsGVR).Delete(ctx, org, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the organization gone", func() error {
		_, err := admin.Resource(organizationsGVR).Get(ctx, org, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there: %v", err)
	})
	for _, key := range lives {
		if left := keys(key); len(left) != 0 {
			t.Errorf("a purged project's lives key is left: %v", left)
		}
	}
	if left := keys(counts); len(left) != 0 {
		t.Errorf("the deleted organization's counts are left: %v", left)
	}
}

// objectsRefusal matches the refusal of an object past a project's
// objects-per-project limit: its limit and the objects in use.
var objectsRefusal, bytesRefusal = refusalOf(quota.ObjectsPerProject), refusalOf(quota.BytesPerProject)

// refusalOf matches the refusal of a storage-metered resource type,
// capturing its limit and use.
func refusalOf(resourceType string) *regexp.Regexp {
	return regexp.MustCompile(`resource type "` + regexp.QuoteMeta(resourceType) + `" of .*: limit (\d+) \S+, (\d+) in use`)
}

// refusedObject returns the limit and use an objects-per-project refusal
// names, or false when err is not one.
func refusedObject(err error) (limit, used int64, ok bool) {
	return refusedBy(objectsRefusal, err)
}

// refusedBy returns the limit and use a refusal re matches names, or false
// when err is not one.
func refusedBy(re *regexp.Regexp, err error) (limit, used int64, ok bool) {
	if !apierrors.IsForbidden(err) {
		return 0, 0, false
	}
	m := re.FindStringSubmatch(err.Error())
	if m == nil {
		return 0, 0, false
	}
	limit, _ = strconv.ParseInt(m[1], 10, 64)
	used, _ = strconv.ParseInt(m[2], 10, 64)
	return limit, used, true
}

// objectsAcrossReplicas: a project's objects, limited by a grant of the
// built-in objects-per-project type, are created through both replicas at
// once, each metering the project on its own: the count both move in
// etcd keeps what is stored at the limit; deletes through either replica
// free exactly as many; a count made afresh from storage (a changed grant
// starts a new one) finds exactly the limit stored.
func objectsAcrossReplicas(t *testing.T, r1, r2 *milo) {
	ctx := context.Background()
	const project = "rep-objects"
	ns := tenancy.OrganizationNamespace("acme")
	configMaps, setLimit := meteredAcross(t, r1, project, quota.ObjectsPerProject)
	replicas := []*milo{r1, r2}
	n := 0
	probe := func(r *milo) error {
		n++
		_, err := configMaps(r).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("probe-%d", n)}}, metav1.CreateOptions{})
		return err
	}
	// Limit 0: every create is refused by a replica whose ledger holds the
	// grant; the refusal says how many objects the project stores.
	setLimit(0)
	var inUse int64
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d refuses objects past a limit of 0", i+1), func() error {
			err := probe(r)
			if limit, used, ok := refusedObject(err); ok && limit == 0 {
				inUse = used
				return nil
			}
			return fmt.Errorf("a create under a limit of 0: %v", err)
		})
	}
	// Ten more: each replica stores once it holds the new limit.
	limit := inUse + 10
	setLimit(limit)
	free := int64(10)
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d stores under the new limit", i+1), func() error {
			err := probe(r)
			if err == nil {
				free--
			}
			return err
		})
	}

	// burst creates count ConfigMaps at once, every other one through each
	// replica, and returns those created; every other answer must be the
	// objects quota's refusal.
	burst := func(prefix string, count int) []string {
		var wg sync.WaitGroup
		var mu sync.Mutex
		var created []string
		var other []error
		for i := range count {
			wg.Go(func() {
				name := fmt.Sprintf("%s-%d", prefix, i)
				_, err := configMaps(replicas[i%2]).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					created = append(created, name)
				} else if _, _, ok := refusedObject(err); !ok {
					other = append(other, err)
				}
			})
		}
		wg.Wait()
		if len(other) > 0 {
			t.Fatalf("%d ConfigMaps created through two replicas at once: unexpected errors %v", count, other)
		}
		return created
	}
	created := burst("burst", 50)
	if int64(len(created)) > free {
		t.Fatalf("50 ConfigMaps created through two replicas at once with %d free: %d stored", free, len(created))
	}
	// Three deleted, through either replica, free three.
	for i, name := range created[:3] {
		if err := configMaps(replicas[i%2]).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if again := burst("again", 10); len(again) != 3 {
		t.Fatalf("10 ConfigMaps created through two replicas at once after 3 were deleted: %d stored, want 3", len(again))
	}
	// One more unit in a changed grant: the new count is made from what
	// storage holds, so it finds the limit stored exactly (one unit free,
	// taken by the first create of the new count) — not more, had the
	// replicas stored past the limit, nor fewer.
	setLimit(limit + 1)
	took := 0
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d counts afresh: the new limit, and all of it in use", i+1), func() error {
			err := probe(r)
			if err == nil {
				took++
				return errors.New("stored: the one free unit")
			}
			if l, used, ok := refusedObject(err); ok && l == limit+1 && used == limit+1 {
				return nil
			}
			return fmt.Errorf("a create at the limit: %v", err)
		})
	}
	if took != 1 {
		t.Fatalf("after the limit was raised by one, %d creates were stored, want 1: storage held %d objects, not the limit", took, int(limit)+1-took)
	}
	// The bucket, kept by whichever replica leads, counts what both stored.
	bucketIs(t, r1.dynamic(t).Resource(bucketsGVR).Namespace(ns), project, quota.ObjectsPerProject, limit+1, limit+1)
}

// meteredAcross creates project (through r1, in organization acme) and
// returns its ConfigMaps in namespace default through a replica, and what
// grants it limit units of resourceType (creating the grant, or changing
// it: new counts in storage).
func meteredAcross(t *testing.T, r1 *milo, project, resourceType string) (func(*milo) typedcorev1.ConfigMapInterface, func(limit int64)) {
	ctx := context.Background()
	r1.createProject(t, project)
	r1.waitProjectReady(t, project)
	ns := tenancy.OrganizationNamespace("acme")
	grants := r1.dynamic(t).Resource(grantsGVR).Namespace(ns)
	configMaps := func(r *milo) typedcorev1.ConfigMapInterface {
		return r.projectKube(t, project).CoreV1().ConfigMaps("default")
	}
	setLimit := func(limit int64) {
		t.Helper()
		// Again on a conflict: the quota controller writes the grant's
		// status.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			grant, err := grants.Get(ctx, project, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = grants.Create(ctx, quotaObject("ResourceGrant", ns, project, grantSpec("Project", project, resourceType, limit)), metav1.CreateOptions{})
			} else if err == nil {
				grant.Object["spec"] = grantSpec("Project", project, resourceType, limit)
				_, err = grants.Update(ctx, grant, metav1.UpdateOptions{})
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return configMaps, setLimit
}

// bytesAcrossReplicas: a project's stored bytes, limited by a grant of the
// built-in stored-bytes-per-project type, are written through both
// replicas at once, each metering the project on its own: the bytes tally
// both move in etcd keeps what is stored within the limit, and a count
// made afresh from storage (a changed grant starts one) finds no more
// than the limit stored.
func bytesAcrossReplicas(t *testing.T, r1, r2 *milo) {
	ctx := context.Background()
	configMaps, setLimit := meteredAcross(t, r1, "rep-bytes", quota.BytesPerProject)
	replicas := []*milo{r1, r2}
	sized := func(name string, size int) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": strings.Repeat("x", size)}}
	}
	// inUse waits until replica r refuses a create of about 1 MB under
	// limit, and returns the use the refusal names.
	n := 0
	inUse := func(r *milo, limit int64) int64 {
		t.Helper()
		var used int64
		eventually(t, fmt.Sprintf("a replica refuses a large object under a bytes limit of %d", limit), func() error {
			n++
			_, err := configMaps(r).Create(ctx, sized(fmt.Sprintf("large-%d", n), 1<<20-4096), metav1.CreateOptions{})
			if l, u, ok := refusedBy(bytesRefusal, err); ok && l == limit {
				used = u
				return nil
			}
			return fmt.Errorf("a large create under a bytes limit of %d: %v", limit, err)
		})
		return used
	}
	setLimit(1000)
	stored := max(inUse(r1, 1000), inUse(r2, 1000))
	// 24 KB free; 40 objects of 2 KB written at once through both replicas.
	limit := stored + 24<<10
	setLimit(limit)
	for i, r := range replicas {
		eventually(t, fmt.Sprintf("replica %d stores under the new bytes limit", i+1), func() error {
			n++
			_, err := configMaps(r).Create(ctx, sized(fmt.Sprintf("small-%d", n), 10), metav1.CreateOptions{})
			return err
		})
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created int
	var other []error
	for i := range 40 {
		wg.Go(func() {
			_, err := configMaps(replicas[i%2]).Create(ctx, sized(fmt.Sprintf("burst-%d", i), 2<<10), metav1.CreateOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				created++
			} else if _, _, ok := refusedBy(bytesRefusal, err); !ok {
				other = append(other, err)
			}
		})
	}
	wg.Wait()
	if len(other) > 0 || created == 0 {
		t.Fatalf("40 ConfigMaps of 2 KB through two replicas with 24 KB free: %d stored, unexpected errors %v", created, other)
	}
	// Updates through both replicas grow every stored one by 1 KB: the
	// limit holds those too.
	for i := range 40 {
		r := replicas[(i+1)%2]
		cm, err := configMaps(r).Get(ctx, fmt.Sprintf("burst-%d", i), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] += strings.Repeat("y", 1<<10)
		if _, err := configMaps(r).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			if _, _, ok := refusedBy(bytesRefusal, err); !ok {
				t.Fatalf("growing burst-%d: %v", i, err)
			}
		}
	}
	// What is stored, read back: the data alone of what was written since
	// the limit was set is within the free bytes (each object takes more
	// than its data).
	list, err := configMaps(r1).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var data int
	for _, cm := range list.Items {
		if strings.HasPrefix(cm.Name, "burst-") || strings.HasPrefix(cm.Name, "small-") {
			data += len(cm.Data["v"])
		}
	}
	if data > 24<<10 {
		t.Fatalf("two replicas stored %d bytes of data where 24 KB were free (%d ConfigMaps of the burst)", data, created)
	}
	// A changed grant counts afresh from storage: what is stored is within
	// the limit the replicas were held to.
	setLimit(limit + 1)
	for i, r := range replicas {
		if used := inUse(r, limit+1); used > limit {
			t.Fatalf("replica %d counted %d bytes stored afresh, past the limit of %d both were held to (%d ConfigMaps of the burst stored)", i+1, used, limit, created)
		}
	}
}

// TestReplicasOnSQL runs, on PostgreSQL and on MySQL (MariaDB here), two
// `milo start` replicas sharing one set of PKI on one database, each with
// kine in its process: what one writes the other reads and watches at the
// same resourceVersions, under a steady load; the replica leading the
// controllers killed in the middle of a project deletion, the other
// finishes it, and no key of the project is left in the SQL table (both
// replicas' purgers ran on it).
func TestReplicasOnSQL(t *testing.T) {
	for _, backend := range framework.SQLBackends {
		t.Run(backend, func(t *testing.T) {
			db := sqlDatabaseFor(t, backend, "milo_e2e_replicas")
			id := replicaStory(t, t.TempDir(), []string{"--storage-backend", db.URL}, replicaLoad{})
			eventually(t, "the deleted project purged from the SQL table", func() error {
				if n := liveKeys(t, db, "/"+id+"/"); n != 0 {
					return fmt.Errorf("%d keys of the deleted project left", n)
				}
				return nil
			})
		})
	}
}

// replicaLoad is what happens to the storage while a replica story's steady
// load runs: during is called before each write, after once it is done.
type replicaLoad struct {
	during func(i, writes int)
	after  func()
	// both, if set, is run with both replicas serving, after the load.
	both func(t *testing.T, r1, r2 *milo)
}

// replicaStory starts two replicas in dir on the storage storageArgs name,
// the second with the first's PKI, and checks that they serve one storage:
// written on one, read and watched on the other at the same
// resourceVersions; a steady load (with load's events) read and watched
// whole; the replica leading the controllers killed while a project
// deletion waits on a finalizer, the other finishes it. It returns the
// deleted project's storage id.
func replicaStory(t *testing.T, dir string, storageArgs []string, load replicaLoad) string {
	d1, d2 := filepath.Join(dir, "replica-1"), filepath.Join(dir, "replica-2")
	r1, err := startMilo(d1, storageArgs...)
	if err != nil {
		t.Fatal(err)
	}
	r1.stopOnCleanup(t)
	// One PKI for both: the same CA, serving names and service account key.
	copyDir(t, filepath.Join(d1, "pki"), filepath.Join(d2, "pki"))
	r2, err := startMilo(d2, storageArgs...)
	if err != nil {
		t.Fatal(err)
	}
	r2.stopOnCleanup(t)
	ctx := context.Background()
	// Written on one replica, read and watched on the other.
	if err := r1.ensureOrganization("acme"); err != nil {
		t.Fatal(err)
	}
	r1.createProject(t, "rep-a")
	r2.waitProjectReady(t, "rep-a")
	createNamespace(t, r1.projectKube(t, "rep-a"), "keep")
	made := createConfigMap(t, r1.projectKube(t, "rep-a"), "keep", "x", map[string]string{"v": "1"}, nil)
	var read *corev1.ConfigMap
	eventually(t, "replica 2 reads what replica 1 wrote", func() error {
		read, err = r2.projectKube(t, "rep-a").CoreV1().ConfigMaps("keep").Get(ctx, "x", metav1.GetOptions{})
		return err
	})
	if read.ResourceVersion != made.ResourceVersion || read.Data["v"] != "1" {
		t.Fatalf("replica 2 reads %s %v, replica 1 wrote %s", read.ResourceVersion, read.Data, made.ResourceVersion)
	}
	// A watch on replica 2 that resumes across what follows, from that version.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cms2 := r2.projectKube(t, "rep-a").CoreV1().ConfigMaps("keep")
	w, err := watchtools.NewRetryWatcherWithContext(wctx, made.ResourceVersion, &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.AllowWatchBookmarks = true
		return cms2.Watch(ctx, o)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := map[string]string{}
	var seenMu sync.Mutex
	go func() {
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				seenMu.Lock()
				seen[cm.Name] = cm.ResourceVersion
				seenMu.Unlock()
			}
		}
	}()
	made.Data["v"] = "2"
	updated, err := r1.projectKube(t, "rep-a").CoreV1().ConfigMaps("keep").Update(ctx, made, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "replica 2's watch sees replica 1's update", func() error {
		seenMu.Lock()
		defer seenMu.Unlock()
		if seen["x"] != updated.ResourceVersion {
			return fmt.Errorf("seen %q, want %q", seen["x"], updated.ResourceVersion)
		}
		return nil
	})

	// A steady load from one bounded client (a storage member killed, where
	// load says so): only retried requests, nothing lost, the watch goes on.
	const writes = 60
	cms1 := r1.projectKube(t, "rep-a").CoreV1().ConfigMaps("keep")
	retried := 0
	for i := range writes {
		if load.during != nil {
			load.during(i, writes)
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%02d", i)}}
		for attempt := 0; ; attempt++ {
			_, err := cms1.Create(ctx, cm, metav1.CreateOptions{})
			if err == nil || (attempt > 0 && apierrors.IsAlreadyExists(err)) {
				break
			}
			if !retriable(err) || attempt == 20 {
				t.Fatalf("write %d with a member down: %v", i, err)
			}
			retried++
			time.Sleep(250 * time.Millisecond)
		}
	}
	t.Logf("%d writes: %d retried", writes, retried)
	if load.after != nil {
		load.after()
	}
	eventually(t, "every write read on replica 2 and seen by its watch", func() error {
		list, err := cms2.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		n := 0
		for _, cm := range list.Items {
			if strings.HasPrefix(cm.Name, "load-") {
				n++
			}
		}
		seenMu.Lock()
		watched := 0
		for name := range seen {
			if strings.HasPrefix(name, "load-") {
				watched++
			}
		}
		seenMu.Unlock()
		if n != writes || watched != writes {
			return fmt.Errorf("%d listed, %d watched, of %d", n, watched, writes)
		}
		return nil
	})

	if load.both != nil {
		load.both(t, r1, r2)
	}

	// The replica leading the controllers dies while a project deletion
	// waits on a finalizer; the other takes the lease and finishes it.
	r1.createProject(t, "rep-doomed")
	r1.waitProjectReady(t, "rep-doomed")
	doomed, err := r1.dynamic(t).Resource(projectsGVR).Get(ctx, "rep-doomed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createNamespace(t, r1.projectKube(t, "rep-doomed"), "keep")
	if _, err := r1.projectKube(t, "rep-doomed").CoreV1().ConfigMaps("keep").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r1.dynamic(t).Resource(projectsGVR).Delete(ctx, "rep-doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lease, err := r1.kube(t).CoordinationV1().Leases("milo-system").Get(ctx, "milo-controller-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	identity := func(d string) string {
		id, err := os.ReadFile(filepath.Join(d, "controller-identity"))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(id))
	}
	var leader, other *milo
	switch holder := ptrString(lease.Spec.HolderIdentity); holder {
	case identity(d1):
		leader, other = r1, r2
	case identity(d2):
		leader, other = r2, r1
	default:
		t.Fatalf("the controllers' lease is held by %q, neither replica", holder)
	}
	_ = leader.Cmd.Process.Kill()
	<-leader.Exited
	held, err := other.projectKube(t, "rep-doomed").CoreV1().ConfigMaps("keep").Get(ctx, "held", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held.Finalizers = nil
	if _, err := other.projectKube(t, "rep-doomed").CoreV1().ConfigMaps("keep").Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventuallyWithin(t, 3*time.Minute, "the surviving replica finishes the deletion", func() error {
		if _, err := other.dynamic(t).Resource(projectsGVR).Get(ctx, "rep-doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("project rep-doomed: %v", err)
		}
		return nil
	})
	return tenancy.ProjectID(string(doomed.GetUID()))
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
