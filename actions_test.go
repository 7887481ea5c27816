package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/web"
)

// secretForTests is a whsec_ secret of 24 random bytes, for the actions'
// receivers.
const secretForTests = "whsec_Sn8OZ8mjYkYjdS4dLOQBfY1L9qlFjS3c"

func actionsEnv(t *testing.T, file string) map[string]string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_ACTIONS_FILE": path, "LICENCE_SECRET": secretForTests, "MAIL_SECRET": secretForTests}
}

const twoActions = `actions:
  licence:
    url: http://127.0.0.1:9301/guardian
    lookup_url: http://127.0.0.1:9301/guardian/{key}
    secret_env: LICENCE_SECRET
  welcome_email:
    url: http://localhost:9302/guardian
    secret_env: MAIL_SECRET
    take_back: none
routes:
  - name: courses
    actions: [licence, welcome_email]
    match: {metadata_present: course}
`

// TestActionsList: the actions file as the configuration reads it, without
// its secrets, as a table and as the API's JSON.
func TestActionsList(t *testing.T) {
	t.Parallel()
	vars := actionsEnv(t, twoActions)
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"actions", "list"}, env(vars), &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"licence", "http://127.0.0.1:9301/guardian/{key}", "welcome_email", "never", "LICENCE_SECRET", "courses", "metadata.course present"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := Main(context.Background(), []string{"actions", "list", "--json"}, env(vars), &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var v web.ActionsAnswer
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || len(v.Actions) != 2 || len(v.Actions[1].TakeBack) != 0 || v.Actions[0].TakeBack[0] != "full_refund" {
		t.Fatalf("%v: %s", err, out.String())
	}
	if strings.Contains(out.String(), secretForTests) {
		t.Fatal("a secret is listed")
	}
	// Without a file: the one action, fulfil.
	out.Reset()
	if code := Main(context.Background(), []string{"actions", "list"}, env(map[string]string{"GUARDIAN_DEV": "1"}), &out, &errOut); code != ExitOK ||
		!strings.Contains(out.String(), "fulfil") || !strings.Contains(out.String(), "every paid purchase") {
		t.Fatalf("exit %d:\n%s", code, out.String())
	}
}

// TestRoutesOnProductsFetchStripesLineItems: routes that match on
// products make Stripe's API the source of a Checkout purchase's items
// when its key is set, and without one the deployment is warned that
// those routes never match a Checkout purchase.
func TestRoutesOnProductsFetchStripesLineItems(t *testing.T) {
	t.Parallel()
	vars := actionsEnv(t, strings.ReplaceAll(twoActions, "{metadata_present: course}", "{products: [prod_course]}"))
	cfg, err := ConfigFromEnv(env(vars))
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(cfg.Warnings, "\n"); !strings.Contains(w, "without GUARDIAN_STRIPE_API_KEY its line items are not fetched") {
		t.Errorf("no warning of routes that cannot match:\n%s", w)
	}
	if len(cfg.ItemsSources()) != 0 {
		t.Error("an items source without a key")
	}
	vars["GUARDIAN_STRIPE_API_KEY"] = "sk_test_items_for_routes"
	vars["GUARDIAN_MODE"] = "test"
	if cfg, err = ConfigFromEnv(env(vars)); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.ItemsSources()["stripe"]; !ok || strings.Contains(strings.Join(cfg.Warnings, "\n"), "line items are not fetched") {
		t.Errorf("with the key, Stripe's API lists the items: %v %v", cfg.ItemsSources(), cfg.Warnings)
	}
}

// TestConfigCheckNamesEveryProblemOfTheActionsFile: each with its line,
// beside the rules the connector's settings follow (the development
// profile's receivers stay on loopback; a file replaces the connector).
func TestConfigCheckNamesEveryProblemOfTheActionsFile(t *testing.T) {
	t.Parallel()
	vars := actionsEnv(t, strings.ReplaceAll(twoActions, "http://localhost:9302", "https://mail.example.com")+"    colour: red\n")
	vars["GUARDIAN_CONNECTOR_URL"] = "http://127.0.0.1:1/x"
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"config", "check"}, env(vars), &out, &errOut)
	if code != ExitUsage {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	for _, want := range []string{`routes.yaml:14: unknown key "colour"`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("missing %q in:\n%s", want, errOut.String())
		}
	}
	// Without the unknown key the file reads, and the rest is refused.
	vars = actionsEnv(t, strings.ReplaceAll(twoActions, "http://localhost:9302", "https://mail.example.com"))
	vars["GUARDIAN_CONNECTOR_URL"] = "http://127.0.0.1:1/x"
	errOut.Reset()
	code = Main(context.Background(), []string{"config", "check"}, env(vars), &out, &errOut)
	for _, want := range []string{
		`GUARDIAN_CONNECTOR_URL and GUARDIAN_CONNECTOR_LOOKUP_URL are set beside GUARDIAN_ACTIONS_FILE`,
		`routes.yaml:6: action "welcome_email": GUARDIAN_DEV=1 refuses a receiver off loopback (mail.example.com)`,
	} {
		if code != ExitUsage || !strings.Contains(errOut.String(), want) {
			t.Errorf("exit %d, missing %q in:\n%s", code, want, errOut.String())
		}
	}
}

// TestActionsApplyCommand: the command applies through the configured
// actions on the database, names what it did, and refuses without an
// operator to audit.
func TestActionsApplyCommand(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	vars := actionsEnv(t, twoActions)
	vars["DATABASE_URL"] = d.URL
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"actions", "apply", "welcome_email"}, env(vars), &out, &errOut); code != ExitUsage {
		t.Fatalf("without --operator: exit %d", code)
	}
	code := Main(context.Background(), []string{"actions", "apply", "welcome_email", "--operator", "ana", "--since", "24h", "--dry-run"}, env(vars), &out, &errOut)
	if code != ExitOK || !strings.Contains(out.String(), "welcome_email: 0 purchases first paid since") || !strings.Contains(out.String(), "would apply to 0") {
		t.Fatalf("exit %d: %s %s", code, out.String(), errOut.String())
	}
	errOut.Reset()
	if code := Main(context.Background(), []string{"actions", "apply", "ghost", "--operator", "ana"}, env(vars), &out, &errOut); code != ExitFailure ||
		!strings.Contains(errOut.String(), "not one of this deployment's actions") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// TestSubscriptionsLinkCommand: the command links through the domain on
// the database, says what it did, and refuses without an operator.
func TestSubscriptionsLinkCommand(t *testing.T) {
	t.Parallel()
	d := dbtest.NewDB(t)
	vars := actionsEnv(t, twoActions)
	vars["DATABASE_URL"] = d.URL
	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"subscriptions", "link"}, env(vars), &out, &errOut); code != ExitUsage {
		t.Fatalf("without --operator: exit %d", code)
	}
	if code := Main(context.Background(), []string{"subscriptions", "link", "--operator", "ana", "--since", "soon"}, env(vars), &out, &errOut); code != ExitUsage {
		t.Fatalf("a bad window: exit %d", code)
	}
	code := Main(context.Background(), []string{"subscriptions", "link", "--operator", "ana", "--since", "24h", "--dry-run"}, env(vars), &out, &errOut)
	if code != ExitOK || !strings.Contains(out.String(), "naming a subscription's start: 0; would link 0 subscriptions") {
		t.Fatalf("exit %d: %s %s", code, out.String(), errOut.String())
	}
}
