// Package faultproxy is a TCP proxy for tests that need a dependency to
// vanish and come back: it forwards connections to a target and can refuse
// new ones and cut live ones on demand, on the same address throughout.
package faultproxy

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards TCP connections from Addr to a target.
type Proxy struct {
	target string
	// latency is added before each chunk is forwarded, in nanoseconds.
	latency atomic.Int64
	// cut is what CutAfter armed, if anything.
	cutMu sync.Mutex
	cut   *cutArm

	mu       sync.Mutex
	addr     string
	listener net.Listener
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// New starts a proxy on a free loopback port in front of target.
func New(target string) (*Proxy, error) {
	p := &Proxy{target: target, conns: map[net.Conn]struct{}{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

// Addr is the address clients dial.
func (p *Proxy) Addr() string { return p.addr }

func (p *Proxy) serve(ln net.Listener) {
	p.listener = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *Proxy) forward(client net.Conn) {
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	if p.listener == nil { // cut while dialling
		p.mu.Unlock()
		_ = client.Close()
		_ = upstream.Close()
		return
	}
	p.conns[client] = struct{}{}
	p.conns[upstream] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	// dropAnswer is set once a client message matched CutAfter's pattern:
	// the server's next answer is dropped and the client's connection is
	// reset instead, so the server has acted and the client never hears.
	var dropAnswer atomic.Bool
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if d := p.latency.Load(); d > 0 {
					time.Sleep(time.Duration(d))
				}
				if src == upstream && dropAnswer.Load() {
					// The answer to the matched message: never delivered.
					if tc, ok := client.(*net.TCPConn); ok {
						_ = tc.SetLinger(0)
					}
					_ = client.Close()
					_ = upstream.Close()
					break
				}
				if src == client && p.cutMatches(buf[:n]) {
					// Marked before it is forwarded, so that no answer
					// can slip through between the two: the server acts
					// on it, and its answer is dropped when it comes.
					dropAnswer.Store(true)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(upstream, client)
	go pipe(client, upstream)
	<-done
	_ = client.Close()
	_ = upstream.Close()
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, upstream)
	p.mu.Unlock()
}

// Down stops accepting (new connections are refused) and resets every live
// connection, as a dependency that dies does.
func (p *Proxy) Down() {
	p.mu.Lock()
	ln := p.listener
	p.listener = nil
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
	p.wg.Wait()
}

// SetLatency delays every chunk forwarded in either direction by d (0 turns
// it off): a slow network or a slow server.
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Cut resets every live connection and keeps accepting new ones: a network
// blip, landing wherever each conversation happens to be (before a
// statement, or between a COMMIT and its answer).
func (p *Proxy) Cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}

// CutAfter arms the proxy to cut the connection of each of the next n
// client messages that contain pattern, in any case, once the server
// answers it: the message is forwarded, the server acts on it and
// answers, and the answer is dropped and the client's connection reset.
// For Postgres, pattern "commit" loses a COMMIT's answer after the server
// committed, whether the client spells it COMMIT or commit.
//
// The cuts land when such messages come, which may be well after
// CutAfter returns: the channel it returns is closed once the n-th is
// made, so that a caller timing the fault can wait for its end. A new
// CutAfter, or Disarm, drops what is left of the last one.
func (p *Proxy) CutAfter(pattern []byte, n int) <-chan struct{} {
	arm := &cutArm{pattern: bytes.ToLower(pattern), left: n, done: make(chan struct{})}
	if n <= 0 {
		close(arm.done)
	}
	p.cutMu.Lock()
	p.cut = arm
	p.cutMu.Unlock()
	return arm.done
}

// Disarm drops the cuts CutAfter armed and has not made.
func (p *Proxy) Disarm() {
	p.cutMu.Lock()
	p.cut = nil
	p.cutMu.Unlock()
}

// cutArm is one CutAfter: the pattern, in lower case, and the cuts left.
type cutArm struct {
	pattern []byte
	left    int
	done    chan struct{}
}

// cutMatches says whether a client message is one the armed CutAfter
// cuts, counting it if so.
func (p *Proxy) cutMatches(msg []byte) bool {
	p.cutMu.Lock()
	defer p.cutMu.Unlock()
	arm := p.cut
	if arm == nil || arm.left <= 0 || !bytes.Contains(bytes.ToLower(msg), arm.pattern) {
		return false
	}
	arm.left--
	if arm.left == 0 {
		close(arm.done)
		p.cut = nil
	}
	return true
}

// Up accepts connections again on the same address.
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener != nil {
		return errors.New("faultproxy: already up")
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.serve(ln)
	return nil
}

// Close takes the proxy down for good.
func (p *Proxy) Close() { p.Down() }
