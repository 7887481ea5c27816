package main

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/settings"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := ConfigFromEnv(envOf(map[string]string{
			"GUARDIAN_STRIPE_SECRETS": stripeA + ", " + stripeB, "GUARDIAN_STANDARD_SECRETS": standardC + " " + standardD,
			"GUARDIAN_CONNECTOR_URL": "http://c", "GUARDIAN_CONNECTOR_SECRET": connectorE,
			"GUARDIAN_ADMIN_TOKEN": "an-operator-token-1, an-operator-token-2",
		}))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Addr != ":8080" || cfg.MetricsAddr != "127.0.0.1:9090" || cfg.Pprof || cfg.DatabaseURL != DefaultDatabaseURL || cfg.ConnectorTimeout != 30*time.Second ||
			cfg.DispatchLease != 5*time.Minute || cfg.SweepInterval != 30*time.Second || cfg.MaxBodyBytes != 1<<20 ||
			!cfg.Migrate || cfg.Dev || cfg.LogFormat != "json" || cfg.RedisURL != "" {
			t.Errorf("unexpected defaults: %+v", cfg)
		}
		if got := servedNames(cfg); !slices.Equal(got, []string{"standard", "stripe"}) {
			t.Errorf("served %v, want standard and stripe alone", got)
		}
		// Both secrets of each list verify: the lists were split and trimmed.
		for _, secret := range []string{stripeA, stripeB} {
			if !verifiesStripe(t, cfg, secret) {
				t.Errorf("a delivery signed with the Stripe secret %.10s... does not verify", secret)
			}
		}
		for _, secret := range []string{standardC, standardD} {
			if !verifiesStandard(t, cfg, secret) {
				t.Errorf("a delivery signed with the Standard secret %.10s... does not verify", secret)
			}
		}
		if !cfg.API || len(cfg.AdminTokens) != 2 || cfg.ReconcileInterval != time.Minute {
			t.Errorf("api config: %+v", cfg)
		}
	})

	t.Run("RefusesWithoutSecretsOrConnector", func(t *testing.T) {
		t.Parallel()
		_, err := ConfigFromEnv(envOf(map[string]string{"GUARDIAN_STRIPE_SECRETS": " , "}))
		for _, want := range []string{"GUARDIAN_STRIPE_SECRETS is empty", "GUARDIAN_STANDARD_SECRETS is empty", "GUARDIAN_CONNECTOR_URL is empty"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not say %q", err, want)
			}
		}
	})

	t.Run("BadValuesNamed", func(t *testing.T) {
		t.Parallel()
		_, err := ConfigFromEnv(envOf(map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_CONNECTOR_TIMEOUT": "soon", "GUARDIAN_MAX_BODY_BYTES": "-1", "GUARDIAN_MIGRATE": "perhaps"}))
		for _, want := range []string{"GUARDIAN_CONNECTOR_TIMEOUT", "GUARDIAN_MAX_BODY_BYTES", "GUARDIAN_MIGRATE"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v does not name %s", err, want)
			}
		}
	})

	t.Run("DevFillsOnlyWhatIsMissing", func(t *testing.T) {
		t.Parallel()
		cfg, err := ConfigFromEnv(envOf(map[string]string{"GUARDIAN_DEV": "true", "GUARDIAN_STRIPE_SECRETS": "whsec_real"}))
		if err != nil {
			t.Fatal(err)
		}
		if !verifiesStripe(t, cfg, "whsec_real") || verifiesStripe(t, cfg, provider.DevStripeSecret) || !verifiesStandard(t, cfg, provider.DevStandardSecret) ||
			cfg.LogFormat != "text" || cfg.Addr != "127.0.0.1:8080" {
			t.Errorf("dev profile: %+v", cfg)
		}
	})
}

// servedNames names the configuration's providers.
func servedNames(cfg Config) []string {
	var names []string
	for _, p := range cfg.Providers {
		names = append(names, p.Name())
	}
	return names
}

// served returns the configuration's provider called name.
func served(t *testing.T, cfg Config, name string) provider.Provider {
	t.Helper()
	for _, p := range cfg.Providers {
		if p.Name() == name {
			return p
		}
	}
	t.Fatalf("%s is not served", name)
	return nil
}

// verifiesStripe reports whether the configuration's Stripe provider takes
// a delivery signed with secret.
func verifiesStripe(t *testing.T, cfg Config, secret string) bool {
	body := []byte(`{"id":"evt_1","object":"event","type":"customer.created","livemode":false,"data":{"object":{}}}`)
	now := time.Now()
	_, err := served(t, cfg, "stripe").Verify(providertest.SignStripe(body, secret, now), body, now)
	return err == nil || !errors.Is(err, provider.ErrSignature)
}

// verifiesStandard reports whether the configuration's Standard Webhooks
// provider takes a delivery signed with secret.
func verifiesStandard(t *testing.T, cfg Config, secret string) bool {
	body := []byte(`{"type":"customer.created","data":{}}`)
	now := time.Now()
	h, err := providertest.SignStandard("msg_1", body, secret, now)
	if err != nil {
		t.Fatal(err)
	}
	_, err = served(t, cfg, "standard").Verify(h, body, now)
	return err == nil || !errors.Is(err, provider.ErrSignature)
}

// Secrets of the production configurations below: long enough, and none
// of them a published constant.
const (
	stripeA    = "whsec_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	stripeB    = "whsec_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	standardC  = "whsec_Y2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2Nj"
	standardD  = "whsec_ZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRkZGRk"
	connectorE = "whsec_ZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVlZWVl"
)

// production is a complete production configuration plus more.
func production(more map[string]string) func(string) string {
	m := map[string]string{
		"GUARDIAN_STRIPE_SECRETS": stripeA, "GUARDIAN_STANDARD_SECRETS": standardC,
		"GUARDIAN_CONNECTOR_URL": "https://connector.internal", "GUARDIAN_CONNECTOR_SECRET": connectorE,
		"GUARDIAN_ADMIN_TOKEN": "an-operator-token-1",
	}
	for k, v := range more {
		m[k] = v
	}
	return envOf(m)
}

func TestConfigRefusesExposure(t *testing.T) {
	t.Parallel()
	if _, err := ConfigFromEnv(production(nil)); err != nil {
		t.Fatalf("the production baseline is refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		env  func(string) string
		want string
	}{
		// The development profile beside a real connector: anyone could sign
		// a fulfilling event with its public Standard secret.
		{"DevWithARealConnector", envOf(map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_CONNECTOR_URL": "https://connector.internal", "GUARDIAN_CONNECTOR_SECRET": connectorE, "GUARDIAN_STRIPE_SECRETS": stripeA}), "GUARDIAN_DEV=1 refuses GUARDIAN_CONNECTOR_URL"},
		{"DevOnAllInterfaces", envOf(map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_ADDR": ":8080"}), "listens on loopback only"},
		{"DevOnAPublicAddress", envOf(map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_ADDR": "10.1.2.3:8080"}), "listens on loopback only"},
		{"PublicStandardSecret", production(map[string]string{"GUARDIAN_STANDARD_SECRETS": provider.DevStandardSecret}), "GUARDIAN_STANDARD_SECRETS holds a public development constant"},
		{"PublicStripeSecret", production(map[string]string{"GUARDIAN_STRIPE_SECRETS": stripeA + "," + provider.DevStripeSecret}), "GUARDIAN_STRIPE_SECRETS holds a public development constant"},
		{"PublicAdminToken", production(map[string]string{"GUARDIAN_ADMIN_TOKEN": DevAdminToken}), "GUARDIAN_ADMIN_TOKEN holds a public development constant"},
		{"PublicConnectorSecret", production(map[string]string{"GUARDIAN_CONNECTOR_SECRET": provider.DevStandardSecret}), "GUARDIAN_CONNECTOR_SECRET"},
		{"ShortStripeSecret", production(map[string]string{"GUARDIAN_STRIPE_SECRETS": "whsec_short"}), "at least 24 characters"},
		{"StripeSecretWithoutPrefix", production(map[string]string{"GUARDIAN_STRIPE_SECRETS": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}), "whsec_ followed by"},
		{"NotAPaddleSecret", production(map[string]string{"GUARDIAN_PADDLE_SECRETS": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}), "GUARDIAN_PADDLE_SECRETS: secret 1 is not pdl_ntfset_"},
		{"ShortShopifySecret", production(map[string]string{"GUARDIAN_SHOPIFY_SECRETS": "steffi"}), "GUARDIAN_SHOPIFY_SECRETS: secret 1 is shorter than 32 characters"},
		{"ShortLemonSqueezySecret", production(map[string]string{"GUARDIAN_LEMONSQUEEZY_SECRETS": "secret"}), "GUARDIAN_LEMONSQUEEZY_SECRETS: secret 1 is not 24 to 40 characters"},
		{"AdyenKeyNotHex", production(map[string]string{"GUARDIAN_ADYEN_HMAC_KEYS": "my-adyen-key"}), "GUARDIAN_ADYEN_HMAC_KEYS: secret 1 is not 64 hex characters"},
		{"AdyenCaptureUnknown", production(map[string]string{"GUARDIAN_ADYEN_CAPTURE": "delayed"}), "GUARDIAN_ADYEN_CAPTURE: want automatic or manual"},
		{"PaddleBackfillWithoutPaddle", production(map[string]string{"GUARDIAN_PADDLE_API_KEY": "pdl_live_apikey_01abc"}), "GUARDIAN_PADDLE_API_KEY needs GUARDIAN_PADDLE_SECRETS"},
		{"SandboxPaddleKeyLive", production(map[string]string{"GUARDIAN_PADDLE_SECRETS": "pdl_ntfset_01hsdn8d43dt7mezr1ef2jtbaw_secret01", "GUARDIAN_PADDLE_API_KEY": "pdl_sdbx_apikey_01abc"}), "is the sandbox's in a live deployment"},
		{"PayPalIDWithoutSecret", production(map[string]string{"GUARDIAN_PAYPAL_WEBHOOK_IDS": "WH1", "GUARDIAN_PAYPAL_CLIENT_ID": "AYid"}), "GUARDIAN_PAYPAL_CLIENT_ID and GUARDIAN_PAYPAL_CLIENT_SECRET go together"},
		{"SandboxPayPalAPILive", production(map[string]string{"GUARDIAN_PAYPAL_WEBHOOK_IDS": "WH1", "GUARDIAN_PAYPAL_CLIENT_ID": "AYid", "GUARDIAN_PAYPAL_CLIENT_SECRET": "EKsecret", "GUARDIAN_PAYPAL_API_URL": "https://api-m.sandbox.paypal.com"}), "GUARDIAN_PAYPAL_API_URL is the sandbox's in a live deployment"},
		{"PaddleAPIOverHTTP", production(map[string]string{"GUARDIAN_PADDLE_API_URL": "http://paddle.example.com"}), "GUARDIAN_PADDLE_API_URL: want an https URL"},
		{"RevokeOnUnknown", production(map[string]string{"GUARDIAN_REVOKE_ON": "full_refund,sometimes"}), `GUARDIAN_REVOKE_ON: "sometimes" is not one of full_refund, any_refund, dispute_opened, dispute_lost, subscription_ended, subscription_suspended, or none`},
		{"PayloadRetentionShorterThanRetries", production(map[string]string{"GUARDIAN_PAYLOAD_RETENTION": "24h"}), "GUARDIAN_PAYLOAD_RETENTION: want a duration of at least 96h0m0s"},
		{"ShortStandardSecret", production(map[string]string{"GUARDIAN_STANDARD_SECRETS": "whsec_c2hvcnQ="}), "at least 24 random bytes"},
		{"ShortConnectorSecret", production(map[string]string{"GUARDIAN_CONNECTOR_SECRET": "whsec_c2hvcnQ="}), "GUARDIAN_CONNECTOR_SECRET holds 5 random bytes; at least 24 random bytes wanted"},
		{"MetricsOnThePublicListener", production(map[string]string{"GUARDIAN_ADDR": ":8080", "GUARDIAN_METRICS_ADDR": ":8080"}), "never served on the public listener"},
		{"PprofOffLoopback", production(map[string]string{"GUARDIAN_PPROF": "true", "GUARDIAN_METRICS_ADDR": "0.0.0.0:9090"}), "GUARDIAN_PPROF refuses the non-loopback"},
		{"PprofAddrIsGone", production(map[string]string{"GUARDIAN_PPROF_ADDR": "127.0.0.1:6060"}), "GUARDIAN_PPROF_ADDR is gone"},
		{"PublicURLWithAPath", production(map[string]string{"GUARDIAN_PUBLIC_URL": "https://ops.example.com/guardian"}), "GUARDIAN_PUBLIC_URL"},
		{"BadDatabaseURL", production(map[string]string{"DATABASE_URL": "mysql://root:hunter2@db/guardian?x=%zz"}), "DATABASE_URL: not a Postgres URL"},
		{"UnknownDBPooler", production(map[string]string{"GUARDIAN_DB_POOLER": "session"}), "GUARDIAN_DB_POOLER: want none or transaction"},
		{"CachingModeBehindPooler", production(map[string]string{"GUARDIAN_DB_POOLER": "transaction", "DATABASE_URL": "postgres://guardian:hunter2@pgbouncer:6432/guardian?default_query_exec_mode=cache_statement"}), "DATABASE_URL: default_query_exec_mode (cache_statement)"},
		{"BadRedisURL", production(map[string]string{"REDIS_URL": "127.0.0.1:6379"}), "REDIS_URL: want"},
		{"BadConnectorURL", production(map[string]string{"GUARDIAN_CONNECTOR_URL": "connector.internal"}), "GUARDIAN_CONNECTOR_URL: want an absolute"},
		{"LookupWithoutKey", production(map[string]string{"GUARDIAN_CONNECTOR_LOOKUP_URL": "https://connector.internal/lookup"}), "GUARDIAN_CONNECTOR_LOOKUP_URL: want"},
		{"BadTrustedProxy", production(map[string]string{"GUARDIAN_TRUSTED_PROXIES": "10.0.0.0/8, the-proxy"}), "GUARDIAN_TRUSTED_PROXIES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ConfigFromEnv(tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v does not say %q", err, tc.want)
			}
			for _, secret := range []string{provider.DevStandardSecret, provider.DevStripeSecret, connectorE, stripeA} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error quotes a secret: %v", err)
				}
			}
		})
	}

	t.Run("AllowedWhenMeant", func(t *testing.T) {
		t.Parallel()
		for _, env := range []func(string) string{
			envOf(map[string]string{"GUARDIAN_DEV": "1", "GUARDIAN_ADDR": "localhost:8081"}),
			production(map[string]string{"GUARDIAN_PPROF": "true"}),
			production(map[string]string{"GUARDIAN_PPROF": "true", "GUARDIAN_METRICS_ADDR": "0.0.0.0:9090", "GUARDIAN_PPROF_ALLOW_REMOTE": "true"}),
			production(map[string]string{"GUARDIAN_PUBLIC_URL": "https://ops.example.com/", "GUARDIAN_TRUSTED_PROXIES": "10.0.0.0/8, 192.0.2.1"}),
			production(map[string]string{"GUARDIAN_ADMIN_TOKEN": "", "GUARDIAN_METRICS_ADDR": "off"}),
		} {
			if _, err := ConfigFromEnv(env); err != nil {
				t.Errorf("refused: %v", err)
			}
		}
	})
}

func TestConfigAPIOff(t *testing.T) {
	t.Parallel()
	_, err := ConfigFromEnv(production(map[string]string{"GUARDIAN_ADMIN_TOKEN": "", "GUARDIAN_API": "false"}))
	if err != nil {
		t.Fatalf("API off needs no token: %v", err)
	}
	_, err = ConfigFromEnv(production(map[string]string{"GUARDIAN_ADMIN_TOKEN": "short"}))
	if err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("short token accepted: %v", err)
	}
}

// TestEveryVariableNamedIsRegistered: every GUARDIAN_* name the source
// holds, anywhere in the tree, is a registered setting (reading one that
// is not panics, and an unregistered one would be warned about as
// unknown).
func TestEveryVariableNamedIsRegistered(t *testing.T) {
	t.Parallel()
	name := regexp.MustCompile(`\bGUARDIAN_[A-Z][A-Z_]*[A-Z]\b`)
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		// Tests may name variables of their own (the chaos suite's helper
		// process) or misspell one on purpose; every other file is checked,
		// e2e/bench's environment for the binary included.
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range name.FindAllString(string(src), -1) {
			if _, ok := settings.Lookup(m); !ok {
				t.Errorf("%s names %s, which is not a registered setting", path, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnknownVariables(t *testing.T) {
	t.Parallel()
	got := settings.Unknown([]string{"GUARDIAN_LOG_LEVLE=debug", "GUARDIAN_ADDR=:8080", "PATH=/bin", "GUARDIAN_FROBNICATE=1", "GUARDIAN_STRIPE_SECRET=whsec_x"})
	want := []string{
		"GUARDIAN_FROBNICATE is not a variable Guardian reads: it is ignored",
		"GUARDIAN_LOG_LEVLE is not a variable Guardian reads: it is ignored (did you mean GUARDIAN_LOG_LEVEL?)",
		"GUARDIAN_STRIPE_SECRET is not a variable Guardian reads: it is ignored (did you mean GUARDIAN_STRIPE_SECRETS?)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("settings.Unknown =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestConfigTimings: the timing rules are fulfilment's (CheckTimings); the
// configuration names its variables around them.
func TestConfigTimings(t *testing.T) {
	t.Parallel()
	_, err := ConfigFromEnv(production(map[string]string{"GUARDIAN_CONNECTOR_TIMEOUT": "60s", "GUARDIAN_DISPATCH_LEASE": "70s", "GUARDIAN_RECONCILE_GRACE": "30s"}))
	if err == nil {
		t.Fatal("a lease shorter than the timeout and its record margin was accepted")
	}
	for _, want := range []string{"GUARDIAN_DISPATCH_LEASE", "dispatch lease (1m10s) must exceed the connector timeout (1m0s)", "reconcile grace (30s) must be at least the connector timeout"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestConfigMode: test money never meets a live deployment's backfill, and
// the API key never travels in the clear.
func TestConfigMode(t *testing.T) {
	t.Parallel()
	cfg, err := ConfigFromEnv(production(nil))
	if err != nil {
		t.Fatal(err)
	}
	// Live by default outside the development profile: a test-mode event
	// is refused.
	body := []byte(`{"id":"evt_1","object":"event","type":"customer.created","livemode":false,"data":{"object":{}}}`)
	if _, err := served(t, cfg, "stripe").Verify(providertest.SignStripe(body, stripeA, time.Now()), body, time.Now()); !errors.Is(err, provider.ErrMode) {
		t.Errorf("a test-mode event at the default mode: %v, want ErrMode", err)
	}
	for _, tt := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"GUARDIAN_MODE": "sandbox"}, "GUARDIAN_MODE: want live or test"},
		{map[string]string{"GUARDIAN_STRIPE_API_KEY": "sk_test_abc"}, "test-mode key in a live deployment"},
		{map[string]string{"GUARDIAN_MODE": "test", "GUARDIAN_STRIPE_API_KEY": "rk_live_abc"}, "live-mode key in a test deployment"},
		{map[string]string{"GUARDIAN_STRIPE_API_KEY": "rk_live_abc", "GUARDIAN_STRIPE_API_URL": "http://stripe.internal"}, "want an https URL"},
	} {
		_, err := ConfigFromEnv(production(tt.env))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want %q", tt.env, err, tt.want)
		}
	}
	for _, ok := range []map[string]string{
		{"GUARDIAN_STRIPE_API_KEY": "rk_live_abc", "GUARDIAN_STRIPE_API_URL": "https://api.stripe.com"},
		{"GUARDIAN_MODE": "test", "GUARDIAN_STRIPE_API_KEY": "sk_test_abc", "GUARDIAN_STRIPE_API_URL": "http://127.0.0.1:8111"},
	} {
		if _, err := ConfigFromEnv(production(ok)); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
}

// TestEachProviderIsServedWhenItsSettingsAre: Stripe and Standard
// Webhooks always, every other registered provider once its secrets are
// set, each built from its own settings.
func TestEachProviderIsServedWhenItsSettingsAre(t *testing.T) {
	t.Parallel()
	// Every provider's sample settings at once (providertest): no list of
	// providers here.
	vars := map[string]string{}
	for _, sample := range providertest.Samples() {
		maps.Copy(vars, sample.Settings)
	}
	delete(vars, "GUARDIAN_MODE")
	cfg, err := ConfigFromEnv(production(vars))
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, d := range provider.Drivers() {
		all = append(all, d.Name)
	}
	if got := servedNames(cfg); !slices.Equal(got, all) || len(all) < 7 {
		t.Errorf("served %v, registered %v", got, all)
	}
}

// TestPayPalWithoutCredentialsSaysWhatItTrusts: a deployment serving PayPal
// without API credentials warns at start that a delivered body is trusted
// on a CRC32; with them it confirms deliveries, and says nothing.
func TestPayPalWithoutCredentialsSaysWhatItTrusts(t *testing.T) {
	t.Parallel()
	for _, withAPI := range []bool{false, true} {
		env := map[string]string{"GUARDIAN_PAYPAL_WEBHOOK_IDS": "WH1"}
		if withAPI {
			env["GUARDIAN_PAYPAL_CLIENT_ID"], env["GUARDIAN_PAYPAL_CLIENT_SECRET"] = "client", "paypal-client-secret-0123"
		}
		cfg, err := ConfigFromEnv(production(env))
		if err != nil {
			t.Fatal(err)
		}
		var confirms bool
		if pp, ok := served(t, cfg, "paypal").(*provider.PayPal); ok {
			confirms = pp.Confirms()
		}
		logs := strings.Join(cfg.Warnings, "\n")
		warned := strings.Contains(logs, "CRC32")
		if confirms != withAPI || warned == withAPI {
			t.Errorf("credentials %v: confirms %v, warned %v", withAPI, confirms, warned)
		}
		if strings.Contains(logs, "paypal-client-secret-0123") {
			t.Error("the log shows the secret")
		}
	}
}
