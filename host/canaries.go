package host

// Canary swaps on request (httpapi.Canaries) and from the file watch of
// a scanner whose swaps go through a canary (scanners.NAME.swap: canary):
// the new binary runs in shadow beside the running one, compared item by
// item (host/unit/canary.go), until it is promoted or aborted.

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffscan/ffscan/host/canary"
	"github.com/ffscan/ffscan/host/config"
	"github.com/ffscan/ffscan/host/httpapi"
	"github.com/ffscan/ffscan/host/unit"
)

// CanaryShown is how many of a canary's latest differences status shows.
const CanaryShown = 20

// Canary implements httpapi.Canaries: action start, promote or abort on
// scanner name's canary, on behalf of who (logged).
func (h *Host) Canary(ctx context.Context, name, action, who string) (out httpapi.CanaryResult, err error) {
	defer func() { h.auditOperator(ctx, "canary "+action, name, canaryDetail(out, err)) }()
	if h.readOnly {
		return httpapi.CanaryResult{}, errors.New("a read-only host runs no canaries")
	}
	settings := unit.SettingsOf(h.config())
	var st canary.Status
	switch action {
	case httpapi.CanaryStart:
		st, err = h.units.StartCanary(ctx, settings, name, who)
	case httpapi.CanaryPromote:
		st, err = h.units.PromoteCanary(ctx, settings, name, "promoted by "+who)
	case httpapi.CanaryAbort:
		st, err = h.units.AbortCanary(name, "aborted by "+who)
	default:
		return httpapi.CanaryResult{}, fmt.Errorf("%w: %q is not start, promote or abort", httpapi.ErrBadRequest, action)
	}
	res := httpapi.CanaryResult{Scanner: name, Action: action}
	if st.State != "" {
		res.Canary = &st
	}
	switch {
	case errors.Is(err, unit.ErrNoScanner):
		return res, fmt.Errorf("%w: %q is not an enabled scanner of this host", httpapi.ErrNotFound, name)
	case errors.Is(err, unit.ErrNoCanary):
		return res, fmt.Errorf("%w: scanner %s has no canary running", httpapi.ErrNotFound, name)
	case err != nil:
		res.Error = err.Error()
	}
	return res, nil
}

// canaryChanged starts a canary of scanner name's changed binary (its
// swaps go through one); a digest an operator aborted is not started
// again, and a canary of an older file gives way to the new one.
func (h *Host) canaryChanged(ctx context.Context, name string) {
	settings := unit.SettingsOf(h.config())
	if cur, ok := h.units.CanaryStatus(name, 0); ok && cur.Active() {
		if cur.State == canary.Promoting {
			return
		}
		h.log.Info("the plugin binary changed again; its earlier canary gives way", "scanner", name, "canary_sha256", cur.To.SHA256)
		_, _ = h.units.AbortCanary(name, "the binary changed again")
	}
	st, err := h.units.StartCanary(ctx, settings, name, "binary changed on disk")
	res := httpapi.CanaryResult{Scanner: name, Action: httpapi.CanaryStart}
	if st.State != "" {
		res.Canary = &st
	}
	h.auditOperator(ctx, "canary start", name, canaryDetail(res, err))
	if err != nil {
		if ctx.Err() == nil {
			h.log.Error("canary not started; the running plugin keeps serving", "scanner", name, "error", err)
		}
	}
}

// swapsByCanary says whether scanner name's binary changes go through a
// canary.
func (h *Host) swapsByCanary(name string) bool {
	sc, ok := h.units.Views()[name]
	return ok && sc.Scanner.Swap == config.SwapCanary
}
