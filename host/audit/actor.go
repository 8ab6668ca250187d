package audit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

// Actor is who asked for an operator action: the channel it came
// through and, where an admin token was presented, the token's identity
// (a digest of it, never the token) and the peer's address.
type Actor struct {
	Channel string
	Who     string
}

type actorKey struct{}

// WithActor is ctx carrying the actor of the action asked for in it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom is ctx's actor; without one, the host itself.
func ActorFrom(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok {
		return a
	}
	return Actor{Channel: ChannelHost}
}

// TokenIdentity names an admin token in the trail: the first 12 hex
// digits of its sha256, enough to tell a rotated token from the last.
func TokenIdentity(token string) string {
	h := sha256.Sum256([]byte(token))
	return "token sha256:" + hex.EncodeToString(h[:6])
}

// Operator is an operator action's entry: action on scanner (empty for
// the host's), by ctx's actor, with detail.
func Operator(ctx context.Context, action, scanner, detail string) Entry {
	a := ActorFrom(ctx)
	return Entry{Kind: KindOperator, Action: action, Scanner: scanner, Channel: a.Channel, Who: a.Who, Detail: detail}
}
