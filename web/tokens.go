package web

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/guardian-pay/guardian/app/tokens"
)

// IssueTokenRequest is the body of POST /api/v1/tokens.
type IssueTokenRequest struct {
	Purpose    string          `json:"purpose"`
	Payload    json.RawMessage `json:"payload"`
	TTLSeconds int             `json:"ttl_seconds"`
}

// IssuedToken is the answer to POST /api/v1/tokens. The token is shown once.
type IssuedToken struct {
	Token     string    `json:"token"`
	Purpose   string    `json:"purpose"`
	ExpiresAt time.Time `json:"expires_at"`
}

// RedeemedToken is the answer to a successful POST /tokens/{token}/redeem.
type RedeemedToken struct {
	Purpose string          `json:"purpose"`
	Payload json.RawMessage `json:"payload"`
}

func (s *Server) apiIssueToken(c echo.Context) error {
	var req IssueTokenRequest
	if err := decodeBody(c, &req); err != nil {
		return err
	}
	token, rec, err := s.cfg.Tokens.Issue(c.Request().Context(), req.Purpose, req.Payload, time.Duration(req.TTLSeconds)*time.Second)
	if errors.Is(err, tokens.ErrInvalid) {
		return &HTTPError{Code: http.StatusBadRequest, Msg: err.Error()}
	}
	if err != nil {
		return storageError(err)
	}
	return c.JSON(http.StatusCreated, IssuedToken{Token: token, Purpose: rec.Purpose, ExpiresAt: rec.ExpiresAt})
}

// handleRedeem needs no operator token: the token is the credential. An
// unknown, spent or expired token gets one answer, 410, and nothing else;
// Guardian's own tokens are not redeemable here (tokens.Internal). Failed
// redeems count against the client's address, so guessing is throttled as
// well as hopeless.
func (s *Server) handleRedeem(c echo.Context) error {
	client := limiterKey(c.RealIP())
	if err := throttled(s.redeems, client); err != nil {
		return err
	}
	rec, err := s.cfg.Tokens.Redeem(c.Request().Context(), c.Param("token"))
	if errors.Is(err, tokens.ErrGone) {
		s.redeems.fail(client)
		return &HTTPError{Code: http.StatusGone, Msg: tokens.ErrGone.Error()}
	}
	if err != nil {
		return storageError(err)
	}
	return c.JSON(http.StatusOK, RedeemedToken{Purpose: rec.Purpose, Payload: rec.Payload})
}
