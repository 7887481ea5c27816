package faultproxy

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoed is a proxy in front of a target that answers each line it
// reads with the same line, and the lines the target read (what "the
// server acted" means here).
func echoed(t *testing.T) (*Proxy, chan string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	lines := make(chan string, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					lines <- strings.TrimSpace(line)
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	p, err := New(ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p, lines
}

// ask sends one line through a new connection to the proxy and returns
// its answer, or the error that took the answer away.
func ask(t *testing.T, p *Proxy, line string) (string, error) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	answer, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(answer), err
}

func TestCutAfterDropsTheAnswersOfTheNextMatches(t *testing.T) {
	p, lines := echoed(t)

	done := p.CutAfter([]byte("commit"), 2)
	answer, err := ask(t, p, "select 1")
	require.NoError(t, err, "a message without the pattern is answered")
	require.Equal(t, "select 1", answer)
	require.Equal(t, "select 1", <-lines)

	// Either case matches: pgx's commit and a pipelined COMMIT alike.
	for _, msg := range []string{"COMMIT", "begin; commit"} {
		select {
		case <-done:
			t.Fatalf("done before the cut of %q", msg)
		default:
		}
		_, err := ask(t, p, msg)
		require.Error(t, err, "%q reached the server, its answer did not reach the client", msg)
		require.Equal(t, msg, <-lines, "the server acted on %q", msg)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("done not closed after the second cut")
	}

	answer, err = ask(t, p, "commit")
	require.NoError(t, err, "the cuts are spent: a third match is answered")
	require.Equal(t, "commit", answer)
}

func TestDisarmDropsTheCutsLeft(t *testing.T) {
	p, lines := echoed(t)

	done := p.CutAfter([]byte("commit"), 3)
	p.Disarm()
	answer, err := ask(t, p, "COMMIT")
	require.NoError(t, err)
	require.Equal(t, "COMMIT", answer)
	require.Equal(t, "COMMIT", <-lines)
	select {
	case <-done:
		t.Fatal("a disarmed CutAfter made no cut and is not done")
	default:
	}

	select {
	case <-p.CutAfter([]byte("x"), 0):
	default:
		t.Fatal("a CutAfter of no cuts is done at once")
	}
}
