package web

import "strings"

// fulfilmentID reads a fulfilment id from a request as the database writes
// it. A UUID is case-insensitive: an id given in upper case (copied from a
// receiver's log, say) must find its row, not miss it and answer "not
// found" or "moved".
func fulfilmentID(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// fulfilmentIDs reads each of ids with fulfilmentID.
func fulfilmentIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = fulfilmentID(id)
	}
	return out
}
