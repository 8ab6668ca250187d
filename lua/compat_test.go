package lua

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	testenv "github.com/ffscan/ffscan/sdk/testserver"
)

// compatDir finds FlowFabric's golden vectors: $FFSCAN_SHARED_DIR/compat, or
// ../shared/compat beside the repository (where CI puts it). The
// repository's root is the directory holding go.work: lua is a module of
// its own, so the nearest go.mod is lua's.
func compatDir() (string, error) {
	if d := os.Getenv("FFSCAN_SHARED_DIR"); d != "" {
		return filepath.Join(d, "compat"), nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return filepath.Join(filepath.Dir(dir), "shared", "compat"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", errors.New("go.work not found above " + wd + "; set FFSCAN_SHARED_DIR")
		}
	}
}

var summaryRe = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)
var notImplRe = regexp.MustCompile(`^(\d+) not implemented$`)

// TestCompatVectors replays every FlowFabric golden vector against our
// library with the shared compatcheck tool. Vectors calling functions we do
// not have yet are reported as not implemented (by name), never as passed;
// any replayed vector that differs fails the test.
func TestCompatVectors(t *testing.T) {
	replayCompatSet(t, "vectors", "compat")
}

// TestCompatFuzz replays the scenarios differential testing against
// FlowFabric's library found (recorded from FlowFabric, so they pin its
// behaviour where the golden vectors are silent), with its own summary line.
func TestCompatFuzz(t *testing.T) {
	replayCompatSet(t, "fuzz", "compat fuzz")
}

// replayCompatSet replays one vector directory under the shared compat
// directory against the key-guarded library and prints a summary line
// starting with label.
func replayCompatSet(t *testing.T, set, label string) {
	t.Helper()
	dir, err := compatDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, set)); err != nil {
		msg := fmt.Sprintf("%s: skipped, %s not found at %s (no ../shared beside this clone)", label, set, dir)
		fmt.Println(msg)
		t.Skip(msg)
	}

	bin := filepath.Join(t.TempDir(), "compatcheck")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(dir, "compatcheck")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build compatcheck: %v\n%s", err, out)
	}

	// Replayed against the key-guarded build: a function touching a key
	// outside its KEYS (and the listed exceptions) fails its vector.
	srv := testenv.New(t)
	c := srv.Client(t)
	if err := c.Do(context.Background(), c.B().FunctionLoad().Replace().FunctionCode(guardedLibrary()).Build()).Error(); err != nil {
		t.Fatalf("load the key-guarded library: %v", err)
	}

	args := []string{"-addr", srv.Addr, "-vectors", filepath.Join(dir, set), "-missing", "skip", "-max-diff", "40"}
	if skip := os.Getenv("FFSCAN_COMPAT_SKIP"); skip != "" {
		args = append(args, "-skip", skip)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()

	passed, failed, notImpl := -1, -1, 0
	var notImplNames, failNames []string
	sc := bufio.NewScanner(bytes.NewReader(stdout.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "NOTIMPL "):
			notImplNames = append(notImplNames, strings.TrimPrefix(line, "NOTIMPL "))
		case strings.HasPrefix(line, "FAIL "):
			failNames = append(failNames, strings.TrimPrefix(line, "FAIL "))
		}
		if m := notImplRe.FindStringSubmatch(line); m != nil {
			notImpl, _ = strconv.Atoi(m[1])
		}
		if m := summaryRe.FindStringSubmatch(line); m != nil {
			passed, _ = strconv.Atoi(m[1])
			failed, _ = strconv.Atoi(m[2])
		}
	}
	if passed < 0 {
		t.Fatalf("compatcheck printed no summary (exit %v)\nstdout:\n%s\nstderr:\n%s", runErr, stdout.String(), stderr.String())
	}
	for _, n := range notImplNames {
		fmt.Printf("%s: not yet implemented: %s\n", label, n)
	}
	for _, n := range failNames {
		fmt.Printf("%s: FAILED: %s\n", label, n)
	}
	summary := fmt.Sprintf("%s: %d passed, %d failed, %d not implemented", label, passed, failed, notImpl)
	fmt.Println(summary)
	t.Log(summary)
	if failed > 0 || (runErr != nil && failed == 0) {
		t.Fatalf("%s replay failed (exit %v):\n%s\n%s", label, runErr, stdout.String(), stderr.String())
	}
}
