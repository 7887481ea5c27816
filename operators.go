package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/guardian-pay/guardian/app/operators"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/web/client"
)

const operatorsUsage = `usage:
  guardian operators add NAME         make a credential for NAME and print its token once
  guardian operators list             every credential, revoked ones included
  guardian operators revoke NAME [--id N]  revoke NAME's credentials (or only credential N); their sessions end
  guardian operators signout NAME     end NAME's dashboard sessions; the credentials stay valid
To rotate a credential without a gap: add a new one for the same name, switch to it, revoke the old by --id.
`

// runOperators manages named operator credentials directly in the database
// (DATABASE_URL): whoever may run it there already holds the keys.
func runOperators(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, operatorsUsage)
		return ExitUsage
	}
	verb := args[0]
	want := map[string]int{"add": 1, "list": 0, "revoke": 1, "signout": 1}
	n, known := want[verb]
	if !known {
		fmt.Fprint(stderr, operatorsUsage)
		return ExitUsage
	}
	fs := flag.NewFlagSet("operators "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var id *int64
	if verb == "revoke" {
		id = fs.Int64("id", 0, "revoke only this credential")
	}
	fs.Usage = func() {
		for _, line := range strings.Split(operatorsUsage, "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "guardian operators "+verb) {
				fmt.Fprintln(fs.Output(), "usage:\n"+line)
			}
		}
		fs.PrintDefaults()
	}
	if len(args) > 1 && isHelp(args[1]) {
		fs.SetOutput(stdout)
		fs.Usage()
		return ExitOK
	}
	pos, err := client.ParseInterspersed(fs, args[1:])
	if err != nil {
		return usageExit(err)
	}
	if len(pos) != n {
		fs.Usage()
		return ExitUsage
	}
	pool, err := openDatabase(ctx, getenv)
	if err != nil {
		return fail(stderr, ExitFailure, err)
	}
	defer pool.Close()
	ops := operators.New(db.New(pool), nil)
	switch verb {
	case "add":
		token, c, err := ops.Add(ctx, pos[0])
		if err != nil {
			return fail(stderr, ExitUsage, err)
		}
		fmt.Fprintf(stderr, "credential %d for operator %s; the token below is shown once and stored only as a hash:\n", c.ID, c.Operator)
		fmt.Fprintln(stdout, token)
		return ExitOK
	case "list":
		creds, err := ops.List(ctx)
		if err != nil {
			return fail(stderr, ExitFailure, err)
		}
		tw := table(stdout)
		fmt.Fprintln(tw, "ID\tOPERATOR\tCREATED\tSTATUS")
		for _, c := range creds {
			status := "active"
			if c.RevokedAt != nil {
				status = "revoked " + c.RevokedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", c.ID, c.Operator, c.CreatedAt.UTC().Format(time.RFC3339), status)
		}
		_ = tw.Flush()
		return ExitOK
	case "revoke":
		n, err := ops.Revoke(ctx, pos[0], *id)
		if err != nil {
			return fail(stderr, ExitFailure, err)
		}
		if n == 0 {
			which := "credential"
			if *id != 0 {
				which = fmt.Sprintf("credential %d", *id)
			}
			fmt.Fprintf(stderr, "guardian: %s has no active %s\n", pos[0], which)
			return ExitNotFound
		}
		fmt.Fprintf(stdout, "revoked %d credential(s) of %s; their sessions end at their next request\n", n, pos[0])
		return ExitOK
	default: // signout
		n, err := ops.EndSessions(ctx, pos[0])
		if err != nil {
			return fail(stderr, ExitFailure, err)
		}
		if n == 0 {
			fmt.Fprintf(stderr, "guardian: %s has no active credential\n", pos[0])
			return ExitNotFound
		}
		fmt.Fprintf(stdout, "ended the dashboard sessions of %s\n", pos[0])
		return ExitOK
	}
}
