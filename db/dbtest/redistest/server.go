package redistest

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a private redis-server owned by one test, on its own port, that
// the test may snapshot, stop and restart: things a shared server must not
// suffer.
type Server struct {
	Addr string
	dir  string
	cmd  *exec.Cmd
}

// StartServer starts redis-server on a free loopback port with a data
// folder in t.TempDir(), and stops it when the test ends.
func StartServer(t testing.TB) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	s := &Server{Addr: addr, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(func() { s.kill() })
	return s
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--dbfilename", "dump.rdb", "--save", "", "--appendonly", "no", "--enable-debug-command", "local")
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start redis-server (is it installed?): %v", err)
	}
	c := s.Client(t)
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("private redis-server on %s did not answer", s.Addr)
		}
		time.Sleep(10 * time.Millisecond) // polling a process that is starting
	}
}

// Client returns a new client on the server.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	return redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return fmt.Sprintf("redis://%s/0", s.Addr) }

// Snapshot writes the dataset to disk now (SAVE).
func (s *Server) Snapshot(t testing.TB) {
	t.Helper()
	c := s.Client(t)
	defer c.Close()
	if err := c.Save(context.Background()).Err(); err != nil {
		t.Fatalf("redis SAVE: %v", err)
	}
}

// RestartFromSnapshot kills the server without saving and starts it again,
// so it loads the last snapshot: everything written since is lost.
func (s *Server) RestartFromSnapshot(t testing.TB) {
	t.Helper()
	s.kill()
	s.start(t)
}

func (s *Server) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}
