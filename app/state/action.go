package state

// Action is what a fulfilment row does at the receiver: perform what the
// payment paid for, or take it back after a refund or dispute. One
// vocabulary for the row (fulfilment.action), the domain and the request
// (connector.Request.Action).
type Action string

// The actions.
const (
	// Fulfil performs what the payment paid for.
	Fulfil Action = "fulfil"
	// Revoke takes back what a fulfilled payment's fulfilment did.
	Revoke Action = "revoke"
)
