package faultproxy_test

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/db/dbtest/faultproxy"
)

// echo is a target that writes back each line it reads.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// roundTrip dials addr, sends a line and reads it back.
func roundTrip(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return io.ErrUnexpectedEOF
	}
	return nil
}

// While down, the proxy keeps its port: no other socket can take it, new
// connections are reset and live ones cut, and Up serves the same address
// again. Close lets the port go.
func TestDownKeepsThePort(t *testing.T) {
	p, err := faultproxy.New(echo(t))
	require.NoError(t, err)
	addr := p.Addr()
	require.NoError(t, roundTrip(addr))

	live, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer live.Close()
	_, err = live.Write([]byte("a\n"))
	require.NoError(t, err)
	_, err = bufio.NewReader(live).ReadString('\n')
	require.NoError(t, err)

	p.Down()
	_ = live.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err = live.Read(make([]byte, 1))
	require.Error(t, err, "a live connection is cut")
	for range 3 {
		require.Error(t, roundTrip(addr), "a new connection gets no answer while down")
	}
	_, err = net.Listen("tcp", addr)
	require.Error(t, err, "the port stays the proxy's while it is down")

	require.NoError(t, p.Up())
	require.Error(t, p.Up(), "up twice")
	require.NoError(t, roundTrip(addr), "served again on the same address")

	p.Close()
	require.Error(t, p.Up(), "closed for good")
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err, "Close lets the port go")
	_ = ln.Close()
}
