package manager

import (
	"context"
	"slices"
	"testing"
)

func TestSelect(t *testing.T) {
	r := Registry{
		"hierarchy": func(Shared) (Runner, error) { return RunFunc(func(context.Context) {}), nil },
		"namespace": func(Shared) (Runner, error) { return RunFunc(func(context.Context) {}), nil },
		"gc":        func(Shared) (Runner, error) { return RunFunc(func(context.Context) {}), nil },
	}
	for _, c := range []struct {
		in   []string
		want []string
		err  bool
	}{
		{[]string{"*"}, []string{"gc", "hierarchy", "namespace"}, false},
		{[]string{"*", "-gc"}, []string{"hierarchy", "namespace"}, false},
		{[]string{"namespace", "hierarchy", "namespace"}, []string{"hierarchy", "namespace"}, false},
		{nil, nil, false},
		{[]string{"nope"}, nil, true},
		{[]string{"*", "-nope"}, nil, true},
	} {
		got, err := r.Select(c.in)
		if (err != nil) != c.err || (err == nil && !slices.Equal(got, c.want) && len(got)+len(c.want) > 0) {
			t.Errorf("Select(%v) = %v, %v; want %v (error %v)", c.in, got, err, c.want, c.err)
		}
	}
}
