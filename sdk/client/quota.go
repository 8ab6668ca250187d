package client

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// AdmissionWindow is the window dimension admissions are recorded in,
// as FlowFabric's scheduler records them (the window ff_create_quota_policy
// creates and the quota reconciler trims).
const AdmissionWindow = "requests_per_window"

// CreateQuotaRequest describes a quota policy: at most MaxRequests
// admissions within any Window (sliding), at most MaxConcurrent admitted
// at once. A limit of 0 is no limit.
type CreateQuotaRequest struct {
	ID            keys.QuotaID // zero: a new id
	Window        time.Duration
	MaxRequests   int
	MaxConcurrent int
}

// CreateQuotaResult is the policy's id; Existed when it was already there
// (nothing was changed then).
type CreateQuotaResult struct {
	ID      keys.QuotaID
	Existed bool
}

// CreateQuotaPolicy creates a quota policy (ff_create_quota_policy).
func (c *Client) CreateQuotaPolicy(ctx context.Context, req CreateQuotaRequest) (CreateQuotaResult, error) {
	if req.Window < time.Second || req.Window%time.Second != 0 {
		return CreateQuotaResult{}, invalid("Window", "%v must be whole seconds, at least 1s", req.Window)
	}
	if req.MaxRequests < 0 {
		return CreateQuotaResult{}, invalid("MaxRequests", "%d is negative", req.MaxRequests)
	}
	if req.MaxConcurrent < 0 {
		return CreateQuotaResult{}, invalid("MaxConcurrent", "%d is negative", req.MaxConcurrent)
	}
	qid := req.ID
	if qid.UUID().IsZero() {
		qid = keys.NewQuotaID()
	}
	now, err := c.serverNowMillis(ctx)
	if err != nil {
		return CreateQuotaResult{}, err
	}
	qk := keys.Quota(c.parts, qid)
	r, err := c.call(ctx, lua.Call{
		Function: "ff_create_quota_policy",
		Keys: []string{qk.Definition(), qk.Window(AdmissionWindow), qk.Concurrency(), qk.AdmittedSet(),
			qk.Partition().QuotaPolicies()},
		Args: []string{qid.String(), strconv.FormatInt(int64(req.Window/time.Second), 10),
			strconv.Itoa(req.MaxRequests), strconv.Itoa(req.MaxConcurrent), now},
	})
	if err != nil {
		return CreateQuotaResult{}, err
	}
	switch r.Status {
	case StatusOK:
		return CreateQuotaResult{ID: qid}, nil
	case StatusAlreadySatisfied:
		return CreateQuotaResult{ID: qid, Existed: true}, nil
	}
	return CreateQuotaResult{}, fmt.Errorf("ff_create_quota_policy: %w: status %q", ErrUnexpectedReply, r.Status)
}

// ErrQuotaPolicyNotFound says the quota policy does not exist.
var ErrQuotaPolicyNotFound = errors.New("quota policy not found")

// Admission is the verdict on one execution against a quota policy.
type Admission struct {
	// Admitted: recorded now, or already (AlreadyAdmitted) within the
	// current window.
	Admitted        bool
	AlreadyAdmitted bool
	// RateExceeded: the window is full; try again after RetryAfter.
	RateExceeded bool
	RetryAfter   time.Duration
	// ConcurrencyExceeded: as many as the policy allows are admitted;
	// try again after one is released.
	ConcurrencyExceeded bool
}

// Admit checks an execution against a quota policy and records it when
// admitted (ff_check_admission_and_record, with the policy's stored
// limits and the server's clock). Admitting the same execution again
// within the window is AlreadyAdmitted. Release the admission when the
// work it guards does not go ahead, or when it ends under a concurrency
// cap.
func (c *Client) Admit(ctx context.Context, qid keys.QuotaID, id keys.ExecutionID) (Admission, error) {
	qk := keys.Quota(c.parts, qid)
	def, err := c.vk.Do(ctx, c.vk.B().Hmget().Key(qk.Definition()).
		Field("requests_per_window_seconds", "max_requests_per_window", "active_concurrency_cap").Build()).ToArray()
	if err != nil {
		return Admission{}, fmt.Errorf("quota %s: %w", qid, err)
	}
	limits := make([]string, len(def))
	for i := range def {
		if def[i].IsNil() {
			return Admission{}, fmt.Errorf("quota %s: %w", qid, ErrQuotaPolicyNotFound)
		}
		limits[i], _ = def[i].ToString()
	}
	now, err := c.serverNowMillis(ctx)
	if err != nil {
		return Admission{}, err
	}
	res := c.lib.Do(ctx, lua.Call{
		Function: "ff_check_admission_and_record",
		Keys: []string{qk.Window(AdmissionWindow), qk.Concurrency(), qk.Definition(), qk.Admitted(id),
			qk.AdmittedSet()},
		Args: []string{now, limits[0], limits[1], limits[2], id.String(), "0"},
	})
	if err := res.Error(); err != nil {
		return Admission{}, fmt.Errorf("ff_check_admission_and_record: %w", err)
	}
	words, err := res.AsStrSlice()
	if err != nil || len(words) == 0 {
		// The {0, code, ...} rows of invalid input come back as a mixed
		// array: hand them to the common parser for a typed error.
		if _, perr := parseReply("ff_check_admission_and_record", res); perr != nil {
			return Admission{}, perr
		}
		return Admission{}, fmt.Errorf("ff_check_admission_and_record: %w: %v", ErrUnexpectedReply, res.String())
	}
	switch words[0] {
	case "ADMITTED":
		return Admission{Admitted: true}, nil
	case "ALREADY_ADMITTED":
		return Admission{Admitted: true, AlreadyAdmitted: true}, nil
	case "CONCURRENCY_EXCEEDED":
		return Admission{ConcurrencyExceeded: true}, nil
	case "RATE_EXCEEDED":
		ms := int64(0)
		if len(words) > 1 {
			ms, _ = strconv.ParseInt(words[1], 10, 64)
		}
		return Admission{RateExceeded: true, RetryAfter: time.Duration(ms) * time.Millisecond}, nil
	}
	return Admission{}, fmt.Errorf("ff_check_admission_and_record: %w: %q", ErrUnexpectedReply, words[0])
}

// ReleaseAdmission gives an execution's admission back
// (ff_release_admission): its guard goes, and its concurrency slot is
// freed. Releasing again is harmless.
func (c *Client) ReleaseAdmission(ctx context.Context, qid keys.QuotaID, id keys.ExecutionID) error {
	qk := keys.Quota(c.parts, qid)
	_, err := c.call(ctx, lua.Call{
		Function: "ff_release_admission",
		Keys:     []string{qk.Admitted(id), qk.AdmittedSet(), qk.Concurrency()},
		Args:     []string{id.String()},
	})
	return err
}
