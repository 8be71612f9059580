package hierarchy

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/klog/v2"
)

// Lease names where controller instances elect their leader.
const (
	LeaseNamespace = "milo-system"
	LeaseName      = "milo-controller-manager"
)

// DefaultLeaderElection is the election every Milo controller instance joins
// unless told otherwise: one lease, so that the controllers inside `milo start`
// and any `milo controller-manager` never act at the same time.
func DefaultLeaderElection() componentbaseconfig.LeaderElectionConfiguration {
	return componentbaseconfig.LeaderElectionConfiguration{
		LeaderElect:       true,
		LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
		RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
		RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
		ResourceLock:      resourcelock.LeasesResourceLock,
		ResourceNamespace: LeaseNamespace,
		ResourceName:      LeaseName,
	}
}

// RunElected runs run whenever this instance leads, until ctx ends. Each term
// gets a context that ends when leadership is lost; a later term's run starts
// only after the previous one returned. An instance stops renewing RenewDeadline
// after its last renewal while others wait LeaseDuration, which leaves run the
// difference to stop. Leadership is released on shutdown, so another instance
// takes over at once.
//
// identity names this instance in the lease; empty means a new one
// (hostname_uuid). An instance that restarts with the identity it had leads
// again at once, without waiting for its old lease to expire: the in-process
// controllers of `milo start` keep theirs in the data directory, because their
// server stops serving before they could release the lease.
func RunElected(ctx context.Context, config *rest.Config, le componentbaseconfig.LeaderElectionConfiguration, identity string, run func(context.Context)) error {
	if !le.LeaderElect {
		run(ctx)
		return nil
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	id := identity
	if id == "" {
		id = NewIdentity()
	}
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName,
		client.CoreV1(), client.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("lease", le.ResourceNamespace+"/"+le.ResourceName, "identity", id)
	var running sync.Mutex
	for ctx.Err() == nil {
		if err := ensureNamespace(ctx, client, le.ResourceNamespace); err != nil {
			logger.Error(err, "Preparing the lease namespace")
		}
		elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   le.LeaseDuration.Duration,
			RenewDeadline:   le.RenewDeadline.Duration,
			RetryPeriod:     le.RetryPeriod.Duration,
			ReleaseOnCancel: true,
			Name:            le.ResourceName,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					running.Lock()
					defer running.Unlock()
					logger.Info("Leading: controllers start")
					run(ctx)
					logger.Info("Controllers stopped")
				},
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return fmt.Errorf("leader election: %w", err)
		}
		// Run returns when leadership is lost or ctx ends.
		elector.Run(ctx)
	}
	running.Lock()   // the last term has stopped
	running.Unlock() //nolint:staticcheck
	return nil
}

// NewIdentity is a new, unique lease identity: hostname_uuid.
func NewIdentity() string {
	host, _ := os.Hostname()
	return host + "_" + string(uuid.NewUUID())
}

func ensureNamespace(ctx context.Context, client kubernetes.Interface, name string) error {
	_, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
