// Package registry is how a family of implementations makes itself known,
// the way database/sql drivers and image formats do: each registers by
// name in its own file's init, and the rest of Guardian lists the family
// from its registry, never by hand. Settings, providers and backfills each
// keep one.
package registry

import (
	"fmt"
	"maps"
	"slices"
	"sync"
)

// Of is a registry of T by name. The zero value is empty and ready; it is
// safe for concurrent use.
type Of[T any] struct {
	mu sync.Mutex
	m  map[string]T
}

// Register adds v as name. It panics when name is empty or taken: both are
// programming errors, found when the binary starts.
func (r *Of[T]) Register(name string, v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.m[name]; dup || name == "" {
		panic(fmt.Sprintf("registry: %q registered twice, or unnamed", name))
	}
	if r.m == nil {
		r.m = map[string]T{}
	}
	r.m[name] = v
}

// Lookup returns what is registered as name.
func (r *Of[T]) Lookup(name string) (T, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.m[name]
	return v, ok
}

// All returns everything registered, by name.
func (r *Of[T]) All() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]T, 0, len(r.m))
	for _, name := range slices.Sorted(maps.Keys(r.m)) {
		out = append(out, r.m[name])
	}
	return out
}
