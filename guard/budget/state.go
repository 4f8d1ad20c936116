package budget

import (
	"database/sql"
	"errors"
	"fmt"
)

// grantState is one grant's limits and running counters.
type grantState struct {
	key         Key
	limits      Limits
	parent      *Key
	depth       uint32
	root        string
	tool        string
	server      string
	invocations uint64
	charged     uint64
}

// holdState is one pre-charge, open until reconciled or reversed.
type holdState struct {
	id       string
	key      Key
	reserved uint64 // in the grant's currency
	open     bool
	tool     string
	agent    string // Request.AgentID, for the reconcile's or reversal's receipt (memory only)
}

// SQLite integers are signed 64-bit; u64 minor units (wei reach 2^63 at
// 9.2 ETH) are stored bit-for-bit as int64 and only ever compared in Go.
func i64(u uint64) int64 { return int64(u) }
func u64(i int64) uint64 { return uint64(i) }
func nullU(p *uint64) any {
	if p == nil {
		return nil
	}
	return i64(*p)
}

// querier reads SQLite: a transaction, or the database outside one.
type querier interface {
	QueryRow(query string, args ...any) *sql.Row
}

func loadGrant(tx querier, k Key) (*grantState, error) {
	var g grantState
	var per, total, pg sql.NullInt64
	var pc sql.NullString
	var maxInv, inv, charged int64
	err := tx.QueryRow(`SELECT currency, per_call, total, max_invocations, parent_capability, parent_grant, depth, root_holder, tool, server, invocations, charged
		FROM grants WHERE capability = ? AND grant_index = ?`, k.Capability, k.Grant).
		Scan(&g.limits.Currency, &per, &total, &maxInv, &pc, &pg, &g.depth, &g.root, &g.tool, &g.server, &inv, &charged)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	g.key = k
	if per.Valid {
		v := u64(per.Int64)
		g.limits.PerInvocation = &v
	}
	if total.Valid {
		v := u64(total.Int64)
		g.limits.Total = &v
	}
	if pc.Valid {
		g.parent = &Key{Capability: pc.String, Grant: uint32(pg.Int64)}
	}
	g.limits.MaxInvocations, g.invocations, g.charged = u64(maxInv), u64(inv), u64(charged)
	return &g, nil
}

func saveGrant(tx *sql.Tx, stmts *statements, g *grantState) error {
	var pc, pg any
	if g.parent != nil {
		pc, pg = g.parent.Capability, g.parent.Grant
	}
	_, err := tx.Stmt(stmts.saveGrant).Exec(
		g.key.Capability, g.key.Grant, g.limits.Currency, nullU(g.limits.PerInvocation), nullU(g.limits.Total), i64(g.limits.MaxInvocations),
		pc, pg, g.depth, g.root, g.tool, g.server, i64(g.invocations), i64(g.charged))
	return err
}

func loadHold(tx querier, id string) (*holdState, error) {
	h := holdState{id: id}
	var reserved int64
	err := tx.QueryRow(`SELECT capability, grant_index, reserved, open, tool FROM holds WHERE id = ?`, id).
		Scan(&h.key.Capability, &h.key.Grant, &reserved, &h.open, &h.tool)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	h.reserved = u64(reserved)
	return &h, nil
}

func (g *grantState) String() string { return fmt.Sprintf("%s (%s)", g.key, g.tool) }

// statements are prepared once on the ledger's single connection.
type statements struct {
	saveGrant, journalPos *sql.Stmt
	holds, events         *multiInsert
}

func prepareStatements(db *sql.DB) (*statements, error) {
	var st statements
	var err error
	st.saveGrant, err = db.Prepare(`INSERT INTO grants (capability, grant_index, currency, per_call, total, max_invocations, parent_capability, parent_grant, depth, root_holder, tool, server, invocations, charged)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (capability, grant_index) DO UPDATE SET invocations = excluded.invocations, charged = excluded.charged`)
	if err != nil {
		return nil, err
	}
	st.journalPos, err = db.Prepare(`UPDATE journal SET seq = ?, off = ?`)
	if err != nil {
		st.saveGrant.Close()
		return nil, err
	}
	// A hold is inserted open and, when reconciled or released in a later
	// batch, written again closed.
	st.holds, err = newMultiInsert(db, "holds", "id, capability, grant_index, reserved, open, tool", "ON CONFLICT (id) DO UPDATE SET open = excluded.open")
	if err != nil {
		st.saveGrant.Close()
		st.journalPos.Close()
		return nil, err
	}
	st.events, err = newMultiInsert(db, "events", "id, receipt", "")
	if err != nil {
		st.saveGrant.Close()
		st.journalPos.Close()
		st.holds.close()
		return nil, err
	}
	return &st, nil
}

// holdRow appends h's row for statements.holds.
func holdRow(args []any, h *holdState) []any {
	return append(args, h.id, h.key.Capability, h.key.Grant, i64(h.reserved), h.open, h.tool)
}
