// Package controller is the sample service's reconciler: for each Widget, in
// whichever project it is, a ConfigMap next to it holding its message and
// size, owned by it, and the Widget's Ready condition.
package controller

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	mcbuilder "sigs.k8s.io/multicluster-runtime/pkg/builder"
	mcmanager "sigs.k8s.io/multicluster-runtime/pkg/manager"
	mcreconcile "sigs.k8s.io/multicluster-runtime/pkg/reconcile"

	widgetsv1alpha1 "go.miloapis.com/milo/examples/widgets/api/v1alpha1"
	"go.miloapis.com/milo/pkg/mcprovider"
)

// Name is the controller's name, also its field manager and event source.
const Name = "widgets"

// Scheme returns the kinds the service uses: client-go's and Widgets.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := widgetsv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// ConfigMapName names the ConfigMap kept for a Widget.
func ConfigMapName(widget string) string { return widget + "-widget" }

// Reconciler reconciles Widgets in every project.
type Reconciler struct {
	// Manager is set by SetupWithManager.
	Manager mcmanager.Manager
	// Options of the controller (concurrency, name validation, ...).
	Options controller.TypedOptions[mcreconcile.Request]
	// Sources, if set, is Milo's provider, whose Sources the controller
	// watches through: registered once for every project, rather than once
	// per engaged project as the builder's For and Owns are (use it with
	// the provider's DoNotEngage).
	Sources *mcprovider.Provider
}

// SetupWithManager registers the reconciler: it watches Widgets and the
// ConfigMaps they own, in every project.
func (r *Reconciler) SetupWithManager(mgr mcmanager.Manager) error {
	r.Manager = mgr
	b := mcbuilder.ControllerManagedBy(mgr).Named(Name).WithOptions(r.Options)
	if r.Sources != nil {
		return b.WatchesRawSource(r.Sources.Source(&widgetsv1alpha1.Widget{}, mcprovider.EnqueueObject)).
			WatchesRawSource(r.Sources.Source(&corev1.ConfigMap{}, mcprovider.EnqueueControllerOf(widgetsv1alpha1.SchemeGroupVersion.WithKind("Widget").GroupKind()))).
			Complete(r)
	}
	return b.For(&widgetsv1alpha1.Widget{}).Owns(&corev1.ConfigMap{}).Complete(r)
}

// Reconcile brings one Widget's ConfigMap and status up to date, in the
// Widget's own project.
func (r *Reconciler) Reconcile(ctx context.Context, req mcreconcile.Request) (reconcile.Result, error) {
	cl, err := r.Manager.GetCluster(ctx, req.ClusterName)
	if err != nil {
		return reconcile.Result{}, err
	}
	c := cl.GetClient()
	widget := &widgetsv1alpha1.Widget{}
	if err := c.Get(ctx, req.NamespacedName, widget); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if widget.DeletionTimestamp != nil {
		return reconcile.Result{}, nil // its ConfigMap goes with it (owner reference)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ConfigMapName(widget.Name), Namespace: widget.Namespace}}
	if _, err := controllerutil.CreateOrUpdate(ctx, c, cm, func() error {
		cm.Data = map[string]string{"message": widget.Spec.Message, "size": strconv.Itoa(int(widget.Spec.Size))}
		return controllerutil.SetControllerReference(widget, cm, cl.GetScheme())
	}); err != nil {
		// The cache was behind: another writer created the ConfigMap, changed
		// it, or (NotFound on the update) deleted it, as the garbage collector
		// does when a Widget of the same name was deleted just before.
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return reconcile.Result{Requeue: true}, nil
		}
		return reconcile.Result{}, fmt.Errorf("keeping the ConfigMap of widget %s: %w", req.NamespacedName, err)
	}
	ready := metav1.Condition{Type: widgetsv1alpha1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: "ConfigMapUpToDate", Message: "ConfigMap " + cm.Name + " holds the widget's spec",
		ObservedGeneration: widget.Generation}
	if widget.Status.ObservedGeneration == widget.Generation && widget.Status.ConfigMapName == cm.Name &&
		meta.IsStatusConditionTrue(widget.Status.Conditions, widgetsv1alpha1.ConditionReady) {
		return reconcile.Result{}, nil
	}
	widget.Status.ObservedGeneration = widget.Generation
	widget.Status.ConfigMapName = cm.Name
	meta.SetStatusCondition(&widget.Status.Conditions, ready)
	if err := c.Status().Update(ctx, widget); err != nil {
		if apierrors.IsConflict(err) {
			return reconcile.Result{Requeue: true}, nil
		}
		// Deleted since it was read: nothing is left to report on.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Result{}, nil
}
