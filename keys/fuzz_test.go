package keys

import "testing"

// FuzzParseExecutionID checks that parsing never panics and that whatever it
// accepts is already canonical: formatting the parsed id gives back the
// exact input, so keys built from it match the stored ones byte for byte.
func FuzzParseExecutionID(f *testing.F) {
	for _, s := range []string{
		"{fp:24}:aaaaaaaa-0000-4000-8000-000000000001",
		"{fp:0}:00000000-0000-0000-0000-000000000000",
		"{fp:007}:aaaaaaaa-0000-4000-8000-000000000001",
		"{fp:65535}:AAAAAAAA-0000-4000-8000-000000000001",
		"aaaaaaaa-0000-4000-8000-000000000001",
		"{fp:1}:",
		"{fp:1}}:x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseExecutionID(s)
		if err != nil {
			return
		}
		if id.String() != s {
			t.Fatalf("accepted %q but it formats as %q", s, id.String())
		}
		again, err := ParseExecutionID(id.String())
		if err != nil || again != id {
			t.Fatalf("round trip of %q failed: %v", s, err)
		}
	})
}

// FuzzParseTag checks the same canonical round trip for partition tags.
func FuzzParseTag(f *testing.F) {
	for _, s := range []string{"{fp:0}", "{b:31}", "{q:65535}", "{fp:01}", "{x:1}", "{fp:}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseTag(s)
		if err != nil {
			return
		}
		if p.Tag() != s {
			t.Fatalf("accepted %q but it formats as %q", s, p.Tag())
		}
	})
}
