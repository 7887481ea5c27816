package tokens

// ForceScript makes Take use the GET+DEL Lua script, as on a server older
// than 6.2: the tests' way onto that path.
func (r *Redis) ForceScript() { r.getdel = false }
