package db

// StaleStatistics is staleStatistics, for the tests of what a server's
// settings other than the test server's would say.
var StaleStatistics = staleStatistics
