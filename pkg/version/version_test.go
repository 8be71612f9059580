package version

import (
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"
	apimachineryversion "k8s.io/apimachinery/pkg/version"
)

func TestServerInfoIsASemanticKubernetesVersion(t *testing.T) {
	base := apimachineryversion.Info{Major: "1", Minor: "36", GitVersion: "v0.0.0-master+$Format:%H$", GitCommit: "$Format:%H$"}
	for _, milo := range []string{"v0.0.0-dev", "v1.2.3", "v1.2.3-rc.1+abc", "aae90c9-dirty", "weird/ver sion..x", ""} {
		Version = milo
		info := ServerInfo(base)
		v, err := utilversion.ParseSemantic(info.GitVersion)
		if err != nil {
			t.Errorf("Milo %q: gitVersion %q does not parse: %v", milo, info.GitVersion, err)
			continue
		}
		if v.Major() != 1 || v.Minor() != 36 || !strings.HasPrefix(v.BuildMetadata(), "milo-") || v.PreRelease() != "" {
			t.Errorf("Milo %q: gitVersion %q", milo, info.GitVersion)
		}
		if strings.Contains(info.GitCommit, "$Format") || info.Major != "1" || info.Minor != "36" {
			t.Errorf("Milo %q: %+v", milo, info)
		}
	}
	Version = "v0.0.0-dev"
}
