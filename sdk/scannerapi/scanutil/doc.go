// Package scanutil is the machinery scanners share, so that a scanner's
// own code is its decisions and nothing else:
//
//   - Intake admits a scan's candidates: each index entry and id once,
//     members that are not canonical ids counted (and removed when they
//     are garbage), ids in failure backoff skipped;
//   - Classify, ErrorCode and IsOutage turn failed replies into the
//     (class, code) pairs of ScanResult.Errors and tell an outage (no
//     reply at all) from failed items;
//   - ZPos pages a sorted set by score without losing or repeating
//     members that share a score;
//   - Cursors keeps where each partition's (or lane's) next page starts;
//   - Memory remembers index entries a scanner read back and left in
//     place, so it does not act on them again every cycle, and forgets
//     them again on its own (see Memory for the rules that keep it a
//     cache of the store and never a source of truth);
//   - Batch sends commands that go together in one Exec and hands each
//     group its replies; Waves repeats that while a scan has work;
//   - ParseOptions checks options against the scanner's OptionSpecs and
//     returns them typed;
//   - CancelCoreFields, CancelKeys, CancelCall and ClassifyCancel cancel an
//     execution from a scanner with the keys of its real state, and read
//     the reply by its Lua code.
//
// Everything here is optional for a third-party scanner and carries no
// dependency beyond scannerapi and keys. The contract is the package's API: see
// docs/api-stability.md.
package scanutil
