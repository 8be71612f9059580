package server

import (
	"io"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/admission/initializer"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	apiserverapiv1 "k8s.io/apiserver/pkg/apis/apiserver/v1"
	apiserverapiv1alpha1 "k8s.io/apiserver/pkg/apis/apiserver/v1alpha1"
	"k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	basecompatibility "k8s.io/component-base/compatibility"
	controlplaneapiserver "k8s.io/kubernetes/pkg/controlplane/apiserver"

	"go.miloapis.com/milo/pkg/tenantadmission"
)

// admissionConfigScheme reads the admission configuration file, as the
// apiserver's admission options do.
var admissionConfigScheme = runtime.NewScheme()

func init() {
	utilruntime.Must(apiserverapi.AddToScheme(admissionConfigScheme))
	utilruntime.Must(apiserverapiv1alpha1.AddToScheme(admissionConfigScheme))
	utilruntime.Must(apiserverapiv1.AddToScheme(admissionConfigScheme))
}

// configureSelectors gives tenant-aware admission what it needs to build the
// project instances of the webhook and policy plugins the way the apiserver built
// its own (see tenantadmission.Selectors): the loopback clients, the shared
// informers, the same initializers and each plugin's configuration.
func configureSelectors(s *tenantadmission.Selectors, opts CompletedOptions, cp *controlplaneapiserver.Config, initializers []admission.PluginInitializer) error {
	loopback := cp.Generic.LoopbackClientConfig
	kube, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(loopback)
	if err != nil {
		return err
	}
	// Reset every 30 s, as the apiserver resets its own admission mapper, so
	// that kinds added later (a CRD as a policy's paramKind) are found.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	generic := cp.Generic
	stop := generic.DrainedNotify()
	go wait.Until(mapper.Reset, 30*time.Second, stop)
	// What the server's own plugins were given: the authorizer before Milo
	// wraps it, the effective version.
	authorizer := generic.Authorization.Authorizer
	effective := compatibility.DefaultComponentGlobalsRegistry.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)
	build := func(k kubernetes.Interface, f informers.SharedInformerFactory, instanceStop <-chan struct{}) admission.PluginInitializer {
		chain := admission.PluginInitializers{
			initializer.NewAPIServerIDInitializer(generic.APIServerID),
			initializer.New(k, dyn, f, authorizer, utilfeature.DefaultFeatureGate, effective, instanceStop, mapper),
		}
		return append(chain, initializers...)
	}
	provider, err := admission.ReadAdmissionConfiguration(tenantadmission.SelectorPlugins(), opts.ControlPlane.Admission.GenericAdmission.ConfigFile, admissionConfigScheme)
	if err != nil {
		return err
	}
	// Read once, at start, as the server's own plugins read it.
	configs := map[string][]byte{}
	for _, plugin := range tenantadmission.SelectorPlugins() {
		r, err := provider.ConfigFor(plugin)
		if err != nil {
			return err
		}
		if r != nil {
			if configs[plugin], err = io.ReadAll(r); err != nil {
				return err
			}
		}
	}
	config := func(plugin string) ([]byte, error) { return configs[plugin], nil }
	s.Set(kube, cp.VersionedInformers, build, config, stop)
	return nil
}
