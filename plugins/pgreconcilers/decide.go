package pgreconcilers

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ffscan/ffscan/keys"
	"github.com/ffscan/ffscan/sdk/scannerapi"
	"github.com/ffscan/ffscan/sdk/scannerapi/scanutil"
)

// This file holds the reconcilers' pure decisions: what a candidate
// member is (the action's arguments) and what an action's reply means.
// What is due, and what to do with it, the database decides
// (host/postgres/sql/library.sql); the scan is in reconciler.go.

// workerArgs checks "<registry partition>/<JSON>" and passes it whole (the
// library function reads the namespace and instance id out of the JSON).
func workerArgs(m string) ([]string, error) {
	p, ident, ok := strings.Cut(m, "/")
	if !ok {
		return nil, fmt.Errorf("no '/'")
	}
	if n, err := strconv.Atoi(p); err != nil || n < 0 || n > 255 {
		return nil, fmt.Errorf("registry partition %q", p)
	}
	if !strings.HasPrefix(ident, "[") {
		return nil, fmt.Errorf("identity %q is not a JSON array", ident)
	}
	return []string{m}, nil
}

// eventArgs reads a completion event id.
func eventArgs(m string) ([]string, error) {
	n, err := strconv.ParseInt(m, 10, 64)
	if err != nil || n <= 0 {
		return nil, fmt.Errorf("event id %q", m)
	}
	return []string{strconv.FormatInt(n, 10)}, nil
}

// attemptArgs reads "<execution uuid>/<attempt index>".
func attemptArgs(m string) ([]string, error) {
	id, idx, ok := strings.Cut(m, "/")
	if !ok {
		return nil, fmt.Errorf("no '/'")
	}
	u, err := keys.ParseUUID(id)
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("attempt index %q", idx)
	}
	return []string{u.String(), strconv.Itoa(n)}, nil
}

// uuidArgs reads one uuid.
func uuidArgs(m string) ([]string, error) {
	u, err := keys.ParseUUID(m)
	if err != nil {
		return nil, err
	}
	return []string{u.String()}, nil
}

// twoUUIDs reads two uuids joined by '/': "<execution>/<suspension>",
// "<flow>/<downstream execution>".
func twoUUIDs(m string) ([]string, error) {
	e, s, ok := strings.Cut(m, "/")
	if !ok {
		return nil, fmt.Errorf("no '/'")
	}
	eu, err := keys.ParseUUID(e)
	if err != nil {
		return nil, err
	}
	su, err := keys.ParseUUID(s)
	if err != nil {
		return nil, err
	}
	return []string{eu.String(), su.String()}, nil
}

// budgetArgs passes a budget id through (text in the database).
func budgetArgs(m string) ([]string, error) {
	if m == "" || len(m) > maxBudgetIDLength {
		return nil, fmt.Errorf("budget id of %d bytes", len(m))
	}
	return []string{m}, nil
}

// outcomeKind is what one action function did.
type outcomeKind uint8

const (
	outDone    outcomeKind = iota // a reply the spec counts as work done
	outLeft                       // any other success: the function re-checked and left it
	outRefused                    // {0, code}
	outFailed                     // no usable reply
)

type outcome struct {
	kind  outcomeKind
	class scannerapi.ErrorClass // for outRefused and outFailed
	code  string
}

// classifyAction reads one action's reply; done are the statuses that
// mean the reconciler changed something.
func classifyAction(r scannerapi.Reply, done []string) outcome {
	fr, err := scannerapi.ParseFunctionReply(r)
	if err != nil {
		class, code := scanutil.Classify(err)
		return outcome{kind: outFailed, class: class, code: code}
	}
	if !fr.Success {
		return outcome{kind: outRefused, class: scannerapi.ErrLua, code: fr.Code}
	}
	for _, d := range done {
		if fr.Status == d {
			return outcome{kind: outDone, code: d}
		}
	}
	return outcome{kind: outLeft, code: fr.Status}
}
