package attack

import "k8s.io/client-go/kubernetes/scheme"

var negotiated = scheme.Codecs.WithoutConversion()
