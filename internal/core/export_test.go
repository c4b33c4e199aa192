package core

// Statement returns the log's statement called name (queries.sql, groupcommit.sql) as rendered
// for its tables.
func (l *Log) Statement(name string) string { return l.q[name] }
