package host

// Resuming a scanner that paused itself at its action budget
// (httpapi.Resumer).

import (
	"context"
	"fmt"

	"github.com/ffscan/ffscan/host/httpapi"
)

// ResumeScanner implements httpapi.Resumer: scanner name, paused at its
// action budget, calls its partitions again from its next cycle (the
// window starts afresh); who is logged.
func (h *Host) ResumeScanner(ctx context.Context, name, who string) (res httpapi.ResumeResult, err error) {
	defer func() {
		detail := "not paused"
		switch {
		case err != nil:
			detail = err.Error()
		case res.Resumed && res.Pause != nil:
			detail = "resumed after: " + res.Pause.Reason
		}
		h.auditOperator(ctx, "resume", name, detail)
	}()
	u := h.units.Get(name)
	if u == nil {
		return httpapi.ResumeResult{}, fmt.Errorf("%w: %q is not an enabled scanner of this host", httpapi.ErrNotFound, name)
	}
	res = httpapi.ResumeResult{Scanner: name, Pause: pauseStatus(u.Runner().Paused())}
	res.Resumed = u.Runner().Resume(who)
	if !res.Resumed {
		res.Pause = nil
	}
	return res, nil
}
