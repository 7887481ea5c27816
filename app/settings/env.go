package settings

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Env is the environment settings are read from, and what reading it
// found: every error, so that all are named at once, and every warning.
// It is the one place Guardian reads its environment. Not safe for
// concurrent use: one reader builds one configuration.
type Env struct {
	getenv   func(string) string
	errs     []error
	warnings []string
}

// NewEnv reads from getenv (os.Getenv in main).
func NewEnv(getenv func(string) string) *Env { return &Env{getenv: getenv} }

// FromMap reads from vars, for tests and tools.
func FromMap(vars map[string]string) *Env {
	return NewEnv(func(k string) string { return vars[k] })
}

// raw is the variable's value; only registered names may be read, so
// nothing is read that the registry does not document.
func (e *Env) raw(name string) string {
	if _, ok := Lookup(name); !ok {
		panic("settings: " + name + " is read but not registered")
	}
	return e.getenv(name)
}

// Fail records a problem with the settings: Err returns it.
func (e *Env) Fail(err error) { e.errs = append(e.errs, err) }

// Warn records something the operator should read at start.
func (e *Env) Warn(msg string) { e.warnings = append(e.warnings, msg) }

// Err returns every recorded problem, and one for each gone variable set;
// nil when there are none.
func (e *Env) Err() error {
	errs := slices.Clone(e.errs)
	for _, s := range All() {
		if s.Gone != "" && e.getenv(s.Name) != "" {
			errs = append(errs, fmt.Errorf("%s is gone: %s", s.Name, s.Gone))
		}
	}
	return errors.Join(errs...)
}

// Warnings returns the recorded warnings, in the order they were made.
func (e *Env) Warnings() []string { return slices.Clone(e.warnings) }

// Unknown returns a warning for each GUARDIAN_* name in environ
// ("NAME=value" entries) that is not registered, naming the variable it
// probably meant: a misspelt name would otherwise be ignored silently.
func Unknown(environ []string) []string {
	all := All()
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if _, ok := Lookup(name); ok || !strings.HasPrefix(name, "GUARDIAN_") {
			continue
		}
		warning := name + " is not a variable Guardian reads: it is ignored"
		best, dist := "", 4
		for _, s := range all {
			if d := editDistance(name, s.Name); d < dist {
				best, dist = s.Name, d
			}
		}
		if best != "" {
			warning += " (did you mean " + best + "?)"
		}
		out = append(out, warning)
	}
	slices.Sort(out)
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
