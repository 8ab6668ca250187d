package sharing

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/ffscan/ffscan/keys"
)

// Keys of the coordination on Valkey, one hash tag so that the scripts
// work on a cluster. They are ffscan's own, outside FlowFabric's layout.
const (
	// MembersKey is a ZSET: member the host id, score the expiry of its
	// membership in ms (the server's clock).
	MembersKey = "ffscan:{ffscan}:hosts"
	// OwnersKey is a HASH: field "<family>:<index>" of a partition, value
	// "<host id>|<expiry ms>" (the server's clock). One hash keeps an
	// idle host's renewals at a few commands per tick.
	OwnersKey = "ffscan:{ffscan}:owners"
)

// OwnerField is a partition's field in OwnersKey.
func OwnerField(p keys.Partition) string {
	return p.Family.String() + ":" + strconv.Itoa(int(p.Index))
}

// take holds each of ARGV[3..] for host ARGV[1] for ARGV[2] ms where the
// field is absent, expired or already the host's, in one call; it
// answers, per field, 1 when the host holds it afterwards.
var take = valkey.NewLuaScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, until_ms = ARGV[1], now + tonumber(ARGV[2])
local fields = {}
for i = 3, #ARGV do fields[#fields + 1] = ARGV[i] end
local cur = redis.call('HMGET', KEYS[1], unpack(fields))
local out, set = {}, {}
for i, f in ipairs(fields) do
  local ok = cur[i] == false
  if not ok then
    local host, exp = string.match(cur[i], '^(.*)|(%d+)$')
    ok = host == me or exp == nil or tonumber(exp) < now
  end
  if ok then
    set[#set + 1] = f
    set[#set + 1] = me .. '|' .. string.format('%d', until_ms)
    out[i] = 1
  else
    out[i] = 0
  end
end
if #set > 0 then redis.call('HSET', KEYS[1], unpack(set)) end
return out`)

// give removes each of ARGV[2..] that host ARGV[1] holds.
var give = valkey.NewLuaScript(`
local fields = {}
for i = 2, #ARGV do fields[#fields + 1] = ARGV[i] end
local cur = redis.call('HMGET', KEYS[1], unpack(fields))
local del = {}
for i, f in ipairs(fields) do
  if cur[i] ~= false and string.match(cur[i], '^(.*)|') == ARGV[1] then del[#del + 1] = f end
end
if #del > 0 then return redis.call('HDEL', KEYS[1], unpack(del)) end
return 0`)

// ValkeyStore keeps the share in the keyspace the hosts serve: the members
// in MembersKey, the ownership entries in OwnersKey.
type ValkeyStore struct {
	client valkey.Client
}

// NewValkeyStore returns the store of the hosts sharing client's keyspace.
func NewValkeyStore(client valkey.Client) *ValkeyStore { return &ValkeyStore{client: client} }

// Describe names the store.
func (s *ValkeyStore) Describe() string { return "valkey" }

// Renew renews id's membership: the server's TIME, then ZADD, the removal
// of lapsed members and the read of the live ones in one pipeline.
func (s *ValkeyStore) Renew(ctx context.Context, id string, ttl time.Duration) ([]string, error) {
	b := s.client.B()
	// The clock of the node that holds the sharing keys (a keyless TIME
	// could go to any node, a dead seed included).
	t, err := s.client.Do(ctx, b.Time().Build().SetSlot(MembersKey)).AsIntSlice()
	if err != nil || len(t) != 2 {
		return nil, fmt.Errorf("TIME: %v", err)
	}
	now := t[0]*1000 + t[1]/1000
	res := s.client.DoMulti(ctx,
		b.Zadd().Key(MembersKey).ScoreMember().ScoreMember(float64(now+ttl.Milliseconds()), id).Build(),
		b.Zremrangebyscore().Key(MembersKey).Min("-inf").Max(strconv.FormatInt(now, 10)).Build(),
		b.Zrange().Key(MembersKey).Min("0").Max("-1").Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return nil, fmt.Errorf("membership: %w", err)
		}
	}
	members, err := res[2].AsStrSlice()
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	return members, nil
}

// Hold runs the take script over parts' fields.
func (s *ValkeyStore) Hold(ctx context.Context, id string, ttl time.Duration, parts []keys.Partition) ([]bool, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	args := []string{id, strconv.FormatInt(ttl.Milliseconds(), 10)}
	for _, p := range parts {
		args = append(args, OwnerField(p))
	}
	got, err := take.Exec(ctx, s.client, []string{OwnersKey}, args).AsIntSlice()
	if err != nil {
		return nil, fmt.Errorf("ownership: %w", err)
	}
	if len(got) != len(parts) {
		return nil, fmt.Errorf("ownership: %d answers for %d partitions", len(got), len(parts))
	}
	held := make([]bool, len(parts))
	for i, n := range got {
		held[i] = n == 1
	}
	return held, nil
}

// Release runs the give script over parts' fields.
func (s *ValkeyStore) Release(ctx context.Context, id string, parts []keys.Partition) error {
	if len(parts) == 0 {
		return nil
	}
	args := []string{id}
	for _, p := range parts {
		args = append(args, OwnerField(p))
	}
	return give.Exec(ctx, s.client, []string{OwnersKey}, args).Error()
}

// Leave removes id from MembersKey.
func (s *ValkeyStore) Leave(ctx context.Context, id string) error {
	return s.client.Do(ctx, s.client.B().Zrem().Key(MembersKey).Member(id).Build()).Error()
}
