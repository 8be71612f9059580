// Package growstack gives a request's goroutines the stack they will need at
// once, instead of by doublings.
//
// A goroutine starts with a small stack (the runtime's average of the stacks
// it last scanned, which a server's many idle goroutines keep small) and
// doubles it whenever a call needs more. Each doubling copies the whole stack
// and walks every frame on it to adjust pointers. An API request descends
// through some forty handlers, authorization, admission, storage and
// encoding, and its goroutines doubled their stacks several times deep in
// that chain: 6–9 % of the server's CPU in CPU profiles. A call with a large
// frame where the stack holds only a few frames grows it once, to the size
// that fits, and that copy is cheap.
//
// A request runs on two goroutines: the connection's (HTTP/2 starts one per
// request), and, for a request that is not long-running, the one the
// apiserver's timeout filter starts for everything inside it, authentication
// first. Handler grows the first, Authenticator the second.
package growstack

import (
	"net/http"

	"k8s.io/apiserver/pkg/authentication/authenticator"
)

// Size is the stack a request's goroutine is given. The runtime rounds a
// growth up to the power of two that fits, so a frame of this size gives
// 32 KiB, about what an API request's goroutine reached in the profiles.
const Size = 24 << 10

// Grow makes sure the calling goroutine's stack has at least Size bytes.
func Grow() { _ = frame(0) }

// frame has a Size-byte frame; the index it is given keeps the compiler
// from dropping it.
//
//go:noinline
func frame(i int) byte {
	var f [Size]byte
	f[i%Size] = 1
	return f[(i+1)%Size]
}

// Handler grows the stack of the goroutine that serves each request.
func Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		Grow()
		next.ServeHTTP(w, r)
	})
}

// Authenticator grows the stack of the goroutine each request is
// authenticated on, the first thing the timeout filter's goroutine does.
func Authenticator(next authenticator.Request) authenticator.Request {
	return authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
		Grow()
		return next.AuthenticateRequest(r)
	})
}
