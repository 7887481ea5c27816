// Package jobstest builds what tests of River's side need, once: the
// fulfilment domain over a test database, Guardian's insert-only enqueuer
// and its working River client, with test-sized timeouts. Package jobs
// tests its adapters with it; package web drives real dispatch with it.
package jobstest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/guardian-pay/guardian/app/connector"
	"github.com/guardian-pay/guardian/app/fulfilment"
	"github.com/guardian-pay/guardian/app/lock"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
	"github.com/guardian-pay/guardian/jobs"
)

// Options adjusts the configurations before anything is built; each may be
// nil.
type Options struct {
	Fulfilment func(*fulfilment.Config)
	Jobs       func(*jobs.Config)
}

// Stack is the domain and River over one test database.
type Stack struct {
	Service *fulfilment.Service
	Client  *jobs.Client
}

// New builds the stack on d with conn as the connector: a 300 ms connector
// timeout, a 20 s lease, River polling every 20 ms. The client is not
// started: call Start.
func New(t testing.TB, d *dbtest.DB, conn connector.Connector, o Options) *Stack {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	enqueuer, err := jobs.NewEnqueuer(d.Pool, logger)
	if err != nil {
		t.Fatalf("enqueuer: %v", err)
	}
	store := db.New(d.Pool)
	fcfg := fulfilment.Config{
		Store: store, Enqueuer: enqueuer, Logger: logger, Connector: conn,
		ConnectorTimeout: 300 * time.Millisecond, DispatchLease: 20 * time.Second,
	}
	if o.Fulfilment != nil {
		o.Fulfilment(&fcfg)
	}
	service, err := fulfilment.New(fcfg)
	if err != nil {
		t.Fatalf("fulfilment service: %v", err)
	}
	jcfg := jobs.Config{
		Pool: d.Pool, Logger: logger, Service: service, Locker: lock.Postgres{Store: store},
		FetchPollInterval: 20 * time.Millisecond,
	}
	if o.Jobs != nil {
		o.Jobs(&jcfg)
	}
	client, err := jobs.New(jcfg)
	if err != nil {
		t.Fatalf("river client: %v", err)
	}
	return &Stack{Service: service, Client: client}
}

// Start starts River and stops it when the test ends.
func (s *Stack) Start(t testing.TB) {
	t.Helper()
	if err := s.Client.Start(context.Background()); err != nil {
		t.Fatalf("start river: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Client.Stop(ctx); err != nil {
			t.Errorf("stop river: %v", err)
		}
	})
}
