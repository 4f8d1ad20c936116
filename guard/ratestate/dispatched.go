package ratestate

import "github.com/klocklabs/klock/guard/check"

// The calls of non-idempotent tools that reached them, per run and
// argument key (check's retry rule): a restarted gateway still asks a
// human before such a call runs a second time.

const dispatchedSchema = `
CREATE TABLE IF NOT EXISTS dispatched (
  tool TEXT NOT NULL, run TEXT NOT NULL, key TEXT NOT NULL, call_id TEXT NOT NULL, PRIMARY KEY (tool, run, key));
`

var _ check.DispatchState = (*Store)(nil)

// LoadDispatched returns tool -> run -> key -> call id.
func (s *Store) LoadDispatched() (map[string]map[string]map[string]string, error) {
	rows, err := s.db.Query(`SELECT tool, run, key, call_id FROM dispatched`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]map[string]map[string]string{}
	for rows.Next() {
		var tool, run, key, id string
		if err := rows.Scan(&tool, &run, &key, &id); err != nil {
			return nil, err
		}
		if out[tool] == nil {
			out[tool] = map[string]map[string]string{}
		}
		if out[tool][run] == nil {
			out[tool][run] = map[string]string{}
		}
		out[tool][run][key] = id
	}
	return out, rows.Err()
}

// SaveDispatched records the first call of key in run; a later one does
// not replace it.
func (s *Store) SaveDispatched(tool, run, key, callID string) error {
	_, err := s.db.Exec(`INSERT INTO dispatched (tool, run, key, call_id) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`, tool, run, key, callID)
	return err
}

// ForgetDispatched drops the record of key in run.
func (s *Store) ForgetDispatched(tool, run, key string) error {
	_, err := s.db.Exec(`DELETE FROM dispatched WHERE tool = ? AND run = ? AND key = ?`, tool, run, key)
	return err
}
