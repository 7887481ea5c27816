package dbtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// errNoDatabase tells a developer how to give the tests a database.
var errNoDatabase = errors.New("TEST_DATABASE_URL is unset and no Docker engine answers for testcontainers; " +
	"set TEST_DATABASE_URL to a Postgres server the tests may create databases on " +
	"(for example postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable, which `just test` sets), " +
	"or start Docker")

// startContainer starts a Postgres 15 container for the test process. The
// container outlives the process only until testcontainers' reaper removes it.
func startContainer() (string, error) {
	if !dockerAvailable() {
		return "", errNoDatabase
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("5432/tcp").WithStartupTimeout(time.Minute)),
	)
	if err != nil {
		return "", fmt.Errorf("%w (starting a container failed: %v)", errNoDatabase, err)
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}

func dockerAvailable() bool {
	if os.Getenv("DOCKER_HOST") != "" {
		return true
	}
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil
}
