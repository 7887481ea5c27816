package metrics

// ForgetFullCount makes the next table read count every state, as if the
// recount interval had passed.
func (m *Metrics) ForgetFullCount() { m.table.reader.Forget() }
