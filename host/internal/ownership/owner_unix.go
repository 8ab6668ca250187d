//go:build unix

package admintoken

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

func ownedByMe(fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := os.Geteuid(); int(st.Uid) != uid {
		return fmt.Errorf("owned by uid %d, not by this user (uid %d)", st.Uid, uid)
	}
	return nil
}
