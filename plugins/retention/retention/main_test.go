package retention_test

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

var buildDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

func tempDir() (string, error) {
	d, err := os.MkdirTemp("", "retention-test-")
	buildDir = d
	return d, err
}

func goBuild(out, pkg string) error {
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
