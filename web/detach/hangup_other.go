//go:build !linux

package detach

import "net"

func watchHangup(net.Conn, func()) func() { return func() {} }
