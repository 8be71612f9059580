// Package projectbootstrap says what a new project's control plane starts
// with — its namespaces, each with the `default` ServiceAccount and the
// `kube-root-ca.crt` ConfigMap a namespace of Kubernetes has — and builds
// those objects, so that the server can store them in the transaction that
// creates the Project, and the controllers make the same ones where it
// could not.
package projectbootstrap

import (
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/kubernetes/pkg/apis/core"
)

// Namespaces are the namespaces every project starts with: those Kubernetes
// tools assume of any cluster. kube-public (the cluster-info ConfigMap of
// kubeadm's bootstrap) and kube-node-lease (node heartbeats) are left out:
// no project has nodes to join or to beat, and each namespace costs every
// project its object, ServiceAccount and root CA ConfigMap.
var Namespaces = []string{metav1.NamespaceDefault, metav1.NamespaceSystem}

// ReadyMessage is the message of a bootstrapped project's Ready condition.
// It names what the bootstrap made, so that a project bootstrapped with
// less (by an earlier Milo) is bootstrapped again once, and a Ready project
// costs nothing on a restart.
var ReadyMessage = "the project's control plane is initialized with namespaces " + strings.Join(Namespaces, ", ")

// ReadyReason is the reason of a bootstrapped project's Ready condition.
const ReadyReason = "ControlPlaneReady"

// Names of what every namespace gets.
const (
	DefaultServiceAccount = "default"
	RootCAConfigMap       = "kube-root-ca.crt"
	// RootCAKey is the root CA ConfigMap's one key.
	RootCAKey = "ca.crt"
)

// rootCADescription is what upstream's root CA publisher says of the ConfigMap.
const rootCADescription = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
	"No other usage is guaranteed across distributions of Kubernetes clusters."

// ServiceAccount is a namespace's default ServiceAccount, as a client creates it.
func ServiceAccount(namespace string) *corev1.ServiceAccount {
	return &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DefaultServiceAccount, Namespace: namespace}}
}

// RootCA is a namespace's root CA ConfigMap holding the PEM bundle ca, as a
// client creates it.
func RootCA(namespace, ca string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: RootCAConfigMap, Namespace: namespace,
			Annotations: map[string]string{descriptionKey: rootCADescription}},
		Data: map[string]string{RootCAKey: ca},
	}
}

// Object is one object of the bootstrap and its resource.
type Object struct {
	Resource schema.GroupResource
	Object   runtime.Object
}

// Objects are the objects of a new project's bootstrap as the API would
// store them if each were created through it: the namespaces with what the
// namespace registry sets (phase Active, the kubernetes finalizer, the
// metadata.name label), the ServiceAccounts and the root CA ConfigMaps
// holding ca; each with a new uid and the creation time now.
func Objects(ca string) []Object {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	system := func(m *metav1.ObjectMeta) {
		m.UID, m.CreationTimestamp = uuid.NewUUID(), now
	}
	out := make([]Object, 0, 3*len(Namespaces))
	for _, name := range Namespaces {
		ns := &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelMetadataName: name}},
			Spec:       corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status:     corev1.NamespaceStatus{Phase: corev1.NamespaceActive},
		}
		sa, cm := ServiceAccount(name), RootCA(name, ca)
		system(&ns.ObjectMeta)
		system(&sa.ObjectMeta)
		system(&cm.ObjectMeta)
		out = append(out, Object{namespaces, ns}, Object{serviceAccounts, sa}, Object{configMaps, cm})
	}
	return out
}

// The resources of the bootstrap's objects.
var (
	namespaces      = corev1.Resource("namespaces")
	serviceAccounts = corev1.Resource("serviceaccounts")
	configMaps      = corev1.Resource("configmaps")
)

// Resources are the resources of the bootstrap's objects.
func Resources() []schema.GroupResource {
	return []schema.GroupResource{namespaces, serviceAccounts, configMaps}
}

// descriptionKey is the annotation upstream's root CA publisher describes
// the ConfigMap in.
const descriptionKey = "kubernetes.io/description"

// ShareRootCA returns a tenantstorage.Options.Share that makes every root CA
// ConfigMap decoded from storage hold the same copy of the bundle (the one
// last decoded, so a new CA is shared from its first ConfigMap on) and of
// upstream's description: two of each per project, over a kilobyte a project
// in the watch cache otherwise.
func ShareRootCA() func(schema.GroupResource, runtime.Object) {
	var bundle atomic.Pointer[string]
	share := func(data, annotations map[string]string) {
		if v, ok := data[RootCAKey]; ok {
			if b := bundle.Load(); b != nil && *b == v {
				data[RootCAKey] = *b
			} else {
				bundle.Store(&v)
			}
		}
		if annotations[descriptionKey] == rootCADescription {
			annotations[descriptionKey] = rootCADescription
		}
	}
	return func(_ schema.GroupResource, obj runtime.Object) {
		switch cm := obj.(type) {
		case *core.ConfigMap: // what storage decodes into
			if cm.Name == RootCAConfigMap {
				share(cm.Data, cm.Annotations)
			}
		case *corev1.ConfigMap:
			if cm.Name == RootCAConfigMap {
				share(cm.Data, cm.Annotations)
			}
		}
	}
}
