package server

import (
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	mutatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/mutating"
	validatingpolicy "k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/admission/plugin/resourcequota"
	mutatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/mutating"
	validatingwebhook "k8s.io/apiserver/pkg/admission/plugin/webhook/validating"
	kubeoptions "k8s.io/kubernetes/pkg/kubeapiserver/options"
	certapproval "k8s.io/kubernetes/plugin/pkg/admission/certificates/approval"
	"k8s.io/kubernetes/plugin/pkg/admission/certificates/ctbattest"
	certsigning "k8s.io/kubernetes/plugin/pkg/admission/certificates/signing"
	certsubjectrestriction "k8s.io/kubernetes/plugin/pkg/admission/certificates/subjectrestriction"
	"k8s.io/kubernetes/plugin/pkg/admission/limitranger"
	"k8s.io/kubernetes/plugin/pkg/admission/serviceaccount"
)

// defaultOnAdmissionPlugins are the admission plugins Milo runs unless told otherwise
// (--enable-admission-plugins, --disable-admission-plugins). Plugins about pods,
// nodes and other workload kinds are off: a Milo control plane serves none of them.
var defaultOnAdmissionPlugins = []string{
	lifecycle.PluginName,              // NamespaceLifecycle
	limitranger.PluginName,            // LimitRanger
	serviceaccount.PluginName,         // ServiceAccount
	mutatingwebhook.PluginName,        // MutatingAdmissionWebhook
	validatingwebhook.PluginName,      // ValidatingAdmissionWebhook
	mutatingpolicy.PluginName,         // MutatingAdmissionPolicy
	validatingpolicy.PluginName,       // ValidatingAdmissionPolicy
	resourcequota.PluginName,          // ResourceQuota
	certapproval.PluginName,           // CertificateApproval
	certsigning.PluginName,            // CertificateSigning
	ctbattest.PluginName,              // ClusterTrustBundleAttest
	certsubjectrestriction.PluginName, // CertificateSubjectRestriction
}

func defaultOffAdmissionPlugins() sets.Set[string] {
	return sets.New(kubeoptions.AllOrderedPlugins...).Delete(defaultOnAdmissionPlugins...)
}
