package store

import "context"

// ExecRawForTest runs one statement outside the store's methods, as any
// other database client could: tests use it to show what the database
// itself refuses.
func (s *Store) ExecRawForTest(ctx context.Context, q string) error {
	_, err := s.sqlDB.ExecContext(ctx, q)
	return err
}
