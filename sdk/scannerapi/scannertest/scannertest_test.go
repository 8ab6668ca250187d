package scannertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

// The kit's own tests run on a real server and use no assertion library:
// the kit is part of the SDK module, whose dependencies every plugin
// author builds.

func TestExecPipelinesAndConvertsReplies(t *testing.T) {
	c := testserver.New(t).Client(t)
	ctx := context.Background()
	replies, err := Exec(ctx, c, []scannerapi.Command{
		{"SET", "ff:k", "v"},
		{"GET", "ff:k"},
		{"HSET", "ff:h", "f", "1"},
		{"GET", "ff:missing"},
		{"HGET", "ff:k", "f"}, // wrong type: a server error reply
		{"TIME"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(replies) != 6 {
		t.Fatalf("%d replies for 6 commands", len(replies))
	}
	if s, ok := replies[1].Text(); !ok || s != "v" {
		t.Errorf("GET ff:k = %+v, want v", replies[1])
	}
	if replies[2].Kind != scannerapi.KindInt || replies[2].Int != 1 {
		t.Errorf("HSET = %+v, want integer 1", replies[2])
	}
	if !replies[3].IsNil() {
		t.Errorf("GET of a missing key = %+v, want nil", replies[3])
	}
	if !replies[4].Failed() || replies[4].ErrClass != scannerapi.ErrServer || !strings.Contains(replies[4].Err, "WRONGTYPE") {
		t.Errorf("HGET on a string = %+v, want a server-class WRONGTYPE error", replies[4])
	}
	if replies[5].Failed() || replies[5].Kind != scannerapi.KindArray {
		t.Errorf("TIME = %+v, want an array", replies[5])
	}
	if _, err := Exec(ctx, c, []scannerapi.Command{{}}); err == nil {
		t.Error("an empty command was accepted")
	}
}

func TestSplitCommandFindsFCALLKeys(t *testing.T) {
	for _, tc := range []struct {
		cmd              scannerapi.Command
		head, keys, tail string
	}{
		{scannerapi.Command{"FCALL", "fn", "2", "k1", "k2", "a"}, "FCALL fn 2", "k1 k2", "a"},
		{scannerapi.Command{"fcall_ro", "fn", "0", "a"}, "fcall_ro fn 0", "", "a"},
		{scannerapi.Command{"FCALL", "fn", "3", "k1"}, "FCALL fn 3 k1", "", ""}, // too few KEYS: sent as is
		{scannerapi.Command{"ZADD", "k", "1", "m"}, "ZADD", "k", "1 m"},
		{scannerapi.Command{"TIME"}, "TIME", "", ""},
	} {
		h, k, tl := splitCommand(tc.cmd)
		got := fmt.Sprintf("%s|%s|%s", strings.Join(h, " "), strings.Join(k, " "), strings.Join(tl, " "))
		if want := tc.head + "|" + tc.keys + "|" + tc.tail; got != want {
			t.Errorf("splitCommand(%q) = %s, want %s", tc.cmd, got, want)
		}
	}
}

func TestCounterCountsBatchesAndFCALLs(t *testing.T) {
	c := testserver.New(t).Client(t)
	n := NewCounter(Callbacks(c))
	ctx := context.Background()
	if _, err := n.Exec(ctx, "s", []scannerapi.Command{{"FCALL", "nosuch", "0"}, {"PING"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Exec(ctx, "s", []scannerapi.Command{{"PING"}}); err != nil {
		t.Fatal(err)
	}
	if execs, fcalls := n.Reset(); execs != 2 || fcalls != 1 {
		t.Errorf("counted %d batches, %d FCALLs; want 2, 1", execs, fcalls)
	}
	if execs, fcalls := n.Reset(); execs != 0 || fcalls != 0 {
		t.Errorf("after Reset: %d batches, %d FCALLs; want 0, 0", execs, fcalls)
	}
}

func TestSnapshotDumpsEveryType(t *testing.T) {
	c := testserver.New(t).Client(t)
	ctx := context.Background()
	if _, err := Exec(ctx, c, []scannerapi.Command{
		{"SET", "ff:s", "x"},
		{"HSET", "ff:h", "b", "2", "a", "1"},
		{"SADD", "ff:set", "y", "x"},
		{"ZADD", "ff:z", "2", "m2", "1", "m1"},
		{"RPUSH", "ff:l", "p", "q"},
	}); err != nil {
		t.Fatal(err)
	}
	got := snapshot(ctx, t, c)
	want := map[string]string{
		"ff:s":   `string "x"`,
		"ff:h":   `hash "a"="1" "b"="2"`,
		"ff:set": `set "x" "y"`,
		"ff:z":   `zset "m1"@1 "m2"@2`,
		"ff:l":   `list "p" "q"`,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("snapshot:\n got %v\nwant %v", got, want)
	}
}

// recorder is a testing.TB that keeps what Same reports instead of
// failing the real test.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestSameNamesWhatDiffers(t *testing.T) {
	base := Report{Mode: "linked", Cycles: 1, Scanned: 2, Processed: 3,
		Errors:   map[string]int64{"server/x": 1},
		Commands: map[string]int{"FCALL ff_x": 3},
		Keys:     map[string]string{"ff:a": "hash \"f\"=\"1\""}}
	same := base
	same.Mode = "plugin"
	same.Keys = map[string]string{"ff:a": "hash \"f\"=\"2\""} // contents are not compared
	r := &recorder{TB: t}
	Same(r, base, same)
	if len(r.errors) != 0 {
		t.Errorf("equal reports differ: %v", r.errors)
	}

	// Keys compare by shape: ids minted per run, on other partitions.
	minted := base
	minted.Mode = "plugin"
	base2 := base
	base2.Keys = map[string]string{"ff:exec:{fp:3}:{fp:3}:0b0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f:core": "hash"}
	minted.Keys = map[string]string{"ff:exec:{fp:9}:{fp:9}:1c0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f:core": "hash"}
	r = &recorder{TB: t}
	Same(r, base2, minted)
	if len(r.errors) != 0 {
		t.Errorf("keys of the same shape differ: %v", r.errors)
	}
	minted.Keys = map[string]string{"ff:exec:{fp:9}:{fp:9}:1c0c6a4e-5b1d-4c3e-9f00-3d2b1a0c9e8f:policy": "string"}
	r = &recorder{TB: t}
	Same(r, base2, minted)
	if len(r.errors) != 1 {
		t.Errorf("keys of another shape compare equal")
	}

	other := same
	other.Processed = 4
	other.Refused = map[string]int{"dry_run": 1}
	other.Keys = map[string]string{"ff:b": "string \"\""}
	r = &recorder{TB: t}
	Same(r, base, other)
	if len(r.errors) != 1 {
		t.Fatalf("Same reported %d errors, want 1: %v", len(r.errors), r.errors)
	}
	for _, want := range []string{"processed: linked 3, plugin 4", "refused: linked , plugin dry_run=1", "keys: linked ff:a:hash, plugin ff:b:string"} {
		if !strings.Contains(r.errors[0], want) {
			t.Errorf("Same's report lacks %q:\n%s", want, r.errors[0])
		}
	}
}

func TestServerNowAndDueCandidates(t *testing.T) {
	c := testserver.New(t).Client(t)
	now := ServerNowMs(t, c)
	if d := time.Since(time.UnixMilli(now)); d > time.Minute || d < -time.Minute {
		t.Fatalf("server time %d is %v away from the local clock", now, d)
	}
	ctx := context.Background()
	for i, m := range []string{"c", "a", "b", "late"} {
		score := now - int64(10-i)
		if m == "late" {
			score = now + 60_000
		}
		if err := c.Do(ctx, c.B().Zadd().Key("ff:idx:z").ScoreMember().ScoreMember(float64(score), m).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	got := DueCandidates(t, c, "src", "ff:idx:z", now, 2)
	if len(got) != 2 || got[0].Member != "c" || got[1].Member != "a" || got[0].Source != "src" || got[0].Key != "ff:idx:z" || got[0].Score != float64(now-10) {
		t.Fatalf("due window: %+v", got)
	}
	if all := DueCandidates(t, c, "src", "ff:idx:z", now, 10); len(all) != 3 {
		t.Fatalf("a member due later is not a candidate: %+v", all)
	}
}
