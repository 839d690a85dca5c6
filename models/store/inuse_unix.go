//go:build linux || darwin || freebsd || netbsd || openbsd

package store

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// dmsOffset is the byte of a WAL database's shared-memory file (-shm) that
// every connection holds a read lock on for as long as it has the database
// open (SQLite's "DMS" slot, after the eight WAL locks from byte 120): a
// process that can take a write lock on it is the only one with the file
// open.
const dmsOffset = 128

// SQLiteInUse reports whether another process has the SQLite database at
// path open (a running server, a command in progress): whether the read
// lock SQLite keeps on its shared-memory file is held. A database without
// that file is open nowhere. The locks are the operating system's and per
// process, so connections of the calling process itself are not seen.
func SQLiteInUse(path string) (bool, error) {
	f, err := os.Open(path + "-shm")
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: dmsOffset, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false, err
	}
	return lk.Type != syscall.F_UNLCK, nil
}
