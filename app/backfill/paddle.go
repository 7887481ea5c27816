package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
	"github.com/guardian-pay/guardian/app/settings"
)

// PaddleConfig configures a Paddle Billing backfill.
type PaddleConfig struct {
	// APIKey is a Paddle API key that may read events. Required; never
	// logged.
	APIKey string
	// APIURL is Paddle's API: https://api.paddle.com (the default), or
	// https://sandbox-api.paddle.com for a sandbox; tests point it at a
	// fake.
	APIURL string
	// Provider applies the payment rules.
	Provider *provider.Paddle
	Config
}

// paddleSource lists Paddle's GET /events, newest first.
type paddleSource struct {
	api      *provider.API
	key      string
	provider *provider.Paddle
	cfg      Config
}

// NewPaddle returns a backfill from Paddle's events API.
func NewPaddle(cfg PaddleConfig) (*Backfill, error) {
	if cfg.APIKey == "" || cfg.Provider == nil || cfg.Logger == nil {
		return nil, errors.New("backfill paddle: API key, provider and logger are required")
	}
	api, err := provider.NewAPI("paddle", cmp.Or(cfg.APIURL, PaddleAPIURL))
	if err != nil {
		return nil, err
	}
	return New(&paddleSource{api: api, key: cfg.APIKey, provider: cfg.Provider, cfg: cfg.Config.withDefaults()}, cfg.Config)
}

func (s *paddleSource) Provider() string         { return "paddle" }
func (s *paddleSource) Throttled(err error) bool { return provider.Throttled(err) }

// paddlePage is one page of GET /events.
type paddlePage struct {
	Data []json.RawMessage `json:"data"`
	Meta struct {
		Pagination struct {
			Next    string `json:"next"`
			HasMore bool   `json:"has_more"`
		} `json:"pagination"`
	} `json:"meta"`
}

// List pages through Paddle's events, newest first (Paddle's ids order
// them by time), until one happened before from. Only the types the rules
// read are taken: the fulfilling one and the adjustments.
func (s *paddleSource) List(ctx context.Context, from time.Time, accept func(provider.Event) error) error {
	next := "/events?order_by=id%5BDESC%5D&per_page=200"
	for next != "" {
		var page paddlePage
		if err := s.api.Do(ctx, "GET", next, "Bearer "+s.key, nil, &page); err != nil {
			return err
		}
		for _, raw := range page.Data {
			var head struct {
				ID         string    `json:"event_id"`
				Type       string    `json:"event_type"`
				OccurredAt time.Time `json:"occurred_at"`
			}
			if err := json.Unmarshal(raw, &head); err != nil {
				s.cfg.Logger.WarnContext(ctx, "backfill: Paddle listed an event Guardian cannot read; skipped", "error", err)
				continue
			}
			if head.OccurredAt.Before(from) {
				return nil // older than the window: so is the rest
			}
			if !slices.Contains(provider.PaddleRuleTypes, head.Type) {
				continue
			}
			ev, err := s.provider.Read(raw)
			if err != nil {
				s.cfg.Logger.WarnContext(ctx, "backfill: Paddle listed an event Guardian cannot read; skipped", "event_id", head.ID, "error", err)
				continue
			}
			if err := accept(ev); err != nil {
				return err
			}
		}
		next = ""
		if page.Meta.Pagination.HasMore {
			next = page.Meta.Pagination.Next
		}
	}
	return nil
}

// Paddle's API, live and sandbox.
const (
	PaddleAPIURL        = "https://api.paddle.com"
	PaddleSandboxAPIURL = "https://sandbox-api.paddle.com"
)

// The Paddle backfill's settings, and its registration.
var (
	paddleAPIKey = settings.String(settings.Setting{
		Name: "GUARDIAN_PADDLE_API_KEY", Default: "unset (backfill off)", Secret: true,
		Doc: "a Paddle API key that may read events: turns on the Paddle backfill and `guardian backfill paddle`",
	}, "")
	paddleAPIURL = settings.String(settings.Setting{
		Name: "GUARDIAN_PADDLE_API_URL", Default: "`https://api.paddle.com` (`https://sandbox-api.paddle.com` in test mode)",
		Doc: "Paddle's API, for the backfill",
	}, "")
)

func init() {
	Register(Driver{Provider: "paddle", Needs: "set GUARDIAN_PADDLE_API_KEY to a Paddle API key that may read events (and GUARDIAN_PADDLE_SECRETS)", Open: openPaddle})
}

// openPaddle reads the Paddle backfill's settings: it needs the Paddle
// provider served, and its key and API of the deployment's mode, so a
// live deployment never backfills sandbox money.
func openPaddle(env *settings.Env, c provider.Common, p provider.Provider) (Maker, error) {
	key := paddleAPIKey.Read(env)
	apiURL := provider.APIURL(env, c, paddleAPIURL, PaddleAPIURL, PaddleSandboxAPIURL)
	paddle, _ := p.(*provider.Paddle)
	switch {
	case key == "":
		return nil, nil
	case paddle == nil:
		return nil, errors.New("GUARDIAN_PADDLE_API_KEY needs GUARDIAN_PADDLE_SECRETS: the backfill feeds the Paddle provider's rules")
	case c.Mode == provider.ModeLive && (strings.HasPrefix(key, "pdl_sdbx_") || strings.Contains(apiURL, "sandbox")):
		return nil, errors.New("GUARDIAN_PADDLE_API_KEY or GUARDIAN_PADDLE_API_URL is the sandbox's in a live deployment: the backfill would fetch sandbox money (set GUARDIAN_MODE=test for a test deployment)")
	case c.Mode == provider.ModeTest && (strings.HasPrefix(key, "pdl_live_") || apiURL == PaddleAPIURL):
		return nil, errors.New("GUARDIAN_PADDLE_API_KEY or GUARDIAN_PADDLE_API_URL is live in a test deployment (GUARDIAN_MODE=test)")
	}
	return func(cfg Config) (*Backfill, error) {
		return NewPaddle(PaddleConfig{APIKey: key, APIURL: apiURL, Provider: paddle, Config: cfg})
	}, nil
}
