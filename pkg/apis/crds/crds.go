// Package crds embeds the CustomResourceDefinitions generated from Milo's API
// types (`make generate`), so the server can install them at start-up.
package crds

import "embed"

// FS holds one YAML file per CustomResourceDefinition.
//
//go:embed *.yaml
var FS embed.FS
