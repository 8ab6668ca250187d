package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// Explain implements scannerapi.Explainer: whether the next scan purges
// the execution, from the scan's own reads (examineCommands, readExamined)
// and its one purge decision (decide), with the scanner's options.
func (s *Scanner) Explain(ctx context.Context, host scannerapi.Host, req *scannerapi.ExplainRequest) (*scannerapi.Explanation, error) {
	c, ok := scanutil.ExplainCandidate(req, sourceName)
	if !ok {
		return scannerapi.Explains(scannerapi.VerdictNothing, "not_terminal", "in no lane's terminal index"), nil
	}
	id, e := s.intake().Explain(c, &req.Scan)
	if e != nil {
		return e, nil
	}
	s.mu.Lock()
	cfg := s.cfg
	s.mu.Unlock()
	pk := keys.FlowPart(req.Scan.Partition)
	it := &item{member: c.Member, id: id, lane: c.Lane, score: c.Score}
	cmds := examineCommands(pk, it, cfg.filter)
	rs, err := host.Exec(ctx, cmds)
	if err != nil {
		return nil, fmt.Errorf("explain reads: %w", err)
	}
	if len(rs) != len(cmds) {
		return nil, fmt.Errorf("explain reads: %d replies to %d commands", len(rs), len(cmds))
	}
	ex, class, code := readExamined(rs, cfg.filter)
	if code != "" {
		return scannerapi.Explains(scannerapi.VerdictSkips, code, "its reads failed (%s %s); the scan counts it and tries again", class, code), nil
	}
	d := decide(ex, req.Scan.NowMs, cfg.ret)
	switch d.kind {
	case vPurge:
		return scannerapi.Explains(scannerapi.VerdictActs, "purge", "terminal and past its retention: the next scan deletes it, every key and index entry"), nil
	case vClean:
		e := scannerapi.Explains(scannerapi.VerdictActs, "clean", "its core is gone: the next scan removes its index entries")
		e.Inconsistent = []string{c.Key + " holds an execution whose core is gone"}
		return e, nil
	case vKept:
		e := scannerapi.Explains(scannerapi.VerdictWaits, "retained", "kept until its retention passes (%s)", time.UnixMilli(d.dueAt).UTC().Format(time.RFC3339))
		e.DueAtMs = d.dueAt
		return e, nil
	case vFiltered:
		return scannerapi.Explains(scannerapi.VerdictSkips, "filtered", "outside this scanner's filter (%s)", cfg.filter.String()), nil
	case vNotTerminal:
		e := scannerapi.Explains(scannerapi.VerdictSkips, "not_terminal", "in %s but %s, not terminal: never touched", c.Key, ex.phase)
		e.Inconsistent = []string{fmt.Sprintf("%s holds an execution whose phase is %s", c.Key, ex.phase)}
		return e, nil
	}
	return scannerapi.Explains(scannerapi.VerdictNothing, "left_index", "no longer in %s", c.Key), nil
}
