package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	// Work queues publish depth, latency and retries.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
	"k8s.io/klog/v2"
)

// serveHealth serves /healthz, /readyz and /metrics of the controller manager
// on address until ctx ends, and /debug/pprof if profiling. The process is
// healthy and ready while it runs: a standby instance is ready to lead.
func serveHealth(ctx context.Context, address string, profiling bool) error {
	listener, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) } //nolint:errcheck
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", ok)
	mux.Handle("/metrics", legacyregistry.Handler())
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Health endpoints stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		srv.Close() //nolint:errcheck
	}()
	klog.InfoS("Serving health and metrics", "address", listener.Addr().String())
	return nil
}
