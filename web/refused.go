package web

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/db"
)

// refuse records a refused webhook request: never its body, headers or ids.
func (s *Server) refuse(c echo.Context, providerName string, o deliveryOutcome) {
	s.refusals.Record(db.Refusal{At: s.now(), Provider: providerName, Reason: o.reason, Detail: o.answer,
		Client: c.RealIP(), BodyBytes: int(max(c.Request().ContentLength, 0))})
	if n, ok := s.refusalLines.allow(providerName+"/"+string(o.reason), s.now()); ok {
		s.cfg.Logger.Warn("webhook refused", "provider", providerName, "reason", o.reason, "detail", o.detail,
			"client", c.RealIP(), "refused_since_last_line", n)
	}
}

// lineLimiter lets one log line a second through per key (a provider and
// a refusal reason), so a merchant wiring up a provider sees why each kind
// of request is refused, and a flood of forgeries cannot flood the log.
type lineLimiter struct {
	mu   sync.Mutex
	last map[string]time.Time
	held map[string]int
}

// allow reports whether a line for key may be written at now, and how many
// were held back since the last one.
func (l *lineLimiter) allow(key string, now time.Time) (held int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last, l.held = map[string]time.Time{}, map[string]int{}
	}
	if now.Sub(l.last[key]) < time.Second {
		l.held[key]++
		return 0, false
	}
	held = l.held[key]
	l.last[key], l.held[key] = now, 0
	return held, true
}

// RefusalList is the answer to GET /api/v1/refused.
type RefusalList struct {
	Refused []Refusal `json:"refused"`
	// NextBefore continues the listing (?before=); 0 on the last page.
	NextBefore int64 `json:"next_before,omitempty"`
}

// Refusal is one refused webhook request.
type Refusal struct {
	ID        int64            `json:"id"`
	At        time.Time        `json:"at"`
	Provider  string           `json:"provider"`
	Reason    db.RefusalReason `json:"reason"`
	Detail    string           `json:"detail"`
	Client    string           `json:"client"`
	BodyBytes int              `json:"body_bytes"`
}

func (s *Server) refusalList(c echo.Context) (RefusalList, error) {
	before, _ := strconv.ParseInt(c.QueryParam("before"), 10, 64)
	limit, err := strconv.Atoi(c.QueryParam("limit"))
	if err != nil || limit < 1 || limit > 500 {
		limit = 100
	}
	rs, err := db.Refusals(c.Request().Context(), s.cfg.Store.Pool(), before, limit)
	if err != nil {
		return RefusalList{}, storageError(err)
	}
	out := RefusalList{Refused: []Refusal{}}
	for _, r := range rs {
		out.Refused = append(out.Refused, Refusal(r))
	}
	if len(rs) == limit {
		out.NextBefore = rs[len(rs)-1].ID
	}
	return out, nil
}

func (s *Server) apiRefused(c echo.Context) error {
	list, err := s.refusalList(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, list)
}

func (s *Server) handleRefusedPage(c echo.Context) error {
	list, err := s.refusalList(c)
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, "refused", page{Title: "Refused requests", Data: list})
}
