package scannertest

import (
	"testing"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/client"
)

// A world is a server with the library and a client on it: what the
// client makes is there, Do fails only on error replies, and WaitPast
// returns once the server's clock has passed the time asked.
func TestWorld(t *testing.T) {
	t.Parallel()
	w := StartWorld(t, client.Options{Namespace: "kit"})
	r, err := w.Client.CreateExecution(w.Ctx, client.CreateRequest{Lane: "default", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := w.Do("HGET", keys.Exec(r.ID).Core(), "namespace").ToString(); err != nil || ns != "kit" {
		t.Errorf("namespace of the created execution = %q, %v; want kit", ns, err)
	}
	if err := w.Do("GET", "ff:missing").Error(); !valkey.IsValkeyNil(err) {
		t.Errorf("GET of a missing key: %v, want a nil reply", err)
	}
	task := w.Claim(w.Worker(client.WorkerOptions{WorkerID: "kit", InstanceID: "kit-1", Lanes: []string{"default"}}))
	if task.ID() != r.ID {
		t.Errorf("claimed %s, want %s", task.ID(), r.ID)
	}
	t.Cleanup(task.Abandon)
	at := w.NowMs()
	w.WaitPast(at + 20)
	if now := w.NowMs(); now <= at+20 {
		t.Errorf("WaitPast(%d) returned at %d", at+20, now)
	}
	// A second world on the same server finds the library in place.
	again := NewWorld(t, w.Valkey, client.Options{})
	if _, err := again.Client.CreateExecution(again.Ctx, client.CreateRequest{Lane: "default", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
}
