package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestHelpNeedsNoConfiguration: every command's --help prints its usage and
// exits 0 before any configuration is read (the environment here is empty).
func TestHelpNeedsNoConfiguration(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"help"}, {"serve", "--help"}, {"migrate", "--help"}, {"epoch", "-h"}, {"operators", "--help"},
		{"backfill", "--help"}, {"backfill", "stripe", "--help"}, {"config", "--help"}, {"demo", "--help"}, {"bench", "--help"},
		{"reconcile", "--help"}, {"fulfilments", "--help"}, {"events", "help"}, {"connector", "--help"}, {"connector", "test", "--help"}, {"reconcile", "resolve", "--help"}, {"operators", "revoke", "--help"},
		{"config", "check", "--help"}, {"operators", "add", "--help"}, {"events", "list", "--help"}, {"fulfilments", "show", "-h"},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), args, func(string) string { return "" }, &out, &errOut)
		if code != ExitOK {
			t.Errorf("%v exited %d: %s", args, code, errOut.String())
		}
		if out.Len()+errOut.Len() == 0 {
			t.Errorf("%v printed nothing", args)
		}
		if strings.Contains(out.String()+errOut.String(), "configuration refused") || strings.Contains(out.String()+errOut.String(), "is empty") {
			t.Errorf("%v read the configuration: %s%s", args, out.String(), errOut.String())
		}
	}
}

func TestConfigCheckAndVersion(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"config", "check"}, env(map[string]string{"GUARDIAN_CONNECTOR_TIMEOUT": "soon", "GUARDIAN_METRICS_ADDR": "nowhere"}), &out, &errOut)
	if code != ExitUsage {
		t.Fatalf("config check of a bad configuration exited %d", code)
	}
	for _, name := range []string{"GUARDIAN_CONNECTOR_TIMEOUT", "GUARDIAN_METRICS_ADDR", "GUARDIAN_STRIPE_SECRETS", "GUARDIAN_CONNECTOR_URL"} {
		if !strings.Contains(errOut.String(), name) {
			t.Errorf("config check does not name %s: %s", name, errOut.String())
		}
	}
	out.Reset()
	if code := Main(context.Background(), []string{"config", "check"}, env(map[string]string{"GUARDIAN_DEV": "1"}), &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "configuration ok") {
		t.Fatalf("a good configuration: exit %d, %q", code, out.String())
	}
	// One validation serves `config check` and `serve`: a level serve
	// would refuse is refused here too.
	out.Reset()
	errOut.Reset()
	if code := Main(context.Background(), []string{"config", "check"}, env(map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_LOG_LEVEL": "verbose"}), &out, &errOut); code != ExitUsage ||
		!strings.Contains(errOut.String(), "GUARDIAN_LOG_LEVEL") {
		t.Fatalf("GUARDIAN_LOG_LEVEL=verbose: exit %d, %q", code, errOut.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"version"}, env(nil), &out, &errOut); code != ExitOK || !strings.HasPrefix(out.String(), "guardian ") {
		t.Fatalf("version: exit %d, %q", code, out.String())
	}
}

// env is an environment of m's variables only.
func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestEachSubcommandHasItsOwnFlags: a subcommand's help lists its own
// flags and no other's, and a flag it does not take is refused.
func TestEachSubcommandHasItsOwnFlags(t *testing.T) {
	t.Parallel()
	help := func(args ...string) string {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), append(args, "--help"), func(string) string { return "" }, &out, &errOut); code != ExitOK {
			t.Fatalf("%v --help exited %d: %s", args, code, errOut.String())
		}
		return out.String()
	}
	for _, tt := range []struct {
		args       []string
		has, lacks []string
	}{
		{[]string{"events", "list"}, []string{"-provider", "-limit", "-cursor"}, []string{"-evidence", "-listed", "-attempt", "-to"}},
		{[]string{"reconcile", "resolve"}, []string{"-attempt", "-to", "-reason", "-evidence"}, []string{"-limit", "-listed", "-state"}},
		{[]string{"fulfilments", "show"}, []string{"-json"}, []string{"-state", "-limit", "-attempt"}},
		{[]string{"operators", "add"}, []string{"operators add NAME"}, []string{"-id"}},
		{[]string{"operators", "revoke"}, []string{"-id"}, nil},
	} {
		got := help(tt.args...)
		for _, want := range tt.has {
			if !strings.Contains(got, want) {
				t.Errorf("%v --help lacks %s:\n%s", tt.args, want, got)
			}
		}
		for _, not := range tt.lacks {
			if strings.Contains(got, not+" ") || strings.Contains(got, not+"\n") {
				t.Errorf("%v --help offers %s, which it does not take:\n%s", tt.args, not, got)
			}
		}
		if strings.Contains(got, "fulfilments show") && tt.args[1] == "resolve" {
			t.Errorf("a flag's value is named by its usage's backquotes:\n%s", got)
		}
	}
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"events", "list", "--evidence", "x"}, func(string) string { return "" }, &out, &errOut); code != ExitUsage {
		t.Errorf("events list --evidence exited %d, want %d", code, ExitUsage)
	}
}
