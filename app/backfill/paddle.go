package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/guardian-pay/guardian/app/provider"
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
	api      *apiClient
	key      string
	provider *provider.Paddle
	cfg      Config
}

// NewPaddle returns a backfill from Paddle's events API.
func NewPaddle(cfg PaddleConfig) (*Backfill, error) {
	if cfg.APIKey == "" || cfg.Provider == nil || cfg.Logger == nil {
		return nil, errors.New("backfill paddle: API key, provider and logger are required")
	}
	api, err := newAPIClient("paddle", cmp.Or(cfg.APIURL, "https://api.paddle.com"))
	if err != nil {
		return nil, err
	}
	return New(&paddleSource{api: api, key: cfg.APIKey, provider: cfg.Provider, cfg: cfg.Config.withDefaults()}, cfg.Config)
}

func (s *paddleSource) Provider() string         { return "paddle" }
func (s *paddleSource) Throttled(err error) bool { return throttled(err) }

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
		if err := s.api.do(ctx, "GET", next, "Bearer "+s.key, nil, &page); err != nil {
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
