package keys

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClassifyExecutionID(t *testing.T) {
	const u = "aaaaaaaa-0000-4000-8000-000000000001"
	id, form := ClassifyExecutionID("{fp:7}:" + u)
	assert.Equal(t, IDCanonical, form)
	assert.Equal(t, "{fp:7}:"+u, id.String())
	for _, s := range []string{
		"{fp:007}:" + u, "{fp:+7}:" + u, "{fp:7}:AAAAAAAA-0000-4000-8000-000000000001",
		"{fp:7}:aaaaaaaa000040008000000000000001", "{fp:7}:{" + u + "}", "{fp:7}:urn:uuid:" + u,
	} {
		id, form := ClassifyExecutionID(s)
		assert.Equal(t, IDNonCanonical, form, s)
		assert.True(t, id.IsZero(), s)
	}
	for _, s := range []string{"", "garbage", u, "{fp:x}:" + u, "{fp:70000}:" + u, "{fp:7}:nope", "{b:7}:" + u, "{fp:7}" + u} {
		_, form := ClassifyExecutionID(s)
		assert.Equal(t, IDInvalid, form, s)
	}
	assert.Equal(t, "non_canonical", IDNonCanonical.String())
}

func TestClassifyBudgetID(t *testing.T) {
	const u = "b0000000-0000-4000-8000-000000000001"
	id, form := ClassifyBudgetID(u)
	assert.Equal(t, IDCanonical, form)
	assert.Equal(t, u, id.String())
	_, form = ClassifyBudgetID("B0000000-0000-4000-8000-000000000001")
	assert.Equal(t, IDNonCanonical, form)
	_, form = ClassifyBudgetID("garbage")
	assert.Equal(t, IDInvalid, form)
}
