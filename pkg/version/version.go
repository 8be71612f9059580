// Package version reports the version of the milo binary and of the Kubernetes
// libraries it is built on.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
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
