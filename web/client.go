package web

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// ParseTrustedProxies parses proxy addresses, each a CIDR ("10.0.0.0/8") or
// a single IP.
func ParseTrustedProxies(list []string) ([]*net.IPNet, error) {
	var nets []*net.IPNet
	for _, item := range list {
		if !strings.Contains(item, "/") {
			ip := net.ParseIP(item)
			if ip == nil {
				return nil, fmt.Errorf("%q is neither an IP nor a CIDR", item)
			}
			bits := 128
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			nets = append(nets, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(item)
		if err != nil {
			return nil, fmt.Errorf("%q is neither an IP nor a CIDR", item)
		}
		nets = append(nets, n)
	}
	return nets, nil
}

// clientIP decides which address a request comes from. With no trusted
// proxies it is the TCP peer, and X-Forwarded-For is ignored: any client
// can write that header. With trusted proxies, X-Forwarded-For is read
// from the right, past the trusted hops, to the first address that is not
// one of them.
func clientIP(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// failureLimiter throttles failed credentials per client address: a token
// bucket of Burst failures that refills one every Every. Successes cost
// nothing, so an operator who types the token right is never slowed; a
// guesser gets Burst tries and then one per Every. It is per process: with
// n processes behind a balancer a guesser gets n times the rate, which
// stays hopeless against 128-bit tokens.
type failureLimiter struct {
	burst float64
	every time.Duration
	now   func() time.Time

	mu      sync.Mutex
	clients map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

// maxTrackedClients bounds the limiter's memory under an address-spraying
// attack; past it, fully refilled buckets are dropped first.
const maxTrackedClients = 10000

func newFailureLimiter(burst int, every time.Duration, now func() time.Time) *failureLimiter {
	return &failureLimiter{burst: float64(burst), every: every, now: now, clients: map[string]*bucket{}}
}

// refill brings b up to date and reports how many failures it still allows.
func (l *failureLimiter) refill(b *bucket, now time.Time) {
	b.tokens = min(l.burst, b.tokens+float64(now.Sub(b.at))/float64(l.every))
	b.at = now
}

// blocked reports whether client has no failures left, and if so how long
// until it has one.
func (l *failureLimiter) blocked(client string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.clients[client]
	if !ok {
		return 0, false
	}
	l.refill(b, l.now())
	if b.tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - b.tokens) * float64(l.every)), true
}

// fail spends one of client's failures.
func (l *failureLimiter) fail(client string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	b, ok := l.clients[client]
	if !ok {
		if len(l.clients) >= maxTrackedClients {
			l.prune(now)
		}
		b = &bucket{tokens: l.burst, at: now}
		l.clients[client] = b
	}
	l.refill(b, now)
	b.tokens = max(0, b.tokens-1)
}

// prune drops refilled buckets, and if that frees nothing, any bucket.
func (l *failureLimiter) prune(now time.Time) {
	for k, b := range l.clients {
		if l.refill(b, now); b.tokens >= l.burst {
			delete(l.clients, k)
		}
	}
	for k := range l.clients {
		if len(l.clients) < maxTrackedClients {
			break
		}
		delete(l.clients, k)
	}
}
