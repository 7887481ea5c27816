package web_test

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/web"
)

func TestTokensOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})

	issue := web.IssueTokenRequest{Purpose: "claim", Payload: json.RawMessage(`{"fulfilment_id":"f-1"}`), TTLSeconds: 600}
	code, _ := b.api(t, "POST", "/api/v1/tokens", "", issue)
	require.Equal(t, http.StatusUnauthorized, code, "issuing needs the operator token")

	code, body := b.api(t, "POST", "/api/v1/tokens", adminToken, issue)
	require.Equal(t, http.StatusCreated, code, string(body))
	var issued web.IssuedToken
	require.NoError(t, json.Unmarshal(body, &issued))
	require.GreaterOrEqual(t, len(issued.Token), 43, "at least 256 bits")
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM single_use_token WHERE encode(hash, 'escape') LIKE '%' || $1 || '%'`, issued.Token), "only the hash is stored")

	// 20 holders of the same link redeem at once: one gets the payload.
	codes := make([]int, 20)
	bodies := make([][]byte, 20)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i], bodies[i] = b.api(t, "POST", "/tokens/"+issued.Token+"/redeem", "", nil) })
	}
	wg.Wait()
	wins := 0
	for i, c := range codes {
		switch c {
		case http.StatusOK:
			wins++
			var r web.RedeemedToken
			require.NoError(t, json.Unmarshal(bodies[i], &r))
			require.Equal(t, "claim", r.Purpose)
			require.JSONEq(t, `{"fulfilment_id":"f-1"}`, string(r.Payload))
		default:
			require.Equal(t, http.StatusGone, c)
			require.JSONEq(t, `{"error":"token is not redeemable"}`, string(bodies[i]))
		}
	}
	require.Equal(t, 1, wins)

	code, body = b.api(t, "POST", "/tokens/never-issued/redeem", "", nil)
	require.Equal(t, http.StatusGone, code)
	require.JSONEq(t, `{"error":"token is not redeemable"}`, string(body), "unknown and spent look the same")

	for _, bad := range []any{
		web.IssueTokenRequest{Purpose: "", TTLSeconds: 60},
		web.IssueTokenRequest{Purpose: "claim", TTLSeconds: 0},
		web.IssueTokenRequest{Purpose: "claim", TTLSeconds: 60 * 60 * 24 * 365},
		map[string]any{"purpose": "claim", "ttl_seconds": 60, "extra": true},
	} {
		code, _ := b.api(t, "POST", "/api/v1/tokens", adminToken, bad)
		require.Equal(t, http.StatusBadRequest, code, "%+v", bad)
	}
	require.Zero(t, b.db.Count(t, `SELECT count(*) FROM single_use_token`), "the redeemed token is gone and refused requests stored nothing")
}
