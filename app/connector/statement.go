package connector

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/guardian-pay/guardian/receiver/contract"
)

// maxStatement caps how much of an answer is read to find a statement.
const maxStatement = 16 << 10

// verify reports whether body is signed, freshly, by the secret or by one
// still accepted while rotating.
func (c *HTTP) verify(body []byte, header http.Header) bool {
	if c.signer.Verify(body, header) == nil {
		return true
	}
	for _, r := range c.rotating {
		if r.Verify(body, header) == nil {
			return true
		}
	}
	return false
}

// statement returns the signed statement about key in an answer, and
// false with a reason when the answer holds none: no body, not signed
// with the connector secret, stale, not a statement, or about another key.
func (c *HTTP) statement(body []byte, header http.Header, key string) (contract.Statement, string) {
	if len(body) == 0 {
		return contract.Statement{}, "no statement in the answer"
	}
	if !c.verify(body, header) {
		return contract.Statement{}, "answer not signed with the connector secret, or stale"
	}
	var st contract.Statement
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil || st.IdempotencyKey != key {
		return contract.Statement{}, "answer is not a statement about this key"
	}
	return st, ""
}
