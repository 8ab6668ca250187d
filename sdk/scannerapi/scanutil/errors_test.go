package scanutil_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

func TestErrorCode(t *testing.T) {
	for msg, want := range map[string]string{
		"WRONGTYPE Operation against a key holding the wrong kind of value": "WRONGTYPE",
		"ERR unknown command": "ERR",
		"TRYAGAIN Multiple keys request during rehashing of slot": "TRYAGAIN",
		"something lower case": "error",
		"":                     "error",
		// A script stopped at a key its slot's migration had moved.
		"Script attempted to access a non local key in a cluster node script: ff_mark_lease_expired_if_due, on @user_function:178.": scanutil.CodeNonLocalKey,
	} {
		assert.Equal(t, want, scanutil.ErrorCode(msg), msg)
	}
}
