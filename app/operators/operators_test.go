package operators_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/guardian-pay/guardian/app/operators"
	"github.com/guardian-pay/guardian/db"
	"github.com/guardian-pay/guardian/db/dbtest"
)

func TestOperators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := dbtest.NewDB(t)
	const envToken = "an-environment-admin-token"
	s := operators.New(db.New(d.Pool), []string{" " + envToken + " "})

	t.Run("CredentialsAreStoredHashedAndNameTheActor", func(t *testing.T) {
		token, c, err := s.Add(ctx, "ana")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(token, operators.TokenPrefix))
		require.Equal(t, 1, d.Count(t, `SELECT count(*) FROM operator_credential WHERE token_hash = sha256(convert_to($1, 'UTF8'))`, token), "stored as its SHA-256 only")
		p, err := s.Authenticate(ctx, token)
		require.NoError(t, err)
		require.Equal(t, "ana", p.Name)
		require.Equal(t, "db:", p.Credential[:3])
		_, err = s.Authenticate(ctx, token+"x")
		require.ErrorIs(t, err, operators.ErrUnknown)

		begun := time.Now()
		p2, err := s.Check(ctx, p.Credential, begun)
		require.NoError(t, err)
		require.Equal(t, "ana", p2.Name)
		n, err := s.Revoke(ctx, "ana", c.ID)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		_, err = s.Authenticate(ctx, token)
		require.ErrorIs(t, err, operators.ErrUnknown, "a revoked token")
		_, err = s.Check(ctx, p.Credential, begun)
		require.ErrorIs(t, err, operators.ErrUnknown, "a revoked credential's session")
	})

	t.Run("EnvironmentTokensAreTheEnvActor", func(t *testing.T) {
		p, err := s.Authenticate(ctx, envToken)
		require.NoError(t, err)
		require.Equal(t, operators.EnvActor, p.Name)
		require.NotContains(t, p.Credential, envToken, "the credential's name is no secret")
		_, err = s.Check(ctx, p.Credential, time.Now())
		require.NoError(t, err)
		rotated := operators.New(db.New(d.Pool), nil)
		_, err = rotated.Check(ctx, p.Credential, time.Now())
		require.ErrorIs(t, err, operators.ErrUnknown, "a token rotated out of the environment ends its sessions")
	})

	t.Run("EndSessionsKeepsTheCredential", func(t *testing.T) {
		token, _, err := s.Add(ctx, "bo")
		require.NoError(t, err)
		p, err := s.Authenticate(ctx, token)
		require.NoError(t, err)
		begun := time.Now().Add(-time.Minute)
		_, err = s.EndSessions(ctx, "bo")
		require.NoError(t, err)
		_, err = s.Check(ctx, p.Credential, begun)
		require.ErrorIs(t, err, operators.ErrUnknown, "a session begun before the end")
		_, err = s.Authenticate(ctx, token)
		require.NoError(t, err, "the credential itself stays valid")
	})

	t.Run("NamesAreChecked", func(t *testing.T) {
		for _, name := range []string{"", "<script>", "-dash", strings.Repeat("a", 65)} {
			_, _, err := s.Add(ctx, name)
			require.ErrorIs(t, err, operators.ErrInvalidName, "%q", name)
		}
	})

	t.Run("OneSessionKeyPerDatabase", func(t *testing.T) {
		k1, err := s.SessionKey(ctx)
		require.NoError(t, err)
		k2, err := operators.New(db.New(d.Pool), nil).SessionKey(ctx)
		require.NoError(t, err)
		require.Equal(t, k1, k2)
		require.GreaterOrEqual(t, len(k1), 32)
	})
}
