package actions

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/guardian-pay/guardian/app/provider"
)

// MaxFileBytes caps an actions file: it is operators' text, read once.
const MaxFileBytes = 1 << 20

// Defaults are what an action that does not say takes from the
// deployment's settings.
type Defaults struct {
	// Timeout is GUARDIAN_CONNECTOR_TIMEOUT's value.
	Timeout time.Duration
	// TakeBack is GUARDIAN_REVOKE_ON's value.
	TakeBack Policy
	// Providers are the providers the deployment serves: a route naming
	// another matches nothing, and is an error.
	Providers []string
	// Getenv reads the variables actions name for their secrets.
	Getenv func(string) string
	// Mode is the money the deployment serves; a route for the other
	// mode matches nothing, and is an error.
	Mode provider.Mode
}

// The file's shape, decoded strictly: an unknown key anywhere is an error.
type (
	fileDoc struct {
		Actions map[string]actionDoc `yaml:"actions"`
		Routes  []routeDoc           `yaml:"routes"`
	}
	actionDoc struct {
		Description string `yaml:"description"`
		URL         string `yaml:"url"`
		LookupURL   string `yaml:"lookup_url"`
		SecretEnv   string `yaml:"secret_env"`
		Timeout     string `yaml:"timeout"`
		TakeBack    list   `yaml:"take_back"`
	}
	routeDoc struct {
		Name    string   `yaml:"name"`
		Actions []string `yaml:"actions"`
		Match   matchDoc `yaml:"match"`
	}
	matchDoc struct {
		Provider        list              `yaml:"provider"`
		Kind            list              `yaml:"kind"`
		Products        list              `yaml:"products"`
		Prices          list              `yaml:"prices"`
		Metadata        map[string]string `yaml:"metadata"`
		MetadataPresent list              `yaml:"metadata_present"`
		Mode            string            `yaml:"mode"`
		Currency        list              `yaml:"currency"`
		Amount          *amountDoc        `yaml:"amount"`
	}
	amountDoc struct {
		Min *int64 `yaml:"min"`
		Max *int64 `yaml:"max"`
	}
)

// list is a list of strings that may be written as one string.
type list []string

// UnmarshalYAML reads a scalar as a list of one.
func (l *list) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*l = list{n.Value}
		return nil
	}
	var s []string
	if err := n.Decode(&s); err != nil {
		return err
	}
	*l = s
	return nil
}

// Load reads the actions file at path (Parse).
func Load(path string, d Defaults) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("actions file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("actions file: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("actions file %s: larger than %d bytes", path, MaxFileBytes)
	}
	return Parse(data, path, d)
}

// Parse reads an actions file's text: YAML, strictly decoded (an unknown
// key, a duplicate key or a value of the wrong type is an error), then
// checked whole. The error names every problem at once, each with its
// line, as "source:line: problem".
func Parse(data []byte, source string, d Defaults) (*Set, error) {
	var doc fileDoc
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	// A value of the wrong type or an unknown key leaves the rest decoded:
	// its problems are reported with the others.
	var typeErrs []problem
	if err := dec.Decode(&doc); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, yamlErrors(source, err)
		}
		typeErrs = typeProblems(te)
	}
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, yamlErrors(source, err)
	}
	var rest yaml.Node
	if err := dec.Decode(&rest); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: one YAML document only", source)
	}
	c := checker{source: source, lines: fileLines(&root)}
	if typeErrs != nil {
		c.problems = append(c.problems, typeErrs...)
	}
	s := &Set{Source: source}
	sum := sha256.Sum256(data)
	s.Digest = hex.EncodeToString(sum[:8])

	names := make([]string, 0, len(doc.Actions))
	for name := range doc.Actions {
		names = append(names, name)
	}
	// Declaration order: the order the file gives them.
	slices.SortFunc(names, func(a, b string) int { return c.lines.actions[a] - c.lines.actions[b] })
	for _, name := range names {
		s.Actions = append(s.Actions, c.action(name, doc.Actions[name], d))
	}
	if len(doc.Actions) == 0 {
		c.fail(1, "no actions: declare at least one under actions:")
	}
	routed := map[string]bool{}
	for i, rd := range doc.Routes {
		r := c.route(i, rd, doc.Actions, d)
		for _, a := range r.Actions {
			routed[a] = true
		}
		s.Routes = append(s.Routes, r)
	}
	if len(doc.Routes) == 0 {
		c.fail(1, "no routes: without one no purchase pays for any action")
	}
	for _, a := range s.Actions {
		if !routed[a.Name] {
			c.fail(a.Line, "action %q is in no route: no purchase would pay for it", a.Name)
		}
	}
	if err := c.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// problem is one thing wrong with a file, at its line.
type problem struct {
	line int
	msg  string
}

// unknownField is how the decoder names a key the file's shape does not
// have; typeProblems says it in the file's words.
var unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)

// typeProblems are a strict decoding's problems, each at its line.
func typeProblems(te *yaml.TypeError) []problem {
	var out []problem
	for _, e := range te.Errors {
		var p problem
		rest, ok := strings.CutPrefix(e, "line ")
		if n, err := fmt.Sscanf(rest, "%d:", &p.line); !ok || n != 1 || err != nil {
			p.line = 1
		}
		_, p.msg, _ = strings.Cut(rest, ": ")
		if m := unknownField.FindStringSubmatch(p.msg); m != nil {
			p.msg = fmt.Sprintf("unknown key %q", m[1])
		}
		out = append(out, p)
	}
	return out
}

// yamlErrors is a file that is not YAML, prefixed with the source.
func yamlErrors(source string, err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		return fmt.Errorf("%s:%s", source, rest)
	}
	return fmt.Errorf("%s: %s", source, msg)
}

// lines are where the file declares each action and route.
type lines struct {
	actions map[string]int
	routes  []int
}

// fileLines finds the declaration lines in the document's nodes.
func fileLines(root *yaml.Node) lines {
	l := lines{actions: map[string]int{}}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return l
	}
	top := root.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		key, val := top.Content[i], top.Content[i+1]
		switch key.Value {
		case "actions":
			for j := 0; j+1 < len(val.Content); j += 2 {
				l.actions[val.Content[j].Value] = val.Content[j].Line
			}
		case "routes":
			for _, item := range val.Content {
				l.routes = append(l.routes, item.Line)
			}
		}
	}
	return l
}

// checker gathers every problem of a file.
type checker struct {
	source   string
	lines    lines
	problems []problem
}

func (c *checker) fail(line int, format string, args ...any) {
	c.problems = append(c.problems, problem{line, fmt.Sprintf(format, args...)})
}

// err is every problem, in the order of the file's lines, one a line as
// "source:line: problem"; nil when there are none.
func (c *checker) err() error {
	slices.SortStableFunc(c.problems, func(a, b problem) int { return a.line - b.line })
	errs := make([]error, len(c.problems))
	for i, p := range c.problems {
		errs[i] = fmt.Errorf("%s:%d: %s", c.source, p.line, p.msg)
	}
	return errors.Join(errs...)
}

// action checks and builds one action.
func (c *checker) action(name string, ad actionDoc, d Defaults) Action {
	line := c.lines.actions[name]
	a := Action{Name: name, Description: ad.Description, Line: line, TakeBack: d.TakeBack,
		Receiver: Receiver{URL: ad.URL, LookupURL: ad.LookupURL, SecretEnv: ad.SecretEnv, Timeout: d.Timeout}}
	if !ValidName(name) {
		c.fail(line, "action name %q: lower case letters, digits and _, starting with a letter, at most 40", name)
	}
	if err := checkURL(ad.URL, false); err != nil {
		c.fail(line, "action %q: url: %v", name, err)
	}
	if ad.LookupURL != "" {
		if err := checkURL(ad.LookupURL, true); err != nil {
			c.fail(line, "action %q: lookup_url: %v", name, err)
		}
	}
	switch {
	case ad.SecretEnv == "":
		c.fail(line, "action %q: secret_env: name the environment variable holding its receiver's whsec_ secret", name)
	case d.Getenv == nil || d.Getenv(ad.SecretEnv) == "":
		c.fail(line, "action %q: secret_env: %s is not set", name, ad.SecretEnv)
	default:
		for _, s := range strings.FieldsFunc(d.Getenv(ad.SecretEnv), func(r rune) bool { return r == ',' || r == ' ' }) {
			a.Receiver.Secrets = append(a.Receiver.Secrets, s)
		}
	}
	if ad.Timeout != "" {
		t, err := time.ParseDuration(ad.Timeout)
		if err != nil || t <= 0 {
			c.fail(line, "action %q: timeout %q: a positive duration such as 30s", name, ad.Timeout)
		}
		a.Receiver.Timeout = t
	}
	if ad.TakeBack != nil {
		if len(ad.TakeBack) == 1 && ad.TakeBack[0] == "none" {
			a.TakeBack = Policy{}
		} else if p, err := parseReasons(ad.TakeBack); err != nil {
			c.fail(line, "action %q: take_back: %v", name, err)
		} else {
			a.TakeBack = p
		}
	}
	return a
}

// checkURL checks a receiver's URL: absolute http or https, and for a
// lookup URL one that names the key.
func checkURL(raw string, lookup bool) error {
	if raw == "" {
		return errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", raw)
	}
	if u.User != nil {
		return errors.New("credentials in the URL: use secret_env")
	}
	if lookup && !strings.Contains(raw, "{key}") {
		return fmt.Errorf("%q has no {key} for the idempotency key", raw)
	}
	return nil
}

// route checks and builds one route.
func (c *checker) route(i int, rd routeDoc, declared map[string]actionDoc, d Defaults) Route {
	line := 1
	if i < len(c.lines.routes) {
		line = c.lines.routes[i]
	}
	what := fmt.Sprintf("route %d", i+1)
	if rd.Name != "" {
		what = fmt.Sprintf("route %q", rd.Name)
	}
	r := Route{Name: rd.Name, Line: line}
	if len(rd.Actions) == 0 {
		c.fail(line, "%s: actions: name at least one action", what)
	}
	for _, a := range rd.Actions {
		if _, ok := declared[a]; !ok {
			c.fail(line, "%s: action %q is not declared under actions:", what, a)
		} else if !slices.Contains(r.Actions, a) {
			r.Actions = append(r.Actions, a)
		}
	}
	m := rd.Match
	for _, p := range m.Provider {
		if !slices.Contains(d.Providers, p) {
			c.fail(line, "%s: provider %q is not served here (serving %s)", what, p, strings.Join(d.Providers, ", "))
		}
	}
	r.Match.Providers = m.Provider
	for _, k := range m.Kind {
		if !slices.Contains(provider.Kinds, provider.Kind(k)) {
			c.fail(line, "%s: kind %q is not one of one_time, subscription_start, renewal", what, k)
		}
		r.Match.Kinds = append(r.Match.Kinds, provider.Kind(k))
	}
	r.Match.Products, r.Match.Prices = m.Products, m.Prices
	r.Match.Metadata, r.Match.Present = m.Metadata, m.MetadataPresent
	switch provider.Mode(m.Mode) {
	case "", provider.ModeLive, provider.ModeTest:
		r.Match.Mode = provider.Mode(m.Mode)
		if r.Match.Mode != "" && d.Mode != "" && r.Match.Mode != d.Mode {
			c.fail(line, "%s: mode %s: this deployment serves %s money only", what, m.Mode, d.Mode)
		}
	default:
		c.fail(line, "%s: mode %q is not live or test", what, m.Mode)
	}
	for _, cur := range m.Currency {
		if len(cur) != 3 || strings.ToUpper(cur) != cur {
			c.fail(line, "%s: currency %q: an ISO 4217 code in capitals, such as EUR", what, cur)
		}
	}
	r.Match.Currencies = m.Currency
	if a := m.Amount; a != nil {
		if len(m.Currency) == 0 {
			c.fail(line, "%s: amount: name its currency too (amounts are in a currency's minor units)", what)
		}
		if a.Min == nil && a.Max == nil {
			c.fail(line, "%s: amount: give min, max or both (minor units, inclusive)", what)
		}
		if a.Min != nil && a.Max != nil && *a.Min > *a.Max {
			c.fail(line, "%s: amount: min %d is above max %d", what, *a.Min, *a.Max)
		}
		r.Match.MinAmount, r.Match.MaxAmount = a.Min, a.Max
	}
	return r
}
