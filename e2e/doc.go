// Package e2e holds black-box suites: they build the guardian binary, run it
// against the real Postgres and Redis, drive it over HTTP, signals and its
// CLI, and count what reaches a fake connector and what it stored in
// Postgres (and, for the chaos suites, through PgBouncer and replicas the
// suite starts itself).
package e2e
