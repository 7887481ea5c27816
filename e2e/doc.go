// Package e2e holds black-box suites: they build the guardian binary, run it
// against the real Postgres and Redis, talk to it only over HTTP and signals,
// and count what reaches a fake connector.
package e2e
