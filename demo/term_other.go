//go:build !linux

package demo

import "io"

// termWidth returns 0 (unknown) where the terminal size is not queried.
func termWidth(io.Writer) int { return 0 }
