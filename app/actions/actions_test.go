package actions_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/actions"
	"github.com/guardian-pay/guardian/app/provider"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func defaults() actions.Defaults {
	return actions.Defaults{
		Timeout: 30 * time.Second, TakeBack: actions.DefaultPolicy,
		Providers: []string{"stripe", "paddle"}, Mode: provider.ModeLive,
		Getenv: func(k string) string {
			return map[string]string{"LICENCE_SECRET": secret, "MAIL_SECRET": secret + "," + secret, "CRM_SECRET": secret}[k]
		},
	}
}

// coursePlatform is the docs' example: a licence and a CRM contact for
// every course, a welcome email that is never taken back.
const coursePlatform = `
actions:
  licence:
    url: https://lms.example/guardian
    lookup_url: https://lms.example/guardian/{key}
    secret_env: LICENCE_SECRET
  welcome_email:
    description: the welcome email; a refund does not unsend it
    url: https://mail.example/guardian
    secret_env: MAIL_SECRET
    timeout: 5s
    take_back: none
  crm_contact:
    url: https://crm.example/guardian
    secret_env: CRM_SECRET
    take_back: [any_refund, dispute_opened]
routes:
  - name: courses
    actions: [licence, welcome_email]
    match:
      metadata_present: course
  - name: teams
    actions: [crm_contact, licence]
    match:
      provider: stripe
      metadata: {plan: team}
      currency: EUR
      amount: {min: 10000}
`

func TestParseReadsTheFile(t *testing.T) {
	s, err := actions.Parse([]byte(coursePlatform), "routes.yaml", defaults())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Names(); !slices.Equal(got, []string{"licence", "welcome_email", "crm_contact"}) {
		t.Fatalf("actions in file order: got %v", got)
	}
	mail, _ := s.Action("welcome_email")
	if mail.Receiver.Timeout != 5*time.Second || len(mail.TakeBack) != 0 || len(mail.Receiver.Secrets) != 2 || mail.Line != 7 {
		t.Fatalf("welcome_email: %+v", mail)
	}
	crm, _ := s.Action("crm_contact")
	if crm.TakeBack.String() != "any_refund,dispute_opened" || crm.Receiver.Timeout != 30*time.Second {
		t.Fatalf("crm_contact: %+v", crm)
	}
	if lic, _ := s.Action("licence"); lic.TakeBack.String() != "full_refund,dispute_lost,subscription_ended" {
		t.Fatalf("licence takes the deployment's policy: %s", lic.TakeBack)
	}
	if s.Routes[1].Line != 22 || s.Digest == "" {
		t.Fatalf("route line %d, digest %q", s.Routes[1].Line, s.Digest)
	}
}

func TestRoutesAreTheUnionOfEveryMatch(t *testing.T) {
	s, err := actions.Parse([]byte(coursePlatform), "routes.yaml", defaults())
	if err != nil {
		t.Fatal(err)
	}
	amount := func(n int64) *int64 { return &n }
	cases := []struct {
		name string
		p    provider.Purchase
		want []string
	}{
		{"a course", provider.Purchase{Provider: "paddle", Metadata: map[string]string{"course": "go"}}, []string{"licence", "welcome_email"}},
		{"a team course: both routes, each action once",
			provider.Purchase{Provider: "stripe", Currency: "EUR", Amount: amount(10000), Metadata: map[string]string{"course": "go", "plan": "team"}},
			[]string{"licence", "welcome_email", "crm_contact"}},
		{"a team below the amount", provider.Purchase{Provider: "stripe", Currency: "EUR", Amount: amount(9999), Metadata: map[string]string{"plan": "team"}}, []string{}},
		{"a team with no amount stated matches no amount criterion", provider.Purchase{Provider: "stripe", Currency: "EUR", Metadata: map[string]string{"plan": "team"}}, []string{}},
		{"a team in another currency", provider.Purchase{Provider: "stripe", Currency: "USD", Amount: amount(20000), Metadata: map[string]string{"plan": "team"}}, []string{}},
		{"a team of another provider", provider.Purchase{Provider: "paddle", Currency: "EUR", Amount: amount(20000), Metadata: map[string]string{"plan": "team"}}, []string{}},
		{"nothing the routes name", provider.Purchase{Provider: "stripe"}, []string{}},
	}
	for _, c := range cases {
		if got := s.Route(&c.p); !slices.Equal(got, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestMatchOnItemsAndKinds(t *testing.T) {
	m := actions.Match{Products: []string{"prod_a"}, Kinds: []provider.Kind{provider.Renewal}}
	p := provider.Purchase{Kind: provider.Renewal, Items: []provider.Item{{Product: "prod_b"}, {Product: "prod_a"}}}
	if !m.Matches(&p) {
		t.Fatal("a renewal that bought prod_a among others matches")
	}
	p.Kind = ""
	if m.Matches(&p) {
		t.Fatal("a purchase whose kind is not stated matches no kind")
	}
	if (actions.Match{Prices: []string{"pri_1"}}).Matches(&provider.Purchase{}) {
		t.Fatal("a purchase that lists no items matches no price")
	}
}

func TestParseNamesEveryProblemWithItsLine(t *testing.T) {
	bad := `actions:
  Licence:
    url: ftp://x
    secret_env: NOT_SET
    colour: blue
  mail:
    url: https://mail.example/g
    lookup_url: https://mail.example/lookup
    secret_env: MAIL_SECRET
    take_back: sometimes
    timeout: soon
routes:
  - actions: [mail, ghost]
    match:
      provider: adyen
      kind: gift
      currency: eur
      amount: {min: 5, max: 1}
      mode: test
  - name: empty
    actions: []
`
	_, err := actions.Parse([]byte(bad), "f.yaml", defaults())
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`f.yaml:5: unknown key "colour"`,
		`f.yaml:2: action name "Licence"`,
		`f.yaml:2: action "Licence": url: "ftp://x"`,
		`f.yaml:2: action "Licence": secret_env: NOT_SET is not set`,
		`f.yaml:6: action "mail": lookup_url: "https://mail.example/lookup" has no {key}`,
		`f.yaml:6: action "mail": take_back: "sometimes"`,
		`f.yaml:6: action "mail": timeout "soon"`,
		`f.yaml:13: route 1: action "ghost" is not declared`,
		`f.yaml:13: route 1: provider "adyen" is not served here`,
		`f.yaml:13: route 1: kind "gift"`,
		`f.yaml:13: route 1: currency "eur"`,
		`f.yaml:13: route 1: amount: min 5 is above max 1`,
		`f.yaml:13: route 1: mode test: this deployment serves live money only`,
		`f.yaml:20: route "empty": actions: name at least one action`,
		`f.yaml:2: action "Licence" is in no route`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), secret) {
		t.Fatal("an error shows a secret")
	}
}

func TestParseRefusesWhatIsNotOneStrictDocument(t *testing.T) {
	for name, text := range map[string]string{
		"duplicate action": "actions:\n  a:\n    url: https://x\n  a:\n    url: https://y\nroutes: []\n",
		"second document":  "actions: {}\n---\nactions: {}\n",
		"syntax":           "actions: [\n",
		"empty":            "",
	} {
		if _, err := actions.Parse([]byte(text), "f.yaml", defaults()); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestDefaultIsOneActionForEveryPurchase(t *testing.T) {
	s := actions.Default(actions.Receiver{URL: "https://r"}, actions.DefaultPolicy)
	for _, p := range []provider.Purchase{{Provider: "stripe"}, {Provider: "paypal", Kind: provider.Renewal}} {
		if got := s.Route(&p); !slices.Equal(got, []string{actions.Fulfil}) {
			t.Fatalf("%+v: %v", p, got)
		}
	}
}

func TestPolicyTakesBackForItsReasons(t *testing.T) {
	full := provider.Reversal{Kind: provider.Refund, Full: true}
	partial := provider.Reversal{Kind: provider.Refund}
	s := &actions.Set{Actions: []actions.Action{
		{Name: "licence", TakeBack: actions.DefaultPolicy},
		{Name: "email", TakeBack: actions.Policy{}},
		{Name: "credit", TakeBack: actions.Policy{actions.AnyRefund}},
	}}
	if got := s.Revoking(full); !slices.Equal(got, []string{"licence", "credit"}) {
		t.Fatalf("full refund: %v", got)
	}
	if got := s.Revoking(partial); !slices.Equal(got, []string{"credit"}) {
		t.Fatalf("partial refund: %v", got)
	}
}
