//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package store

// SQLiteInUse cannot tell on this system whether another process has the
// database open; it reports that none has.
func SQLiteInUse(path string) (bool, error) { return false, nil }
