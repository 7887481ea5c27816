// Package logtest holds what a logger wrote, for tests that assert on it:
// what an operator is told, and that no secret is among it.
package logtest

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that a logger's goroutines (or a child
// process's output) and a test may use at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p (io.Writer).
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
