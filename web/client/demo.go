package client

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/provider/providertest"
	"github.com/guardian-pay/guardian/app/state"
	"github.com/guardian-pay/guardian/web"
)

// DemoConfig is what `guardian demo` reads.
type DemoConfig struct {
	Config
	// StripeSecret and StandardSecret sign the sample deliveries: the
	// server's own, or the development profile's.
	StripeSecret, StandardSecret string
}

// Demo sends signed sample deliveries, duplicates and forgeries included,
// to a running development server, and shows through the operator API
// what became of them. It returns the process exit code.
func Demo(ctx context.Context, args []string, cfg DemoConfig, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.URL, "url", cmp.Or(cfg.URL, DefaultURL), "Guardian's base URL")
	if err := fs.Parse(args); err != nil {
		return UsageExit(err)
	}
	api, err := newAPI(cfg.Config)
	if err != nil {
		return Fail(stderr, ExitUsage, err)
	}
	run := randomID()
	pi, pay := "pi_demo_"+run, "pay_demo_"+run
	deliveries, err := demoDeliveries(run, pi, pay, cfg.StripeSecret, cfg.StandardSecret)
	if err != nil {
		fmt.Fprintf(stderr, "guardian demo: standard secret: %v\n", err)
		return ExitUsage
	}

	client := &http.Client{Timeout: 10 * time.Second}
	tw := Table(stdout)
	fmt.Fprintf(tw, "DELIVERY\tSTATUS\tANSWER\n")
	for _, d := range deliveries {
		if err := demoPost(ctx, client, tw, api.base, d.what, d.path, d.body, d.header); err != nil {
			_ = tw.Flush()
			fmt.Fprintf(stderr, "guardian demo: is `just run` serving at %s? %v\n", api.base, err)
			return ExitFailure
		}
	}
	_ = tw.Flush()

	fmt.Fprintf(stdout, "\nFulfilments (waiting for dispatch):\n")
	rows, err := demoSettled(ctx, api, []payment{{"stripe", pi}, {"standard", pay}}, 15*time.Second)
	if err != nil {
		fmt.Fprintf(stderr, "guardian demo: %v\n", err)
		return ExitFailure
	}
	tw = Table(stdout)
	fmt.Fprintf(tw, "PAYMENT\tFULFILMENT\tSTATE\tATTEMPT\n")
	fulfilled := 0
	for _, f := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", f.PaymentID, f.ID, f.State, f.Attempt)
		if f.State == state.Fulfilled {
			fulfilled++
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "\n%d deliveries, 2 payments, %d fulfilments, %d fulfilled.\n", len(deliveries), len(rows), fulfilled)
	if fulfilled != 2 || len(rows) != 2 {
		return ExitFailure
	}
	return demoRefund(ctx, client, api, cfg.StripeSecret, run, pi, stdout, stderr)
}

// payment names a payment of a provider.
type payment struct{ provider, id string }

// fulfilmentsOf lists the payment's fulfilments through the operator API.
func fulfilmentsOf(ctx context.Context, api *api, p payment) ([]web.Fulfilment, error) {
	var list web.FulfilmentList
	_, err := api.do(ctx, http.MethodGet, "/api/v1/fulfilments?"+url.Values{"provider": {p.provider}, "payment_id": {p.id}}.Encode(), nil, &list)
	return list.Fulfilments, err
}

// demoDelivery is one delivery the demo sends, and what it shows.
type demoDelivery struct {
	what, path, body string
	header           http.Header
}

// demoDeliveries are the demo's deliveries for one run: a Stripe purchase
// delivered three times and by a second event of the same purchase, an
// event that fulfils nothing, a Standard Webhooks payment twice, a forgery
// and a replay.
func demoDeliveries(run, pi, pay, stripeSecret, standardSecret string) ([]demoDelivery, error) {
	now := time.Now()
	checkout := fmt.Sprintf(`{"id":"evt_demo_cs_%s","object":"event","type":"checkout.session.completed","data":{"object":{"id":"cs_demo_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q}}}`, run, run, pi)
	// The same purchase's other event: the session's delayed-payment
	// success names the same payment intent, so it fulfils nothing more.
	// (payment_intent.succeeded does not fulfil by default: docs/design.md.)
	intent := fmt.Sprintf(`{"id":"evt_demo_async_%s","object":"event","type":"checkout.session.async_payment_succeeded","data":{"object":{"id":"cs_demo_%s","object":"checkout.session","mode":"payment","payment_status":"paid","payment_intent":%q}}}`, run, run, pi)
	customer := fmt.Sprintf(`{"id":"evt_demo_cus_%s","object":"event","type":"customer.created","data":{"object":{"id":"cus_demo_%s"}}}`, run, run)
	standard := fmt.Sprintf(`{"type":"payment.succeeded","data":{"payment_id":%q,"amount":4200}}`, pay)
	standardHeaders, err := providertest.SignStandard("msg_demo_"+run, []byte(standard), standardSecret, now)
	if err != nil {
		return nil, err
	}
	return []demoDelivery{
		{"stripe checkout.session.completed", "stripe", checkout, providertest.SignStripe([]byte(checkout), stripeSecret, now)},
		{"  same event again (provider retry)", "stripe", checkout, providertest.SignStripe([]byte(checkout), stripeSecret, now)},
		{"  and again", "stripe", checkout, providertest.SignStripe([]byte(checkout), stripeSecret, now)},
		{"stripe async_payment_succeeded, same payment", "stripe", intent, providertest.SignStripe([]byte(intent), stripeSecret, now)},
		{"stripe customer.created (does not fulfil)", "stripe", customer, providertest.SignStripe([]byte(customer), stripeSecret, now)},
		{"standard payment.succeeded", "standard", standard, standardHeaders},
		{"  same message again", "standard", standard, standardHeaders},
		{"forged: signed with the wrong secret", "stripe", intent, providertest.SignStripe([]byte(intent), "whsec_forged", now)},
		{"replayed: signed 10 minutes ago", "stripe", intent, providertest.SignStripe([]byte(intent), stripeSecret, now.Add(-10*time.Minute))},
	}, nil
}

// demoSettled waits, up to wait, until every payment has a fulfilment and
// none is pending or dispatching, and returns the payments' fulfilments as
// they are then.
func demoSettled(ctx context.Context, api *api, payments []payment, wait time.Duration) ([]web.Fulfilment, error) {
	deadline := time.Now().Add(wait)
	for {
		var rows []web.Fulfilment
		for _, p := range payments {
			fs, err := fulfilmentsOf(ctx, api, p)
			if err != nil {
				return nil, err
			}
			rows = append(rows, fs...)
		}
		settled := len(rows) == len(payments)
		for _, f := range rows {
			settled = settled && f.State != state.Pending && f.State != state.Dispatching
		}
		if settled || time.Now().After(deadline) {
			return rows, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoRefund refunds the Stripe payment in full, twice over (Stripe sends
// charge.refunded and refund.updated for one refund), and shows the one
// revocation that takes it back.
func demoRefund(ctx context.Context, client *http.Client, api *api, secret, run, pi string, stdout, stderr io.Writer) int {
	refunded := fmt.Sprintf(`{"id":"evt_demo_rf_%s","object":"event","type":"charge.refunded","data":{"object":{"id":"ch_demo_%s","object":"charge","payment_intent":%q,"refunded":true}}}`, run, run, pi)
	refund := fmt.Sprintf(`{"id":"evt_demo_re_%s","object":"event","type":"refund.updated","data":{"object":{"id":"re_demo_%s","object":"refund","payment_intent":%q,"status":"succeeded"}}}`, run, run, pi)
	fmt.Fprintf(stdout, "\nThe customer is refunded in full:\n")
	tw := Table(stdout)
	for _, d := range []struct{ what, body string }{{"stripe charge.refunded", refunded}, {"stripe refund.updated, same refund", refund}} {
		if err := demoPost(ctx, client, tw, api.base, d.what, "stripe", d.body, providertest.SignStripe([]byte(d.body), secret, time.Now())); err != nil {
			_ = tw.Flush()
			fmt.Fprintf(stderr, "guardian demo: %v\n", err)
			return ExitFailure
		}
	}
	_ = tw.Flush()
	deadline := time.Now().Add(15 * time.Second)
	for {
		fs, err := fulfilmentsOf(ctx, api, payment{"stripe", pi})
		if err != nil {
			fmt.Fprintf(stderr, "guardian demo: %v\n", err)
			return ExitFailure
		}
		var revocations []web.Fulfilment
		for _, f := range fs {
			if f.Action == state.Revoke {
				revocations = append(revocations, f)
			}
		}
		if (len(revocations) == 1 && revocations[0].State == state.Fulfilled) || time.Now().After(deadline) {
			tw := Table(stdout)
			fmt.Fprintf(tw, "PAYMENT\tACTION\tSTATE\tKEY\n")
			for _, f := range fs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.PaymentID, f.Action, f.State, f.IdempotencyKey)
			}
			_ = tw.Flush()
			fmt.Fprintf(stdout, "\n2 refund events, %d revocation: the payment was taken back once (GUARDIAN_REVOKE_ON).\n", len(revocations))
			if len(revocations) != 1 || revocations[0].State != state.Fulfilled {
				return ExitFailure
			}
			return ExitOK
		}
		select {
		case <-ctx.Done():
			return ExitFailure
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// demoPost sends one delivery to /webhooks/<path> and writes a row of
// what, the status and the answer.
func demoPost(ctx context.Context, client *http.Client, tw io.Writer, base, what, path, body string, header http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/webhooks/"+path, bytes.NewReader([]byte(body)))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	resp.Body.Close()
	fmt.Fprintf(tw, "%s\t%d\t%s\n", what, resp.StatusCode, strings.TrimSpace(string(answer)))
	return nil
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
