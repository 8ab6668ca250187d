package unblock

import (
	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// routes decides the blocked:route entries: each namespace's worker
// index and its workers' capabilities are read once per scan, and every
// entry waiting on the namespace is decided from their union.
type routes struct {
	next      *queues // the scan's
	t         *tally
	wait      map[string][]*item         // namespace -> items waiting for its capabilities
	caps      map[string]map[string]bool // namespace -> every capability its workers advertise
	instances map[string][]string        // namespace -> its worker instances
}

func newRoutes(next *queues, t *tally) routes {
	return routes{next: next, t: t, wait: map[string][]*item{}, caps: map[string]map[string]bool{},
		instances: map[string][]string{}}
}

// check decides an item at once when it needs no capability or its
// namespace's are known, else waits for them.
func (r *routes) check(it *item) {
	if it.core["required_capabilities"] == "" {
		r.next.act = append(r.next.act, it)
		return
	}
	ns := it.core["namespace"]
	it.ns = ns
	if _, ok := r.caps[ns]; ok {
		r.decide(it)
		return
	}
	if len(r.wait[ns]) == 0 {
		r.next.workers = append(r.next.workers, ns)
	}
	r.wait[ns] = append(r.wait[ns], it)
}

// addReads adds the wave's reads of worker indexes and capabilities. A
// namespace without workers is decided now (nothing to read), before
// this wave's calls are taken.
func (r *routes) addReads(b *scanutil.Batch, workers, caps []string) {
	for _, ns := range workers {
		ns := ns
		b.Add(func(rs []scannerapi.Reply) { r.workers(ns, rs[0]) }, scannerapi.Command{"SMEMBERS", keys.WorkersIndex(ns)})
	}
	for _, ns := range caps {
		ns := ns
		var cmds []scannerapi.Command
		for _, iid := range r.instances[ns] {
			cmds = append(cmds, scannerapi.Command{"HGET", keys.WorkerCaps(ns, iid), "caps_csv"})
		}
		b.Add(func(rs []scannerapi.Reply) { r.capsOf(ns, rs) }, cmds...)
	}
}

// withWorkers returns the namespaces of caps that have workers to read,
// and decides the others now: no worker advertises anything.
func (r *routes) withWorkers(caps []string) []string {
	var read []string
	for _, ns := range caps {
		if len(r.instances[ns]) == 0 {
			r.caps[ns] = map[string]bool{}
			r.decideAll(ns)
			continue
		}
		read = append(read, ns)
	}
	return read
}

func (r *routes) workers(ns string, rep scannerapi.Reply) {
	if rep.Failed() {
		class, code := scanutil.ClassifyReply(rep)
		r.failed(ns, class, "workers_read_"+code)
		return
	}
	for _, e := range rep.Array {
		if s, ok := e.Text(); ok && s != "" {
			r.instances[ns] = append(r.instances[ns], s)
		}
	}
	r.next.caps = append(r.next.caps, ns)
}

func (r *routes) capsOf(ns string, rs []scannerapi.Reply) {
	union := map[string]bool{}
	for _, rep := range rs {
		if rep.Failed() {
			class, code := scanutil.ClassifyReply(rep)
			r.failed(ns, class, "caps_read_"+code)
			return
		}
		s, _ := rep.Text()
		addCaps(union, s)
	}
	r.caps[ns] = union
	r.decideAll(ns)
}

// failed keeps every execution waiting on the namespace blocked.
func (r *routes) failed(ns string, class scannerapi.ErrorClass, code string) {
	for _, it := range r.wait[ns] {
		r.t.fail(it, class, code)
	}
	delete(r.wait, ns)
}

func (r *routes) decideAll(ns string) {
	for _, it := range r.wait[ns] {
		r.decide(it)
	}
	delete(r.wait, ns)
}

func (r *routes) decide(it *item) {
	if tok, missing := missingCapability(it.core["required_capabilities"], r.caps[it.ns]); missing {
		// No worker of the namespace can run it yet.
		r.t.skip(it, "capability_missing", "no worker of namespace %q advertises capability %q", it.ns, tok)
		return
	}
	r.next.act = append(r.next.act, it)
}
