package provider

import (
	"fmt"
	"net/url"
	"time"

	"github.com/guardian-pay/guardian/app/registry"
	"github.com/guardian-pay/guardian/app/settings"
)

// Driver is a provider as it registers itself, the way database/sql
// drivers do: each provider's file registers one in its init, and nothing
// else in Guardian lists providers.
type Driver struct {
	// Name is the provider's name: its route (/webhooks/<Name>) and its
	// events' provider in storage.
	Name string
	// Open reads the provider's settings from env and returns the provider
	// they configure, or nil and no error when they do not ask for it (the
	// provider is not served). Its error, or a problem it records in env
	// (env.Fail), names the variable, never a secret's value.
	Open func(env *settings.Env, c Common) (Provider, error)
	// Secrets is the setting holding the provider's signing secrets, for
	// the tools that sign sample deliveries (`guardian demo`, `guardian
	// bench`); nil where they are not one list (PayPal's certificates).
	Secrets *settings.Var[[]string]
	// DevSecret is the development profile's public secret, where the
	// provider is served without one there (Stripe, Standard Webhooks).
	DevSecret string
}

// SigningSecret returns the first signing secret of the named provider
// in env, or the development profile's where none is set (the tools sign
// with it for a local server).
func SigningSecret(env *settings.Env, name string) string {
	d, ok := Lookup(name)
	if !ok || d.Secrets == nil {
		return ""
	}
	if s := d.Secrets.Read(env); len(s) > 0 {
		return s[0]
	}
	return d.DevSecret
}

// Common is what every provider reads besides its own settings.
type Common struct {
	// Mode is the money the deployment serves.
	Mode Mode
	// Tolerance bounds signed timestamps, both ways.
	Tolerance time.Duration
	// Dev is the development profile: public development secrets fill
	// what is missing, and secrets' strength is not checked.
	Dev bool
}

var drivers registry.Of[Driver]

// Register makes a provider known. It panics when the name is taken or the
// driver has no Open: both are programming errors.
func Register(d Driver) {
	if d.Open == nil {
		panic("provider: Register " + d.Name + " without Open")
	}
	drivers.Register(d.Name, d)
}

// Drivers returns every registered provider's driver, by name.
func Drivers() []Driver { return drivers.All() }

// Lookup returns the named provider's driver.
func Lookup(name string) (Driver, bool) { return drivers.Lookup(name) }

// The settings every provider shares.
var (
	modeSetting = settings.OneOf(settings.Setting{
		Name: "GUARDIAN_MODE", Default: "`live` (`test` with `GUARDIAN_DEV=1`)",
		Doc: "the money this deployment serves: events whose own flag says the other mode are refused (400, reason `mode`), and an API key of the other mode is refused at start",
	}, "", string(ModeLive), string(ModeTest))
	toleranceSetting = settings.Duration(settings.Setting{
		Name: "GUARDIAN_TIMESTAMP_TOLERANCE", Default: "`300s`", Doc: "signed timestamp tolerance, both ways",
	}, DefaultTolerance)
)

// ReadCommon reads the settings every provider shares; dev is the
// development profile, whose mode defaults to test.
func ReadCommon(env *settings.Env, dev bool) Common {
	c := Common{Mode: Mode(modeSetting.Read(env)), Tolerance: toleranceSetting.Read(env), Dev: dev}
	if c.Mode == "" {
		c.Mode = ModeLive
		if dev {
			c.Mode = ModeTest
		}
	}
	return c
}

// Open returns every provider the settings in env configure, by name. A
// problem with any provider's settings is recorded in env.
func Open(env *settings.Env, c Common) []Provider {
	var out []Provider
	for _, d := range Drivers() {
		switch p, err := d.Open(env, c); {
		case err != nil:
			env.Fail(err)
		case p != nil:
			out = append(out, p)
		}
	}
	return out
}

// checkSecrets records in env the first of values that check refuses,
// outside the development profile, and any that is a published
// development constant.
func checkSecrets(env *settings.Env, c Common, name string, values []string, check func(string) error) {
	if c.Dev {
		return
	}
	for i, v := range values {
		if v == DevStripeSecret || v == DevStandardSecret {
			env.Fail(fmt.Errorf("%s holds a public development constant: it is published in Guardian's source; generate a secret of your own", name))
			return
		}
		if err := check(v); err != nil {
			env.Fail(fmt.Errorf("%s: secret %d %w", name, i+1, err))
			return
		}
	}
}

// APIURL returns the provider API's URL: set, as it is, or the default
// for the deployment's mode (live, or sandbox in test mode). A set URL
// must be https outside the development profile, or http to a loopback
// host (a local fake or proxy) whose traffic never leaves the machine: the
// credentials travel with every request. A problem is recorded in env.
func APIURL(env *settings.Env, c Common, v *settings.Var[string], live, sandbox string) string {
	set := v.Read(env)
	if set == "" {
		if c.Mode == ModeTest {
			return sandbox
		}
		return live
	}
	if u, err := url.Parse(set); !c.Dev && (err != nil || u.Host == "" || (u.Scheme != "https" && !(u.Scheme == "http" && settings.Loopback(u.Hostname())))) {
		env.Fail(fmt.Errorf("%s: want an https URL outside the development profile (http only to a loopback address): the credentials travel with every request", v.Name))
	}
	return set
}
