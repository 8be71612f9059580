// Package crds embeds the CustomResourceDefinitions generated from Milo's API
// types (`make generate`): the server installs those of the kinds it serves
// as custom resources, and takes the printer columns of the kinds it serves
// from typed storage from theirs.
package crds

import (
	"embed"
	"fmt"
	"io/fs"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// FS holds one YAML file per CustomResourceDefinition.
//
//go:embed *.yaml
var FS embed.FS

// All decodes every definition.
func All() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(FS, "*.yaml")
	if err != nil {
		return nil, err
	}
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, name := range files {
		crd, err := decode(name)
		if err != nil {
			return nil, err
		}
		out = append(out, crd)
	}
	return out, nil
}

// Definition decodes the definition of one resource.
func Definition(group, resource string) (*apiextensionsv1.CustomResourceDefinition, error) {
	return decode(group + "_" + resource + ".yaml")
}

func decode(name string) (*apiextensionsv1.CustomResourceDefinition, error) {
	data, err := FS.ReadFile(name)
	if err != nil {
		return nil, err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", name, err)
	}
	return crd, nil
}
