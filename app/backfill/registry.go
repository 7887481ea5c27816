package backfill

import (
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/registry"
	"github.com/guardian-pay/guardian/app/settings"
)

// Driver is a provider's backfill as it registers itself, in the file of
// its Source: only providers with an events API have one.
type Driver struct {
	// Provider names the provider whose events the backfill lists.
	Provider string
	// Needs says what the backfill needs set, for `guardian backfill`
	// asked of one that is not configured.
	Needs string
	// Open reads the backfill's settings from env. When they are set it
	// returns how to make the backfill of p, the served provider of that
	// name (nil when the provider is not served: an error, then, since the
	// backfill feeds its rules); nil and no error when they are unset. An
	// error names the variable, never a credential.
	Open func(env *settings.Env, c provider.Common, p provider.Provider) (Maker, error)
}

// Maker makes a backfill once the domain it feeds is built.
type Maker func(Config) (*Backfill, error)

var drivers registry.Of[Driver]

// Register makes a provider's backfill known. It panics when the
// provider already has one, or the driver has no Open.
func Register(d Driver) {
	if d.Open == nil {
		panic("backfill: Register " + d.Provider + " without Open")
	}
	drivers.Register(d.Provider, d)
}

// Drivers returns every registered backfill's driver, by provider.
func Drivers() []Driver { return drivers.All() }

// Lookup returns the backfill driver of the named provider.
func Lookup(name string) (Driver, bool) { return drivers.Lookup(name) }

// Open returns the makers of every backfill the settings in env configure,
// by provider, for the served providers. Problems are recorded in env.
func Open(env *settings.Env, c provider.Common, served []provider.Provider) map[string]Maker {
	out := map[string]Maker{}
	for _, d := range Drivers() {
		var p provider.Provider
		for _, s := range served {
			if s.Name() == d.Provider {
				p = s
			}
		}
		switch m, err := d.Open(env, c, p); {
		case err != nil:
			env.Fail(err)
		case m != nil:
			out[d.Provider] = m
		}
	}
	return out
}

// The backfills' shared settings.
var (
	intervalSetting = settings.Duration(settings.Setting{
		Name: "GUARDIAN_BACKFILL_INTERVAL", Default: "`15m`",
		Doc: "how often the leader backfills from each provider with API credentials (at least `1m`; `GUARDIAN_STRIPE_BACKFILL_INTERVAL` is its older name)",
	}, DefaultInterval)
	oldIntervalSetting = settings.Duration(settings.Setting{
		Name: "GUARDIAN_STRIPE_BACKFILL_INTERVAL", Default: "unset",
		Doc: "the older name of `GUARDIAN_BACKFILL_INTERVAL`, read when that is unset",
	}, DefaultInterval)
)

// Interval reads how often the leader backfills.
func Interval(env *settings.Env) time.Duration {
	if intervalSetting.IsSet(env) {
		return intervalSetting.Read(env)
	}
	return oldIntervalSetting.Read(env)
}
