package sharing_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ffscan/ffscan/host/clock"
	"github.com/ffscan/ffscan/host/postgres"
	"github.com/ffscan/ffscan/host/sharing"
	"github.com/ffscan/ffscan/host/sharing/pgstore"
	"github.com/ffscan/ffscan/internal/pgtest"
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/testserver"
)

var parts = keys.PartitionConfig{Flow: 16, Budget: 4, Quota: 4}

// ttl is long enough that a step of these tests (a few round trips on a
// loaded machine) stays well inside the fencing margin (ttl/5).
const ttl = 2 * time.Second

// schema is a database with ffscan's schema and library (the share's
// functions and tables are the library's), copied for each Postgres test.
var schema = pgtest.NewTemplate("sharing", func(ctx context.Context, dsn string) error {
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := postgres.CreateSchema(ctx, pool); err != nil {
		return err
	}
	_, err = postgres.InstallLibrary(ctx, pool)
	return err
})

func TestMain(m *testing.M) {
	code := m.Run()
	schema.Close()
	os.Exit(code)
}

// env is one store the tests run on: how to make a host's store, and how
// to read the entries back from it.
type env struct {
	store func() sharing.Store
	// holders are the partitions' entries that have not lapsed, by the
	// store's clock: partition -> host.
	holders func(t *testing.T) map[keys.Partition]string
	// lastExpiry is the latest expiry (ms) of id's entries and the store's
	// clock now.
	lastExpiry func(t *testing.T, id string) (expiry, now int64)
}

// backends are the stores every scenario runs on.
var backends = []struct {
	name string
	open func(t *testing.T) env
}{
	{"valkey", openValkey},
	{"postgres", openPostgres},
}

func openValkey(t *testing.T) env {
	srv := testserver.New(t)
	c := srv.Client(t)
	ctx := context.Background()
	now := func() int64 {
		tm, err := c.Do(ctx, c.B().Time().Build()).AsIntSlice()
		require.NoError(t, err)
		return tm[0]*1000 + tm[1]/1000
	}
	entries := func() map[string][2]string {
		m, err := c.Do(ctx, c.B().Hgetall().Key(sharing.OwnersKey).Build()).AsStrMap()
		require.NoError(t, err)
		out := map[string][2]string{}
		for f, v := range m {
			host, exp, _ := strings.Cut(v, "|")
			out[f] = [2]string{host, exp}
		}
		return out
	}
	return env{
		store: func() sharing.Store { return sharing.NewValkeyStore(c) },
		holders: func(t *testing.T) map[keys.Partition]string {
			ms := now()
			byField := map[string]keys.Partition{}
			for _, p := range all() {
				byField[sharing.OwnerField(p)] = p
			}
			out := map[keys.Partition]string{}
			for f, e := range entries() {
				exp, err := strconv.ParseInt(e[1], 10, 64)
				require.NoError(t, err)
				if exp >= ms {
					out[byField[f]] = e[0]
				}
			}
			return out
		},
		lastExpiry: func(t *testing.T, id string) (int64, int64) {
			var last int64
			for _, e := range entries() {
				exp, err := strconv.ParseInt(e[1], 10, 64)
				require.NoError(t, err)
				if e[0] == id {
					last = max(last, exp)
				}
			}
			return last, now()
		},
	}
}

func openPostgres(t *testing.T) env {
	dsn := schema.Database(t)
	pool, err := postgres.Connect(context.Background(), postgres.Options{DSN: dsn, PoolSize: 8})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return env{
		store: func() sharing.Store { return pgstore.New(pool, scannerapi.Filter{}, parts) },
		holders: func(t *testing.T) map[keys.Partition]string {
			return pgHolders(t, pool, "")
		},
		lastExpiry: func(t *testing.T, id string) (int64, int64) {
			var last, now int64
			require.NoError(t, pool.QueryRow(context.Background(),
				"SELECT coalesce(max(expires_at_ms) FILTER (WHERE host_id = $1), 0), ffscan.now_ms() FROM ffscan.share_owner", id).Scan(&last, &now))
			return last, now
		},
	}
}

// pgHolders reads share group grp's entries that have not lapsed.
func pgHolders(t *testing.T, pool *pgxpool.Pool, grp string) map[keys.Partition]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT family, partition_index, host_id FROM ffscan.share_owner
		WHERE share_group = $1 AND expires_at_ms >= ffscan.now_ms()`, grp)
	require.NoError(t, err)
	defer rows.Close()
	out := map[keys.Partition]string{}
	for rows.Next() {
		var (
			fam, host string
			idx       int16
		)
		require.NoError(t, rows.Scan(&fam, &idx, &host))
		f, err := keys.ParseFamily(fam)
		require.NoError(t, err)
		out[keys.Partition{Family: f, Index: uint16(idx)}] = host
	}
	require.NoError(t, rows.Err())
	return out
}

func all() []keys.Partition {
	var out []keys.Partition
	for _, f := range []keys.Family{keys.FamilyFlow, keys.FamilyBudget, keys.FamilyQuota} {
		out = append(out, parts.Partitions(f)...)
	}
	return out
}

// hosts are coordinators a test ticks itself, one step at a time, so that
// between two steps nothing changes but the time.
type hosts struct {
	env env
	cs  map[string]*sharing.Coordinator
}

func (h *hosts) add(id string) {
	h.cs[id] = sharing.New(h.env.store(), sharing.Config{ID: id, Partitions: parts, TTL: ttl, Tick: ttl / 3})
}

func (h *hosts) ids() []string {
	var ids []string
	for id := range h.cs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// check asserts the share at this step, from the store and from every
// host's fencing view (the store is read first: a host that owns a
// partition now held it in the store then, since nothing ticked between):
// no partition is owned by two hosts, and a host owns a partition only
// while the store's entry for it, not lapsed, names that host.
func (h *hosts) check(t *testing.T, extra ...*sharing.Coordinator) (owners map[keys.Partition][]string) {
	t.Helper()
	held := h.env.holders(t)
	owners = map[keys.Partition][]string{}
	views := map[string]*sharing.Coordinator{}
	for id, c := range h.cs {
		views[id] = c
	}
	for _, c := range extra {
		views[c.Status().ID] = c
	}
	for id, c := range views {
		for _, p := range c.Status().Partitions {
			owners[p] = append(owners[p], id)
			require.Equal(t, id, held[p], "%s owns %s by its fencing view, but the store's entry names %q", id, p.Tag(), held[p])
		}
	}
	for p, ids := range owners {
		require.Len(t, ids, 1, "partition %s owned by %v", p.Tag(), ids)
	}
	return owners
}

// settle ticks the hosts round after round (each once per round, in id
// order) until every partition has exactly one owner and a whole round
// changes nothing, checking the share after every tick.
func (h *hosts) settle(t *testing.T, extra ...*sharing.Coordinator) map[keys.Partition][]string {
	t.Helper()
	var last string
	for range 50 {
		var now map[keys.Partition][]string
		for _, id := range h.ids() {
			require.NoError(t, h.cs[id].Tick(context.Background()))
			now = h.check(t, extra...)
		}
		if len(now) == len(all()) && fmt.Sprint(now) == last {
			return now
		}
		last = fmt.Sprint(now)
	}
	t.Fatal("the partitions did not settle")
	return nil
}

// waitLapse waits until the store's clock is past the last of id's
// entries: a lapse has no event to wait on, but its time is in the store,
// so this waits exactly that long (and reads the clock again after).
func (h *hosts) waitLapse(t *testing.T, id string) {
	t.Helper()
	for {
		last, now := h.env.lastExpiry(t, id)
		if last < now {
			return
		}
		time.Sleep(time.Duration(last-now+1) * time.Millisecond)
	}
}

func owned(c *sharing.Coordinator) int { return len(c.Status().Partitions) }

func TestSingleHostOwnsEverything(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			h := &hosts{env: b.open(t), cs: map[string]*sharing.Coordinator{}}
			h.add("solo")
			owns, of := h.cs["solo"].Share()
			assert.Equal(t, [2]int{0, len(all())}, [2]int{owns, of}, "nothing before the first tick")
			require.NoError(t, h.cs["solo"].Tick(context.Background()))
			owns, of = h.cs["solo"].Share()
			assert.Equal(t, [2]int{len(all()), len(all())}, [2]int{owns, of}, "the share: every partition")
			st := h.cs["solo"].Status()
			assert.Equal(t, map[keys.Family]int{keys.FamilyFlow: 16, keys.FamilyBudget: 4, keys.FamilyQuota: 4}, st.Owned)
			assert.Equal(t, []string{"solo"}, st.Members)
			assert.Len(t, h.check(t), len(all()))
		})
	}
}

// Three hosts divide the partitions with no overlap at any step; one
// joining takes some over without any partition having two owners; one
// leaving hands its partitions over at once; one that dies (stops
// renewing) stops owning by its own clock before its entries lapse, and
// the others take its partitions once they have; one that stalls and
// comes back finds its partitions taken and owns none of them until the
// assignment gives it some again, through a release by their holder.
// The same scenario on each store: only the storage differs.
func TestHostsShareWithoutOverlap(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			h := &hosts{env: b.open(t), cs: map[string]*sharing.Coordinator{}}
			for _, id := range []string{"a", "b", "c"} {
				h.add(id)
			}
			h.settle(t)
			shares := 0
			for id, c := range h.cs {
				assert.Positive(t, owned(c), "%s owns some", id)
				n, of := c.Share()
				assert.Equal(t, owned(c), n, "%s's share counts what it owns", id)
				assert.Equal(t, len(all()), of)
				shares += n
			}
			assert.Equal(t, len(all()), shares, "the shares add up to every partition")

			// A fourth joins.
			h.add("d")
			h.settle(t)
			assert.Positive(t, owned(h.cs["d"]), "the newcomer took some")

			// d leaves cleanly: its partitions are free at once, and the
			// others' first round takes them.
			h.cs["d"].Leave(context.Background())
			delete(h.cs, "d")
			for _, id := range h.ids() {
				require.NoError(t, h.cs[id].Tick(context.Background()))
				h.check(t)
			}
			assert.Len(t, h.check(t), len(all()), "one round after a clean leave, every partition is owned")

			// c dies: it stops ticking. The others keep ticking; c's
			// partitions stay c's in the store until they lapse, and c's
			// own view has dropped them by then.
			dead := h.cs["c"]
			delete(h.cs, "c")
			for _, id := range h.ids() {
				require.NoError(t, h.cs[id].Tick(context.Background()))
				h.check(t, dead)
			}
			h.waitLapse(t, "c")
			assert.Zero(t, owned(dead), "a host whose entries lapsed owns nothing by its own clock")
			h.settle(t, dead)

			// b stalls (stops ticking) while a takes over its partitions,
			// then comes back: it does not take back what a holds, and
			// gets its share again only after a released it.
			stalled := h.cs["b"]
			delete(h.cs, "b")
			h.waitLapse(t, "b")
			h.settle(t, stalled, dead)
			assert.Len(t, h.cs["a"].Status().Partitions, len(all()), "a alone owns everything")
			h.cs["b"] = stalled
			h.settle(t, dead)
			assert.Positive(t, owned(stalled), "the stalled host owns its share again")
		})
	}
}

func TestAssignmentMovesOnlyWhatMust(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			h := &hosts{env: b.open(t), cs: map[string]*sharing.Coordinator{}}
			for i := range 3 {
				h.add(fmt.Sprintf("h%d", i))
			}
			before := h.settle(t)
			h.add("h3")
			moved := 0
			for p, ids := range h.settle(t) {
				if ids[0] != before[p][0] {
					moved++
					assert.Equal(t, "h3", ids[0], "a partition only moves to the newcomer")
				}
			}
			assert.Positive(t, moved)
		})
	}
}

// The store's contract, on each store: an entry another member holds is
// not taken until it lapses; a release leaves others' entries; a member
// that stops renewing drops out of the members once its time passed.
func TestStoreContract(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := b.open(t)
			ctx := context.Background()
			s := e.store()
			p := all()[:3]
			short := 300 * time.Millisecond

			members, err := s.Renew(ctx, "x", short)
			require.NoError(t, err)
			assert.Equal(t, []string{"x"}, members)
			members, err = s.Renew(ctx, "y", ttl)
			require.NoError(t, err)
			assert.ElementsMatch(t, []string{"x", "y"}, members)

			held, err := s.Hold(ctx, "x", short, p)
			require.NoError(t, err)
			assert.Equal(t, []bool{true, true, true}, held)
			held, err = s.Hold(ctx, "y", ttl, p)
			require.NoError(t, err)
			assert.Equal(t, []bool{false, false, false}, held, "held by x, not lapsed")
			held, err = s.Hold(ctx, "x", short, p[:1])
			require.NoError(t, err)
			assert.Equal(t, []bool{true}, held, "a renewal")

			require.NoError(t, s.Release(ctx, "y", p), "y's release leaves x's entries")
			assert.Equal(t, "x", e.holders(t)[p[1]])
			require.NoError(t, s.Release(ctx, "x", p[1:2]))
			held, err = s.Hold(ctx, "y", ttl, p)
			require.NoError(t, err)
			assert.Equal(t, []bool{false, true, false}, held, "the released one is free")

			// x stops renewing: its entries and its membership lapse.
			for {
				last, now := e.lastExpiry(t, "x")
				if last < now {
					break
				}
				time.Sleep(time.Duration(last-now+1) * time.Millisecond)
			}
			held, err = s.Hold(ctx, "y", ttl, p)
			require.NoError(t, err)
			assert.Equal(t, []bool{true, true, true}, held, "lapsed entries are taken")
			members, err = s.Renew(ctx, "y", ttl)
			require.NoError(t, err)
			assert.Equal(t, []string{"y"}, members, "x's membership lapsed with its entries")

			if rh, ok := s.(sharing.RenewHolder); ok {
				members, held, err := rh.RenewHold(ctx, "y", ttl, p)
				require.NoError(t, err)
				assert.Equal(t, []string{"y"}, members)
				assert.Equal(t, []bool{true, true, true}, held, "renewed in the membership's call")
				members, held, err = rh.RenewHold(ctx, "w", ttl, p)
				require.NoError(t, err)
				assert.Equal(t, []string{"w", "y"}, members)
				assert.Equal(t, []bool{false, false, false}, held, "y's, not lapsed")
				require.NoError(t, s.Leave(ctx, "w"))
			}

			require.NoError(t, s.Leave(ctx, "y"))
			members, err = s.Renew(ctx, "z", ttl)
			require.NoError(t, err)
			assert.Equal(t, []string{"z"}, members, "y left")
		})
	}
}

// On Postgres, hosts with different filters serve different tenants'
// rows: each filter is a share of its own, dividing every partition among
// its hosts. Hosts that count the partitions otherwise are refused.
func TestPostgresShares(t *testing.T) {
	t.Parallel()
	dsn := schema.Database(t)
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 4})
	require.NoError(t, err)
	defer pool.Close()
	tenantA := scannerapi.Filter{Namespace: "a"}
	a := sharing.New(pgstore.New(pool, tenantA, parts), sharing.Config{ID: "a1", Partitions: parts, TTL: ttl})
	none := sharing.New(pgstore.New(pool, scannerapi.Filter{}, parts), sharing.Config{ID: "n1", Partitions: parts, TTL: ttl})
	require.NoError(t, a.Tick(ctx))
	require.NoError(t, none.Tick(ctx))
	assert.Len(t, a.Status().Partitions, len(all()), "tenant a's host owns every partition of its share")
	assert.Len(t, none.Status().Partitions, len(all()), "the unfiltered host owns every partition of its own")
	assert.Equal(t, []string{"a1"}, a.Status().Members)
	assert.Equal(t, "postgres (filter namespace=a)", a.Status().Store)
	assert.Len(t, pgHolders(t, pool, pgstore.Group(tenantA)), len(all()))
	assert.Len(t, pgHolders(t, pool, ""), len(all()))

	other := keys.PartitionConfig{Flow: 32, Budget: 4, Quota: 4}
	odd := sharing.New(pgstore.New(pool, scannerapi.Filter{}, other), sharing.Config{ID: "n2", Partitions: other, TTL: ttl})
	err = odd.Tick(ctx)
	var ce *pgstore.CountsError
	require.ErrorAs(t, err, &ce)
	assert.Contains(t, err.Error(), "host n1 shares this database with partitions flow/budget/quota 16/4/4, this host runs with 32/4/4")
	assert.Empty(t, odd.Status().Partitions, "a refused host owns nothing")
	assert.Equal(t, uint64(1), odd.Status().Failures)
	require.Error(t, none.Tick(ctx), "and the host already there refuses the newcomer too")
}

// Gains counts the ticks after which a host owns partitions it could not
// act on just before: its first take, and a renewal that confirms its
// partitions again after its view ran out (a stall); a renewal within the
// view is not one. Each is announced on the channel Gains returned
// before it.
func TestGainsCountTakesAndReturnsAfterAStall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewManual(time.Unix(1_000_000, 0))
			c := sharing.New(b.open(t).store(), sharing.Config{ID: "solo", Partitions: parts, TTL: ttl, Tick: ttl / 3, Clock: clk})
			n, next := c.Gains()
			require.Zero(t, n)
			require.NoError(t, c.Tick(ctx))
			requireClosed(t, next, "the first take is a gain")
			n, next = c.Gains()
			assert.Equal(t, uint64(1), n)

			clk.Advance(ttl / 3)
			require.NoError(t, c.Tick(ctx))
			assert.Len(t, c.Status().Partitions, len(all()))
			n2, _ := c.Gains()
			assert.Equal(t, n, n2, "a renewal within the view is no gain")
			select {
			case <-next:
				t.Fatal("a renewal within the view announced a gain")
			default:
			}

			clk.Advance(ttl) // stalled past the view
			for _, p := range all() {
				require.False(t, c.Owns(p))
			}
			require.NoError(t, c.Tick(ctx))
			requireClosed(t, next, "the view returning is a gain")
			n3, _ := c.Gains()
			assert.Equal(t, n+1, n3)
			assert.Len(t, c.Status().Partitions, len(all()))
		})
	}
}

func requireClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	default:
		t.Fatal(what + ": not announced")
	}
}

// On Postgres a steady tick renews the membership and holds the host's
// partitions in one call (one round trip, one transaction). When the
// members changed since the last tick, the partitions held in that call
// that are now another host's are released in the same tick, so the
// newcomer takes them at its next tick.
func TestPostgresSteadyTickIsOneCall(t *testing.T) {
	t.Parallel()
	dsn := schema.Database(t)
	ctx := context.Background()
	open := func() *pgxpool.Pool {
		pool, err := postgres.Connect(ctx, postgres.Options{DSN: dsn, PoolSize: 2})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return pool
	}
	apool, bpool := open(), open()
	a := sharing.New(pgstore.New(apool, scannerapi.Filter{}, parts), sharing.Config{ID: "a", Partitions: parts, TTL: ttl})
	require.NoError(t, a.Tick(ctx))
	require.Len(t, a.Status().Partitions, len(all()))

	calls := apool.Stat().AcquireCount()
	require.NoError(t, a.Tick(ctx))
	assert.Equal(t, int64(1), apool.Stat().AcquireCount()-calls, "a steady tick is one call")
	assert.Len(t, a.Status().Partitions, len(all()))

	b := sharing.New(pgstore.New(bpool, scannerapi.Filter{}, parts), sharing.Config{ID: "b", Partitions: parts, TTL: ttl})
	require.NoError(t, b.Tick(ctx))
	assert.Empty(t, b.Status().Partitions, "a holds everything yet")

	// a's tick holds everything in its renewal's call, learns of b, and
	// gives b's share back in the same tick.
	require.NoError(t, a.Tick(ctx))
	held := pgHolders(t, apool, "")
	mine := a.Status().Partitions
	assert.NotEmpty(t, mine)
	assert.Less(t, len(mine), len(all()))
	assert.Len(t, held, len(mine), "a holds its own share alone")
	for _, p := range mine {
		assert.Equal(t, "a", held[p])
	}

	require.NoError(t, b.Tick(ctx))
	assert.Len(t, b.Status().Partitions, len(all())-len(mine), "b takes the rest at its next tick")
	held = pgHolders(t, apool, "")
	assert.Len(t, held, len(all()))
	for _, p := range b.Status().Partitions {
		assert.Equal(t, "b", held[p])
	}
}
