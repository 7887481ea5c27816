package wiring

import (
	"strings"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		cfg, err := ConfigFromEnv(envOf(map[string]string{
			"GUARDIAN_STRIPE_SECRETS": "whsec_a, whsec_b", "GUARDIAN_STANDARD_SECRETS": "whsec_c whsec_d",
			"GUARDIAN_CONNECTOR_URL": "http://c", "GUARDIAN_CONNECTOR_SECRET": "whsec_e",
			"GUARDIAN_ADMIN_TOKEN": "an-operator-token-1, an-operator-token-2",
		}))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Addr != ":8080" || cfg.DatabaseURL != DefaultDatabaseURL || cfg.ConnectorTimeout != 30*time.Second ||
			cfg.DispatchLease != 5*time.Minute || cfg.SweepInterval != 30*time.Second || cfg.MaxBodyBytes != 1<<20 ||
			!cfg.Migrate || cfg.Dev || cfg.LogFormat != "json" || cfg.RedisURL != "" {
			t.Errorf("unexpected defaults: %+v", cfg)
		}
		if got := strings.Join(cfg.StripeSecrets, "|"); got != "whsec_a|whsec_b" {
			t.Errorf("stripe secrets = %q", got)
		}
		if got := strings.Join(cfg.StandardSecrets, "|"); got != "whsec_c|whsec_d" {
			t.Errorf("standard secrets = %q", got)
		}
		if !cfg.API || len(cfg.AdminTokens) != 2 || cfg.ReconcileInterval != time.Minute {
			t.Errorf("api config: %+v", cfg)
		}
	})

	t.Run("RefusesWithoutSecretsOrConnector", func(t *testing.T) {
		t.Parallel()
		_, err := ConfigFromEnv(envOf(map[string]string{"GUARDIAN_STRIPE_SECRETS": " , "}))
		for _, want := range []string{"GUARDIAN_STRIPE_SECRETS is empty", "GUARDIAN_STANDARD_SECRETS is empty", "GUARDIAN_CONNECTOR_URL is empty", "GUARDIAN_ADMIN_TOKEN is empty"} {
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
		if cfg.StripeSecrets[0] != "whsec_real" || cfg.StandardSecrets[0] != provider.DevStandardSecret || cfg.LogFormat != "text" {
			t.Errorf("dev profile: %+v", cfg)
		}
	})
}

func TestConfigAPIOff(t *testing.T) {
	t.Parallel()
	_, err := ConfigFromEnv(envOf(map[string]string{
		"GUARDIAN_STRIPE_SECRETS": "whsec_a", "GUARDIAN_STANDARD_SECRETS": "whsec_c",
		"GUARDIAN_CONNECTOR_URL": "http://c", "GUARDIAN_CONNECTOR_SECRET": "whsec_e", "GUARDIAN_API": "false",
	}))
	if err != nil {
		t.Fatalf("API off needs no token: %v", err)
	}
	_, err = ConfigFromEnv(envOf(map[string]string{
		"GUARDIAN_STRIPE_SECRETS": "whsec_a", "GUARDIAN_STANDARD_SECRETS": "whsec_c",
		"GUARDIAN_CONNECTOR_URL": "http://c", "GUARDIAN_CONNECTOR_SECRET": "whsec_e", "GUARDIAN_ADMIN_TOKEN": "short",
	}))
	if err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("short token accepted: %v", err)
	}
}
