// Package version reports the version of the milo binary and of the Kubernetes
// libraries it is built on.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

// Version is the Milo version, set at build time with
// -ldflags "-X go.miloapis.com/milo/pkg/version.Version=v0.1.0".
var Version = "v0.0.0-dev"

// Info describes a build.
type Info struct {
	Milo       string `json:"milo"`
	Kubernetes string `json:"kubernetes"`
	Etcd       string `json:"etcd"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	Revision   string `json:"revision,omitempty"`
}

// Get returns the version information of this binary.
func Get() Info {
	info := Info{Milo: Version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			switch dep.Path {
			case "k8s.io/kubernetes":
				info.Kubernetes = dep.Version
			case "go.etcd.io/etcd/server/v3":
				info.Etcd = dep.Version
			}
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Revision = s.Value
			}
		}
	}
	return info
}

// String renders the information on one line.
func (i Info) String() string {
	s := fmt.Sprintf("milo %s (kubernetes %s, etcd %s, %s, %s)", i.Milo, i.Kubernetes, i.Etcd, i.Go, i.Platform)
	if i.Revision != "" {
		s += " revision " + i.Revision
	}
	return s
}

// ServerInfo returns the document a Milo server answers at /version, from the
// one the apiserver would answer (base). gitVersion is the Kubernetes version
// whose API Milo serves, with Milo's version as semantic-version build metadata
// ("v1.36.3+milo-v0.1.0"), so that kubectl and tools comparing server versions
// parse it; gitCommit, gitTreeState and buildDate are Milo's own build's.
func ServerInfo(base apimachineryversion.Info) apimachineryversion.Info {
	info := base
	kube := ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "k8s.io/kubernetes" {
				kube = dep.Version
				if dep.Replace != nil && dep.Replace.Version != "" {
					kube = dep.Replace.Version
				}
			}
		}
		info.GitCommit, info.GitTreeState, info.BuildDate = "", "", ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.GitCommit = s.Value
			case "vcs.modified":
				info.GitTreeState = map[string]string{"true": "dirty", "false": "clean"}[s.Value]
			case "vcs.time":
				info.BuildDate = s.Value
			}
		}
	}
	if v, err := utilversion.ParseSemantic(kube); err != nil || kube == "" {
		kube = "v" + base.Major + "." + strings.TrimSuffix(base.Minor, "+") + ".0"
	} else {
		kube = "v" + v.WithPreRelease("").WithBuildMetadata("").String()
	}
	info.GitVersion = kube + "+milo-" + buildMetadata(Version)
	return info
}

// buildMetadata makes s a valid semantic-version build metadata: dot-separated
// non-empty identifiers of ASCII letters, digits and hyphens (anything else
// becomes a hyphen).
func buildMetadata(s string) string {
	parts := strings.Split(s, ".")
	for i, p := range parts {
		b := []byte(p)
		for j, c := range b {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-') {
				b[j] = '-'
			}
		}
		if len(b) == 0 {
			b = []byte("-")
		}
		parts[i] = string(b)
	}
	return strings.Join(parts, ".")
}
