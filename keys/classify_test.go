package keys

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClassifyExecutionID(t *testing.T) {
	t.Parallel()
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

func TestClassifyExecutionIDIn(t *testing.T) {
	t.Parallel()
	const u = "aaaaaaaa-0000-4000-8000-000000000001"
	p7 := Partition{Family: FamilyFlow, Index: 7}
	_, form := ClassifyExecutionIDIn("{fp:7}:"+u, p7)
	assert.Equal(t, IDCanonical, form)
	id, form := ClassifyExecutionIDIn("{fp:8}:"+u, p7)
	assert.Equal(t, IDForeign, form)
	assert.Equal(t, uint16(8), id.Partition().Index)
	assert.Equal(t, "foreign", form.String())
	_, form = ClassifyExecutionIDIn("{fp:008}:"+u, p7)
	assert.Equal(t, IDNonCanonical, form, "non-canonical spellings stay non-canonical")
	_, form = ClassifyExecutionIDIn("garbage", p7)
	assert.Equal(t, IDInvalid, form)
}

func TestClassifyBudgetID(t *testing.T) {
	t.Parallel()
	const u = "b0000000-0000-4000-8000-000000000001"
	id, form := ClassifyBudgetID(u)
	assert.Equal(t, IDCanonical, form)
	assert.Equal(t, u, id.String())
	_, form = ClassifyBudgetID("B0000000-0000-4000-8000-000000000001")
	assert.Equal(t, IDNonCanonical, form)
	_, form = ClassifyBudgetID("garbage")
	assert.Equal(t, IDInvalid, form)
}
