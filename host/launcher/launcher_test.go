package launcher

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/sdk/scannerapi"
)

var specs = []scannerapi.OptionSpec{
	{Name: "lookahead", Type: scannerapi.OptionInt, Default: "8"},
	{Name: "namespace", Type: scannerapi.OptionString},
	{Name: "strict", Type: scannerapi.OptionBool, Default: "false"},
	{Name: "grace", Type: scannerapi.OptionDuration, Default: "1s"},
}

func TestResolveOptionsFillsDefaults(t *testing.T) {
	got, err := ResolveOptions("le", specs, map[string]string{"namespace": "a", "grace": "250ms"})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"lookahead": "8", "namespace": "a", "strict": "false", "grace": "250ms"}, got)
}

func TestResolveOptionsNamesTheKey(t *testing.T) {
	_, err := ResolveOptions("le", specs, map[string]string{"lookahead": "many", "strict": "perhaps", "grace": "1", "colour": "red"})
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, `scanners.le.options.lookahead: "many" is not an integer`)
	assert.Contains(t, msg, `scanners.le.options.strict: "perhaps" is not a boolean`)
	assert.Contains(t, msg, `scanners.le.options.grace: "1" is not a duration`)
	assert.Contains(t, msg, `scanners.le.options.colour: unknown option (the scanner accepts: grace, lookahead, namespace, strict)`)
}

func TestResolveOptionsNoSchema(t *testing.T) {
	got, err := ResolveOptions("x", nil, nil)
	require.NoError(t, err)
	assert.Empty(t, got)
	_, err = ResolveOptions("x", nil, map[string]string{"a": "1"})
	assert.ErrorContains(t, err, "the scanner accepts: none")
}
