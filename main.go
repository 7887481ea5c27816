// Command guardian turns payment providers' webhooks into fulfilment that
// happens exactly once. Run `guardian help` for its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/guardian-pay/guardian/app/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
