package client

import (
	"encoding/json"
	"time"
)

// RetryPolicy says how often a failed attempt is retried and after what
// delay. It is stored in the execution policy (retry_policy) and sent with
// every fail call, where the library decides between a retry and a
// terminal failure.
type RetryPolicy struct {
	MaxRetries int     // retries after the first attempt; 0 means none
	Backoff    Backoff // delay before each retry
}

// BackoffType selects a Backoff formula.
type BackoffType string

// Backoff types understood by the library.
const (
	BackoffFixed       BackoffType = "fixed"
	BackoffExponential BackoffType = "exponential"
)

// Backoff is the delay before a retry: Delay for fixed; for exponential
// min(Initial * Multiplier^retry, Max).
type Backoff struct {
	Type       BackoffType
	Delay      time.Duration // fixed
	Initial    time.Duration // exponential
	Max        time.Duration // exponential
	Multiplier float64       // exponential
}

// FixedBackoff waits d before every retry.
func FixedBackoff(d time.Duration) Backoff { return Backoff{Type: BackoffFixed, Delay: d} }

// ExponentialBackoff waits initial, then multiplies by mult per retry, up to
// max.
func ExponentialBackoff(initial, max time.Duration, mult float64) Backoff {
	return Backoff{Type: BackoffExponential, Initial: initial, Max: max, Multiplier: mult}
}

func (p *RetryPolicy) validate(field string) error {
	if p.MaxRetries < 0 {
		return invalid(field+".MaxRetries", "%d is negative", p.MaxRetries)
	}
	b := p.Backoff
	switch b.Type {
	case BackoffFixed:
		if b.Delay < 0 {
			return invalid(field+".Backoff.Delay", "%v is negative", b.Delay)
		}
	case BackoffExponential:
		if b.Initial < 0 || b.Max < b.Initial {
			return invalid(field+".Backoff", "need 0 <= Initial <= Max, got %v and %v", b.Initial, b.Max)
		}
		if b.Multiplier < 1 {
			return invalid(field+".Backoff.Multiplier", "%v is below 1", b.Multiplier)
		}
	default:
		return invalid(field+".Backoff.Type", "%q is neither fixed nor exponential", b.Type)
	}
	return nil
}

// retryPolicyJSON is FlowFabric's RetryPolicy serialisation, which both the
// stored policy and ff_fail_execution's ARGV use.
type retryPolicyJSON struct {
	MaxRetries int         `json:"max_retries"`
	Backoff    backoffJSON `json:"backoff"`
}

type backoffJSON struct {
	Type           string  `json:"type"`
	DelayMs        *int64  `json:"delay_ms,omitempty"`
	InitialDelayMs *int64  `json:"initial_delay_ms,omitempty"`
	MaxDelayMs     *int64  `json:"max_delay_ms,omitempty"`
	Multiplier     float64 `json:"multiplier,omitempty"`
}

func (p *RetryPolicy) toJSON() *retryPolicyJSON {
	if p == nil {
		return nil
	}
	b := backoffJSON{Type: string(p.Backoff.Type)}
	switch p.Backoff.Type {
	case BackoffFixed:
		b.DelayMs = ptr(p.Backoff.Delay.Milliseconds())
	case BackoffExponential:
		b.InitialDelayMs = ptr(p.Backoff.Initial.Milliseconds())
		b.MaxDelayMs = ptr(p.Backoff.Max.Milliseconds())
		b.Multiplier = p.Backoff.Multiplier
	}
	return &retryPolicyJSON{MaxRetries: p.MaxRetries, Backoff: b}
}

func ptr[T any](v T) *T { return &v }

// policyJSON is the subset of FlowFabric's ExecutionPolicy the client
// writes. Every FlowFabric field has a serde default, so a partial object
// reads back in Rust; the library itself reads max_reclaim_count,
// max_replay_count and routing_requirements.required_capabilities.
type policyJSON struct {
	Priority            int                  `json:"priority,omitempty"`
	RetryPolicy         *retryPolicyJSON     `json:"retry_policy,omitempty"`
	TimeoutPolicy       *timeoutPolicyJSON   `json:"timeout_policy,omitempty"`
	MaxReclaimCount     int                  `json:"max_reclaim_count,omitempty"`
	MaxReplayCount      int                  `json:"max_replay_count,omitempty"`
	RoutingRequirements *routingRequirements `json:"routing_requirements,omitempty"`
	DedupWindowMs       int64                `json:"dedup_window_ms,omitempty"`
}

type timeoutPolicyJSON struct {
	AttemptTimeoutMs int64 `json:"attempt_timeout_ms,omitempty"`
}

type routingRequirements struct {
	RequiredCapabilities []string `json:"required_capabilities"`
}

// storedPolicy is what the worker reads back from the :policy key: the
// retry policy for fail and the attempt timeout for claim.
type storedPolicy struct {
	RetryPolicy   json.RawMessage    `json:"retry_policy"`
	TimeoutPolicy *timeoutPolicyJSON `json:"timeout_policy"`
}

// parseStoredPolicy reads a policy written by us or by FlowFabric. A
// malformed policy reads as "no retries, no timeout", which is what the
// library itself does with a malformed retry policy.
func parseStoredPolicy(s string) (retryJSON string, attemptTimeoutMs int64) {
	if s == "" {
		return "", 0
	}
	var p storedPolicy
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return "", 0
	}
	if len(p.RetryPolicy) > 0 && string(p.RetryPolicy) != "null" {
		retryJSON = string(p.RetryPolicy)
	}
	if p.TimeoutPolicy != nil {
		attemptTimeoutMs = p.TimeoutPolicy.AttemptTimeoutMs
	}
	return retryJSON, attemptTimeoutMs
}

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}
