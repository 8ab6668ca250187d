//go:build unix

// Package ownership checks that a file belongs to the user running ffscan:
// a secret or an approval another user can replace is neither.
package ownership

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// OwnedByMe fails when fi is owned by another user than the effective one.
func OwnedByMe(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("owned by uid %d, not by this user (uid %d)", st.Uid, uid)
	}
	return nil
}
