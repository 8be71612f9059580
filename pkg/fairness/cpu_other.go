//go:build !unix

package fairness

import "time"

// processCPU is not known here: handler time is charged as it is.
func processCPU() (time.Duration, bool) { return 0, false }
