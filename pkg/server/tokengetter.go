package server

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/kubernetes/pkg/serviceaccount"
)

// tokenGetter lets the service account authenticator check that a token's
// service account and secret still exist. Milo serves no pods or nodes, so tokens
// bound to those never validate.
type tokenGetter struct {
	serviceAccounts corelisters.ServiceAccountLister
	secrets         corelisters.SecretLister
}

func newTokenGetter(factory informers.SharedInformerFactory) serviceaccount.ServiceAccountTokenGetter {
	return tokenGetter{
		serviceAccounts: factory.Core().V1().ServiceAccounts().Lister(),
		secrets:         factory.Core().V1().Secrets().Lister(),
	}
}

func (g tokenGetter) GetServiceAccount(_ context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return g.serviceAccounts.ServiceAccounts(namespace).Get(name)
}

func (g tokenGetter) GetSecret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return g.secrets.Secrets(namespace).Get(name)
}

func (g tokenGetter) GetPod(_ context.Context, _, name string) (*corev1.Pod, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
}

func (g tokenGetter) GetNode(_ context.Context, name string) (*corev1.Node, error) {
	return nil, apierrors.NewNotFound(corev1.Resource("nodes"), name)
}
