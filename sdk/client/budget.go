package client

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/lua"
)

// MaxBudgetDimensions is the most dimensions one budget or one usage report
// may carry (FlowFabric's Rust side allows 64).
const MaxBudgetDimensions = 64

// Defaults of the free-form budget policy strings, as FlowFabric's own
// examples spell them. The library stores them without interpreting them.
const (
	DefaultBudgetEnforcement = "strict"
	DefaultBudgetOnHardLimit = "fail"
	DefaultBudgetOnSoftLimit = "warn"
)

// usageBreachedAtField is the marker the budget reconciler writes into a
// budget's usage hash; a dimension of that name would collide with it.
const usageBreachedAtField = "breached_at"

// BudgetDimension is one metered dimension (e.g. "tokens") and its limits.
// A limit of 0 means none.
type BudgetDimension struct {
	Name string
	Hard int64 // a report that would take usage above it is refused (HARD_BREACH)
	Soft int64 // a report that takes usage above it is applied and flagged (SOFT_BREACH)
}

// CreateBudgetRequest describes a budget.
type CreateBudgetRequest struct {
	// ID is a caller-chosen budget id; zero mints one. The budget lives
	// on the partition CRC16(raw id) mod the budget count.
	ID keys.BudgetID

	// ScopeType and ScopeID say what the budget meters (e.g. "lane",
	// "default"); free form, stored as given.
	ScopeType string
	ScopeID   string

	// Enforcement, OnHardLimit and OnSoftLimit are stored for the
	// components that act on breaches; the library does not interpret
	// them. Defaults DefaultBudgetEnforcement, DefaultBudgetOnHardLimit,
	// DefaultBudgetOnSoftLimit.
	Enforcement string
	OnHardLimit string
	OnSoftLimit string

	// ResetInterval, when positive, zeroes usage periodically (the
	// budget_reset scanner). Whole milliseconds. Zero: usage accumulates
	// for the budget's lifetime.
	ResetInterval time.Duration

	// Dimensions are the metered dimensions, at least one.
	Dimensions []BudgetDimension
}

// CreateBudgetResult is the outcome of CreateBudget.
type CreateBudgetResult struct {
	ID      keys.BudgetID
	Existed bool // a budget with this id existed; its definition and limits were kept
}

// CreateBudget creates a budget with one ff_create_budget. Creating an
// existing id changes nothing and sets Existed (the library keeps the first
// definition; new limits are ignored).
func (c *Client) CreateBudget(ctx context.Context, req CreateBudgetRequest) (CreateBudgetResult, error) {
	if req.Enforcement == "" {
		req.Enforcement = DefaultBudgetEnforcement
	}
	if req.OnHardLimit == "" {
		req.OnHardLimit = DefaultBudgetOnHardLimit
	}
	if req.OnSoftLimit == "" {
		req.OnSoftLimit = DefaultBudgetOnSoftLimit
	}
	for _, f := range []struct{ name, v string }{
		{"ScopeType", req.ScopeType}, {"ScopeID", req.ScopeID}, {"Enforcement", req.Enforcement},
		{"OnHardLimit", req.OnHardLimit}, {"OnSoftLimit", req.OnSoftLimit},
	} {
		if err := validateText(f.name, f.v, false, 256); err != nil {
			return CreateBudgetResult{}, err
		}
	}
	if req.ResetInterval < 0 || req.ResetInterval%time.Millisecond != 0 {
		return CreateBudgetResult{}, invalid("ResetInterval", "%v must be whole milliseconds, 0 or more", req.ResetInterval)
	}
	if err := validateDimensions(req.Dimensions); err != nil {
		return CreateBudgetResult{}, err
	}
	bid := req.ID
	if bid.UUID().IsZero() {
		bid = keys.NewBudgetID()
	}
	now, err := c.serverNowMillis(ctx)
	if err != nil {
		return CreateBudgetResult{}, err
	}
	n := len(req.Dimensions)
	args := make([]string, 0, 9+3*n)
	args = append(args, bid.String(), req.ScopeType, req.ScopeID, req.Enforcement, req.OnHardLimit,
		req.OnSoftLimit, strconv.FormatInt(req.ResetInterval.Milliseconds(), 10), now, strconv.Itoa(n))
	for _, d := range req.Dimensions {
		args = append(args, d.Name)
	}
	for _, d := range req.Dimensions {
		args = append(args, strconv.FormatInt(d.Hard, 10))
	}
	for _, d := range req.Dimensions {
		args = append(args, strconv.FormatInt(d.Soft, 10))
	}
	bk := keys.Budget(c.parts, bid)
	r, err := c.call(ctx, lua.Call{
		Function: "ff_create_budget",
		Keys: []string{bk.Definition(), bk.Limits(), bk.Usage(), bk.Partition().BudgetResets(),
			bk.Partition().BudgetPolicies()},
		Args: args,
	})
	if err != nil {
		return CreateBudgetResult{}, err
	}
	switch r.Status {
	case StatusOK:
		return CreateBudgetResult{ID: bid}, nil
	case StatusAlreadySatisfied:
		return CreateBudgetResult{ID: bid, Existed: true}, nil
	}
	return CreateBudgetResult{}, fmt.Errorf("ff_create_budget: %w: status %q", ErrUnexpectedReply, r.Status)
}

func validateDimensions(dims []BudgetDimension) error {
	if len(dims) == 0 {
		return invalid("Dimensions", "at least one dimension is required")
	}
	if len(dims) > MaxBudgetDimensions {
		return invalid("Dimensions", "%d dimensions, at most %d allowed", len(dims), MaxBudgetDimensions)
	}
	seen := map[string]bool{}
	for i, d := range dims {
		field := fmt.Sprintf("Dimensions[%d]", i)
		if err := validateDimensionName(field+".Name", d.Name); err != nil {
			return err
		}
		if seen[d.Name] {
			return invalid(field+".Name", "dimension %q is listed twice", d.Name)
		}
		seen[d.Name] = true
		if d.Hard < 0 || d.Soft < 0 {
			return invalid(field, "limits must be 0 (none) or positive, got hard %d soft %d", d.Hard, d.Soft)
		}
		if d.Hard > 0 && d.Soft > d.Hard {
			return invalid(field+".Soft", "soft limit %d is above the hard limit %d and could never be reported", d.Soft, d.Hard)
		}
	}
	return nil
}

func validateDimensionName(field, name string) error {
	if err := validateText(field, name, true, 256); err != nil {
		return err
	}
	if name == usageBreachedAtField {
		return invalid(field, "%q is reserved (the budget reconciler's marker in the usage hash)", name)
	}
	return nil
}

// UsageDelta is an amount to add to one dimension.
type UsageDelta struct {
	Dimension string
	Delta     int64
}

// UsageReport is a batch of usage against one budget.
type UsageReport struct {
	Budget keys.BudgetID
	Deltas []UsageDelta // applied all or nothing, in this order

	// IdempotencyKey, when set, makes a repeated report answer
	// ALREADY_APPLIED instead of counting twice, for 24 hours. Only an
	// applied report (OK or SOFT_BREACH) is remembered: a report refused
	// with HARD_BREACH is evaluated again when retried.
	IdempotencyKey string
}

// UsageStatus is the verdict on a usage report.
type UsageStatus string

// Usage verdicts, as the library answers them.
const (
	// UsageOK: applied, no limit crossed.
	UsageOK UsageStatus = "OK"
	// UsageSoftBreach: applied; Dimension is now above its soft limit.
	UsageSoftBreach UsageStatus = "SOFT_BREACH"
	// UsageHardBreach: refused, nothing applied; Dimension would have
	// gone above its hard limit (Current is the usage before the report).
	UsageHardBreach UsageStatus = "HARD_BREACH"
	// UsageAlreadyApplied: a report with this idempotency key was applied
	// before; nothing changed.
	UsageAlreadyApplied UsageStatus = "ALREADY_APPLIED"
)

// UsageResult is the outcome of ReportUsage.
type UsageResult struct {
	Status UsageStatus
	// Dimension, Current and Limit describe the breach (SOFT_BREACH: the
	// first dimension over its soft limit, Current after the report;
	// HARD_BREACH: the first dimension that would exceed its hard limit,
	// Current before the report). Empty and zero otherwise.
	Dimension string
	Current   int64
	Limit     int64
}

// Applied reports whether the usage was counted by this call.
func (r UsageResult) Applied() bool { return r.Status == UsageOK || r.Status == UsageSoftBreach }

// ReportUsage adds usage to a budget with one ff_report_usage_and_check.
// Hard limits are checked first for every dimension: if any would be
// exceeded, nothing is applied and the result is HARD_BREACH (a verdict,
// not an error). A missing budget is ErrBudgetNotFound: the library does
// not check and would otherwise start a stray definition.
func (c *Client) ReportUsage(ctx context.Context, rep UsageReport) (UsageResult, error) {
	dedup, err := c.checkUsage(rep)
	if err != nil {
		return UsageResult{}, err
	}
	bk := keys.Budget(c.parts, rep.Budget)
	now, err := c.budgetNow(ctx, rep.Budget, bk)
	if err != nil {
		return UsageResult{}, err
	}
	n := len(rep.Deltas)
	args := make([]string, 0, 3+2*n)
	args = append(args, strconv.Itoa(n))
	for _, d := range rep.Deltas {
		args = append(args, d.Dimension)
	}
	for _, d := range rep.Deltas {
		args = append(args, strconv.FormatInt(d.Delta, 10))
	}
	args = append(args, now, dedup)
	return c.usageCall(ctx, lua.Call{
		Function: "ff_report_usage_and_check",
		Keys:     []string{bk.Usage(), bk.Limits(), bk.Definition()},
		Args:     args,
	})
}

// RecordSpend is ReportUsage attributed to an execution (ff_record_spend):
// what is applied is also written to the execution's ledger on the budget,
// so ReleaseSpend can take it back (when the execution's work is undone
// or retried elsewhere).
func (c *Client) RecordSpend(ctx context.Context, rep UsageReport, id keys.ExecutionID) (UsageResult, error) {
	dedup, err := c.checkUsage(rep)
	if err != nil {
		return UsageResult{}, err
	}
	bk := keys.Budget(c.parts, rep.Budget)
	now, err := c.budgetNow(ctx, rep.Budget, bk)
	if err != nil {
		return UsageResult{}, err
	}
	args := []string{strconv.Itoa(len(rep.Deltas))}
	for _, d := range rep.Deltas {
		args = append(args, d.Dimension, strconv.FormatInt(d.Delta, 10))
	}
	args = append(args, now, dedup, id.String())
	return c.usageCall(ctx, lua.Call{
		Function: "ff_record_spend",
		Keys:     []string{bk.Usage(), bk.Limits(), bk.Definition(), bk.ByExec(id), bk.ByExecIndex()},
		Args:     args,
	})
}

// ReleaseSpend takes back what an execution spent on a budget
// (ff_release_budget), never below zero. It reports whether anything was
// recorded for the execution; releasing again is harmless.
func (c *Client) ReleaseSpend(ctx context.Context, bid keys.BudgetID, id keys.ExecutionID) (bool, error) {
	bk := keys.Budget(c.parts, bid)
	r, err := c.call(ctx, lua.Call{
		Function: "ff_release_budget",
		Keys:     []string{bk.Usage(), bk.ByExec(id), bk.ByExecIndex()},
		Args:     []string{bid.String(), id.String()},
	})
	if err != nil {
		return false, err
	}
	return r.field(0) == "released", nil
}

// checkUsage checks a usage report at the edge and returns its dedup key
// ("" without an idempotency key).
func (c *Client) checkUsage(rep UsageReport) (string, error) {
	if len(rep.Deltas) == 0 {
		return "", invalid("Deltas", "at least one delta is required")
	}
	if len(rep.Deltas) > MaxBudgetDimensions {
		return "", invalid("Deltas", "%d deltas, at most %d allowed", len(rep.Deltas), MaxBudgetDimensions)
	}
	seen := map[string]bool{}
	for i, d := range rep.Deltas {
		field := fmt.Sprintf("Deltas[%d].Dimension", i)
		if err := validateDimensionName(field, d.Dimension); err != nil {
			return "", err
		}
		if seen[d.Dimension] {
			// Two deltas of one dimension would each be checked alone
			// against the hard limit, and together could exceed it.
			return "", invalid(field, "dimension %q is listed twice; sum the deltas", d.Dimension)
		}
		seen[d.Dimension] = true
	}
	if rep.IdempotencyKey == "" {
		return "", nil
	}
	if err := validateText("IdempotencyKey", rep.IdempotencyKey, true, c.limits.MaxIdempotencyKeyBytes); err != nil {
		return "", err
	}
	return keys.BudgetPart(c.parts.BudgetPartition(rep.Budget)).UsageDedup(rep.IdempotencyKey), nil
}

// usageCall runs a usage report or spend and reads its verdict.
func (c *Client) usageCall(ctx context.Context, fc lua.Call) (UsageResult, error) {
	r, err := c.call(ctx, fc)
	if err != nil {
		return UsageResult{}, err
	}
	out := UsageResult{Status: UsageStatus(r.Status)}
	switch out.Status {
	case UsageOK, UsageAlreadyApplied:
		return out, nil
	case UsageSoftBreach, UsageHardBreach:
		out.Dimension = r.field(0)
		out.Current = fieldInt64(r.field(1))
		out.Limit = fieldInt64(r.field(2))
		return out, nil
	}
	return UsageResult{}, fmt.Errorf("%s: %w: status %q", fc.Function, ErrUnexpectedReply, r.Status)
}

// budgetNow checks that the budget exists and reads the server clock, in
// one round trip.
func (c *Client) budgetNow(ctx context.Context, bid keys.BudgetID, bk keys.BudgetKeys) (string, error) {
	res := c.vk.DoMulti(ctx,
		c.vk.B().Exists().Key(bk.Definition()).Build(),
		c.vk.B().Time().Build())
	n, err := res[0].AsInt64()
	if err != nil {
		return "", fmt.Errorf("client: read budget %s: %w", bid, err)
	}
	if n == 0 {
		return "", fmt.Errorf("client: budget %s: %w", bid, ErrBudgetNotFound)
	}
	return timeReplyMillis(res[1])
}

// BudgetUsage is one dimension's limits and running total.
type BudgetUsage struct {
	Name string
	Hard int64 // 0: none
	Soft int64 // 0: none
	Used int64
}

// BudgetSnapshot is a budget's definition, limits and usage, read in one
// round trip.
type BudgetSnapshot struct {
	ID            keys.BudgetID
	ScopeType     string
	ScopeID       string
	Enforcement   string
	OnHardLimit   string
	OnSoftLimit   string
	ResetInterval time.Duration
	NextResetAt   time.Time // zero when the budget never resets
	LastResetAt   time.Time
	ResetCount    int64
	CreatedAt     time.Time
	UpdatedAt     time.Time

	BreachCount         int64 // refused (hard) reports
	SoftBreachCount     int64
	LastBreachAt        time.Time // last hard breach since the last reset
	LastBreachDimension string

	// BreachedAt is the budget reconciler's marker for a never-resetting
	// budget over a hard limit (zero when absent).
	BreachedAt time.Time

	// Dimensions lists every dimension with a limit or usage, by name.
	Dimensions []BudgetUsage
}

// Dimension returns the named dimension's limits and usage.
func (s BudgetSnapshot) Dimension(name string) (BudgetUsage, bool) {
	for _, d := range s.Dimensions {
		if d.Name == name {
			return d, true
		}
	}
	return BudgetUsage{}, false
}

// ReadBudget reads a budget's definition, limits and usage. A missing
// budget is ErrBudgetNotFound.
func (c *Client) ReadBudget(ctx context.Context, bid keys.BudgetID) (BudgetSnapshot, error) {
	bk := keys.Budget(c.parts, bid)
	res := c.vk.DoMulti(ctx,
		c.vk.B().Hgetall().Key(bk.Definition()).Build(),
		c.vk.B().Hgetall().Key(bk.Limits()).Build(),
		c.vk.B().Hgetall().Key(bk.Usage()).Build())
	var h [3]map[string]string
	for i := range res {
		m, err := res[i].AsStrMap()
		if err != nil {
			return BudgetSnapshot{}, fmt.Errorf("client: read budget %s: %w", bid, err)
		}
		h[i] = m
	}
	def, limits, usage := h[0], h[1], h[2]
	if len(def) == 0 {
		return BudgetSnapshot{}, fmt.Errorf("client: budget %s: %w", bid, ErrBudgetNotFound)
	}
	s := BudgetSnapshot{
		ID:                  bid,
		ScopeType:           def["scope_type"],
		ScopeID:             def["scope_id"],
		Enforcement:         def["enforcement_mode"],
		OnHardLimit:         def["on_hard_limit"],
		OnSoftLimit:         def["on_soft_limit"],
		ResetInterval:       time.Duration(fieldInt64(def["reset_interval_ms"])) * time.Millisecond,
		NextResetAt:         msTime(def["next_reset_at"]),
		LastResetAt:         msTime(def["last_reset_at"]),
		ResetCount:          fieldInt64(def["reset_count"]),
		CreatedAt:           msTime(def["created_at"]),
		UpdatedAt:           msTime(def["last_updated_at"]),
		BreachCount:         fieldInt64(def["breach_count"]),
		SoftBreachCount:     fieldInt64(def["soft_breach_count"]),
		LastBreachAt:        msTime(def["last_breach_at"]),
		LastBreachDimension: def["last_breach_dim"],
		BreachedAt:          msTime(usage[usageBreachedAtField]),
	}
	dims := map[string]*BudgetUsage{}
	get := func(name string) *BudgetUsage {
		if dims[name] == nil {
			dims[name] = &BudgetUsage{Name: name}
		}
		return dims[name]
	}
	for f, v := range limits {
		if name, ok := strings.CutPrefix(f, "hard:"); ok {
			get(name).Hard = fieldInt64(v)
		} else if name, ok := strings.CutPrefix(f, "soft:"); ok {
			get(name).Soft = fieldInt64(v)
		}
	}
	for f, v := range usage {
		if f != usageBreachedAtField {
			get(f).Used = fieldInt64(v)
		}
	}
	for _, d := range dims {
		s.Dimensions = append(s.Dimensions, *d)
	}
	sort.Slice(s.Dimensions, func(i, j int) bool { return s.Dimensions[i].Name < s.Dimensions[j].Name })
	return s, nil
}

// ResetBudget zeroes every usage dimension now with one ff_reset_budget,
// clears the last-breach fields and, for a budget with a reset interval,
// schedules the next reset an interval from now (returned; zero for a
// budget that never resets). A missing budget is ErrBudgetNotFound: the
// library does not check and would otherwise start a stray definition.
func (c *Client) ResetBudget(ctx context.Context, bid keys.BudgetID) (time.Time, error) {
	bk := keys.Budget(c.parts, bid)
	now, err := c.budgetNow(ctx, bid, bk)
	if err != nil {
		return time.Time{}, err
	}
	r, err := c.call(ctx, lua.Call{
		Function: "ff_reset_budget",
		Keys:     []string{bk.Definition(), bk.Usage(), bk.Partition().BudgetResets()},
		Args:     []string{bid.String(), now},
	})
	if err != nil {
		return time.Time{}, err
	}
	if next := r.field(0); next != "0" {
		return msTime(next), nil
	}
	return time.Time{}, nil // "0": the budget never resets
}
