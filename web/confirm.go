package web

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/guardian-pay/guardian/app/tokens"
)

// The dashboard asks an operator to confirm every change (a resolution, a
// bulk action) with a single-use token bound to exactly what they asked and
// to their credential: redeemable once, by them, within confirmationTTL.

// confirmationTTL is how long a confirmation waits.
const confirmationTTL = 10 * time.Minute

var (
	// errConfirmationGone: used already, or expired. Nothing was changed
	// by it.
	errConfirmationGone = errors.New("this confirmation was already used or has expired")
	// errConfirmationNotYours: bound to another operator (or unreadable).
	// Nothing was changed.
	errConfirmationNotYours = errors.New("this confirmation belongs to another operator")
)

// intent is what a confirmation is bound to: it names the credential of
// the operator who asked.
type intent interface {
	owner() string
}

func (i resolveIntent) owner() string { return i.Credential }
func (i bulkIntent) owner() string    { return i.Credential }

// askConfirmation issues a confirmation token for purpose bound to in.
func (s *Server) askConfirmation(ctx context.Context, purpose string, in intent) (string, error) {
	payload, err := json.Marshal(in)
	if err != nil {
		return "", err
	}
	token, _, err := s.cfg.Tokens.Internal().Issue(ctx, purpose, payload, confirmationTTL)
	return token, err
}

// redeemConfirmation redeems token for purpose into in, once, for the
// operator holding credential: errConfirmationGone, errConfirmationNotYours,
// or a storage error.
func (s *Server) redeemConfirmation(ctx context.Context, purpose, token, credential string, in intent) error {
	raw, err := s.cfg.Tokens.Internal().RedeemFor(ctx, token, purpose)
	if errors.Is(err, tokens.ErrGone) {
		return errConfirmationGone
	}
	if err != nil {
		return err
	}
	if json.Unmarshal(raw, in) != nil || in.owner() != credential {
		return errConfirmationNotYours
	}
	return nil
}
