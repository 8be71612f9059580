// Package users records the people who use Milo: a User object is created the
// first time an identity authenticates, unless it already exists (operators may
// create Users ahead). Authorization never depends on User objects — bindings
// name the authenticated user name — so recording is done off the request
// path, by one worker, and a failure only delays the record.
package users

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	iamv1alpha1 "go.miloapis.com/milo/pkg/apis/iam/v1alpha1"
)

// UsernameAnnotation holds the exact authenticated user name of a User, whose
// object name may have had to be made valid (ObjectName).
const UsernameAnnotation = "iam.miloapis.com/username"

var gvr = iamv1alpha1.SchemeGroupVersion.WithResource("users")

var notNameChars = regexp.MustCompile(`[^a-z0-9.-]+`)

// ObjectName is the object name that stands for a user name: the name itself
// when it is a valid object name, else a valid form of it with a hash of the
// original, so that different users never share one.
func ObjectName(user string) string {
	name := strings.Trim(notNameChars.ReplaceAllString(strings.ToLower(user), "-"), ".-")
	if name == user && len(name) <= 200 && name != "" {
		return name
	}
	sum := sha256.Sum256([]byte(user))
	if name = strings.Trim(name[:min(len(name), 180)], ".-"); name == "" {
		name = "user"
	}
	return name + "-" + hex.EncodeToString(sum[:4])
}

var emailLike = regexp.MustCompile(`^[^@\s]+@[^@\s]+$`)

// recorded tells whether an identity is a person to record: not the system's
// own identities and not service accounts.
func recorded(name string) bool {
	return name != "" && !strings.HasPrefix(name, "system:")
}

// Recorder creates User objects for identities it has not seen.
type Recorder struct {
	queue workqueue.TypedRateLimitingInterface[string]
	// informer is set once the server's informers exist; requests come before.
	informer atomic.Pointer[cache.SharedIndexInformer]
	// known holds the user names that have a User, so that a request of a
	// known identity costs one map lookup (one entry per identity seen).
	known sync.Map
}

// NewRecorder returns a recorder whose queue collects identities until Run.
func NewRecorder() *Recorder {
	return &Recorder{queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "users"})}
}

// Authenticator notes every identity inner authenticates.
func (r *Recorder) Authenticator(inner authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
		resp, ok, err := inner.AuthenticateRequest(req)
		if ok && err == nil && resp != nil && resp.User != nil {
			r.observe(resp.User.GetName())
		}
		return resp, ok, err
	})
}

func (r *Recorder) observe(user string) {
	if _, ok := r.known.Load(user); ok || !recorded(user) {
		return
	}
	if inf := r.informer.Load(); inf != nil {
		if _, exists, _ := (*inf).GetStore().GetByKey(ObjectName(user)); exists {
			r.known.Store(user, struct{}{})
			return
		}
	}
	// The queue holds each name once however often it is added.
	r.queue.Add(user)
}

// Informer registers the Users informer with factory; call it before the
// factory starts.
func (r *Recorder) Informer(factory dynamicinformer.DynamicSharedInformerFactory) cache.InformerSynced {
	inf := factory.ForResource(gvr).Informer()
	r.informer.Store(&inf)
	return inf.HasSynced
}

// Run creates Users until ctx ends.
func (r *Recorder) Run(ctx context.Context, client dynamic.Interface) {
	defer r.queue.ShutDown()
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for r.next(ctx, client) {
		}
	}, time.Second)
	<-ctx.Done()
}

func (r *Recorder) next(ctx context.Context, client dynamic.Interface) bool {
	user, quit := r.queue.Get()
	if quit {
		return false
	}
	defer r.queue.Done(user)
	if err := create(ctx, client, user); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Recording user", "user", user)
		r.queue.AddRateLimited(user)
		return true
	}
	r.queue.Forget(user)
	r.known.Store(user, struct{}{})
	return true
}

func create(ctx context.Context, client dynamic.Interface, user string) error {
	spec := map[string]any{}
	if emailLike.MatchString(user) && len(user) <= 254 {
		spec["email"] = user
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(), "kind": "User",
		"metadata": map[string]any{"name": ObjectName(user), "annotations": map[string]any{UsernameAnnotation: user}},
		"spec":     spec,
	}}
	_, err := client.Resource(gvr).Create(ctx, obj, metav1.CreateOptions{FieldManager: "milo-users"})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}
