package metrics

import "time"

// ForgetFullCount makes the next table read count every state, as if
// FullRecount had passed.
func (m *Metrics) ForgetFullCount() {
	m.table.mu.Lock()
	defer m.table.mu.Unlock()
	m.table.countedAllAt = time.Time{}
}
