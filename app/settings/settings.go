// Package settings is Guardian's one table of settings: every variable
// it reads from the environment, each registered once by the package that
// uses it, with its default, how it is parsed, one line of doc and
// whether it is a secret. An Env is the one reader of the environment;
// the README's configuration table and `guardian config list` are made
// from the registry (WriteMarkdown, WriteList), and a test fails when the README
// differs.
//
// Registration is the way database/sql drivers register: a package
// declares its settings as package variables, so linking the package in
// is what makes them known.
package settings

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/registry"
)

// Setting is what the registry knows of a variable.
type Setting struct {
	// Name is the environment variable ("GUARDIAN_ADDR").
	Name string
	// Default is the default as the docs show it ("`:8080`", "unset
	// (Paddle not served)", "required").
	Default string
	// Doc says what the setting does, in one line of Markdown.
	Doc string
	// Secret settings are never shown: `config list` says only whether
	// they are set.
	Secret bool
	// Client settings are read by the operator commands, not the server.
	Client bool
	// Gone, for a variable no longer read, says what replaced it: setting
	// it is an error, so an old deployment is told, not ignored.
	Gone string
}

var registered registry.Of[Setting]

// Register adds s to the registry. It panics when s.Name is already
// registered or s has no doc: both are programming errors, found when the
// binary starts.
func Register(s Setting) {
	if s.Doc == "" && s.Gone == "" {
		panic("settings: " + s.Name + " has no doc")
	}
	registered.Register(s.Name, s)
}

// All returns every registered setting, by name.
func All() []Setting { return registered.All() }

// Lookup returns the registered setting called name.
func Lookup(name string) (Setting, bool) { return registered.Lookup(name) }

// Var is a registered setting of type T: its default and its parser.
type Var[T any] struct {
	Setting
	def   T
	parse func(string) (T, error)
}

// New registers s, read with parse and def when unset. parse's error says
// what is wanted ("want a positive duration such as 30s"); Read names the
// variable and the value (or, for a secret, not the value).
func New[T any](s Setting, def T, parse func(string) (T, error)) *Var[T] {
	Register(s)
	return &Var[T]{Setting: s, def: def, parse: parse}
}

// Default returns the value when the variable is unset.
func (v *Var[T]) Default() T { return v.def }

// Read returns the variable's value from env: the default when unset, and
// when it does not parse, the default with the error kept in env.
func (v *Var[T]) Read(env *Env) T {
	raw := env.raw(v.Name)
	if raw == "" {
		return v.def
	}
	got, err := v.parse(raw)
	if err != nil {
		if v.Secret {
			env.Fail(fmt.Errorf("%s: %w", v.Name, err))
		} else {
			env.Fail(fmt.Errorf("%s: %w, got %q", v.Name, err, raw))
		}
		return v.def
	}
	return got
}

// IsSet reports whether the variable is set in env.
func (v *Var[T]) IsSet(env *Env) bool { return env.raw(v.Name) != "" }

// String registers a setting read as it is.
func String(s Setting, def string) *Var[string] {
	return New(s, def, func(v string) (string, error) { return v, nil })
}

// List registers a list setting: the value split on any of seps, each
// item trimmed, empty items dropped.
func List(s Setting, seps string) *Var[[]string] {
	return New(s, nil, func(v string) ([]string, error) { return Split(v, seps), nil })
}

// Duration registers a positive duration.
func Duration(s Setting, def time.Duration) *Var[time.Duration] {
	return New(s, def, func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, errors.New("want a positive duration such as 30s")
		}
		return d, nil
	})
}

// Int registers a positive integer.
func Int(s Setting, def int64) *Var[int64] {
	return New(s, def, func(v string) (int64, error) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, errors.New("want a positive integer")
		}
		return n, nil
	})
}

// Bool registers true or false.
func Bool(s Setting, def bool) *Var[bool] {
	return New(s, def, func(v string) (bool, error) {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, errors.New("want true or false")
		}
		return b, nil
	})
}

// OneOf registers a setting that is one of choices.
func OneOf(s Setting, def string, choices ...string) *Var[string] {
	return New(s, def, func(v string) (string, error) {
		if !slices.Contains(choices, v) {
			return "", fmt.Errorf("want %s", orList(choices))
		}
		return v, nil
	})
}

// Gone registers a variable no longer read; Env.Err names it when set.
func Gone(name, replacement string) {
	Register(Setting{Name: name, Gone: replacement})
}

// orList words choices as "a, b or c".
func orList(choices []string) string {
	if len(choices) < 2 {
		return strings.Join(choices, "")
	}
	return strings.Join(choices[:len(choices)-1], ", ") + " or " + choices[len(choices)-1]
}

// Split splits v on any of seps, trimming and dropping empty items.
func Split(v, seps string) []string {
	var out []string
	for _, item := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune(seps, r) }) {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Loopback reports whether host (a name or an address, without a port) is
// localhost or a loopback address: what the settings that keep a listener
// or a credential on this machine accept.
func Loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}
