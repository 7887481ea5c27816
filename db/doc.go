// Package db holds every SQL statement Guardian runs, with pgx. Nothing else
// in Guardian writes SQL. Storage errors are translated in one place
// (translate) so callers test for ErrNotFound and ErrConflict, never for
// pgx's own errors.
package db
