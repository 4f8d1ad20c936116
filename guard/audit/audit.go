package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/klocklabs/klock/internal/hashchain"
)

// ErrUnwritable means the audit log cannot be written: no call may proceed.
var ErrUnwritable = errors.New("audit log unwritable")

// Events of a record.
const (
	EventDecision = "decision" // a refusal or an idempotent replay: no dispatch
	EventDispatch = "dispatch" // written and synced before the tool runs
	EventResult   = "result"   // after the tool returned; synced lazily
	EventRollback = "rollback" // a contract's rollback run for a killed session
)

// Record is one audit line. Seq and Prev are the chain's.
type Record struct {
	Seq        uint64            `json:"seq"`
	Prev       string            `json:"prev"`
	Time       string            `json:"time"`
	Event      string            `json:"event"` // decision | dispatch | result
	CallID     string            `json:"call_id"`
	Actor      string            `json:"actor"` // the agent id
	RunID      string            `json:"run_id,omitempty"`
	Tool       string            `json:"tool"`
	Args       json.RawMessage   `json:"args,omitempty"`
	ArgsSHA256 map[string]string `json:"args_sha256,omitempty"` // logs before keyed digests; no longer written
	// ArgsHMAC: confidential mode's keyed digest of each argument.
	ArgsHMAC   map[string]string `json:"args_hmac,omitempty"`
	Verdict    string            `json:"verdict,omitempty"` // allow | deny | escalate | approved | replay
	Result     string            `json:"result,omitempty"`  // ok | tool_error | <error_class>
	Check      string            `json:"check,omitempty"`
	Reason     string            `json:"reason,omitempty"`
	Message    string            `json:"message,omitempty"`
	ApprovalID string            `json:"approval_id,omitempty"`
	IdemKey    string            `json:"idempotency_key,omitempty"`
	DurationMS float64           `json:"duration_ms,omitempty"`
	TokensUsed int64             `json:"tokens_used,omitempty"` // the tool's report (seed 004 §13: tokens and duration)
	OutSHA256  string            `json:"output_sha256,omitempty"`
	OutBytes   int               `json:"output_bytes,omitempty"`
	// Recorded holds the values the contract's audit_logging.records names
	// (arguments and result fields); in confidential mode RecordedHMAC
	// holds their keyed digests instead.
	Recorded     map[string]any    `json:"recorded,omitempty"`
	RecordedHMAC map[string]string `json:"recorded_hmac,omitempty"`
	// Rollback is what a rollback record undid: the call id of the effect.
	Rollback string `json:"rollback_of,omitempty"`
	// Counters (dispatch records) is what the call left in the gateway's
	// rate-limit state: the audit log, flushed before every dispatch, is
	// that state's write-ahead log (WithReplay).
	Counters *Counters `json:"counters,omitempty"`
}

// Counters is one dispatched call's rate-limit state, as absolute
// values a restart merges (the larger count, the later bucket), so
// records replayed in any order, or twice, give the same state.
type Counters struct {
	Calls   int               `json:"calls"` // the run's calls of the tool, this one included
	Buckets map[string]Bucket `json:"buckets,omitempty"`
	// RetryKey: a non-idempotent call's arguments, which a repeat in the
	// run must not reach the tool with unapproved.
	RetryKey string `json:"retry_key,omitempty"`
}

// Bucket is one token bucket after the call took from it.
type Bucket struct {
	Tokens float64 `json:"tokens"`
	LastNS int64   `json:"last_ns"`
}

// Log appends records to one chain file. Safe for concurrent use.
type Log struct {
	w    *hashchain.Writer
	now  func() time.Time
	hash *Hasher
}

// Hasher is the log's keyed digest of confidential values.
func (l *Log) Hasher() *Hasher { return l.hash }

// Option configures Open.
type Option func(*options)

type options struct {
	chain   []hashchain.Option
	now     func() time.Time
	keyFile string
}

// countersField marks the lines WithReplay decodes: the others are only
// verified.
var countersField = []byte(`"counters":`)

// WithReplay hands f, while Open verifies the log, every dispatch record
// of actor that carries Counters, in the log's order (the record holds
// only its event, actor, tool, run, call id and counters): a gateway merges
// them into its rate-limit state, whose own copy is not flushed before a
// dispatch. An error from f stops Open.
func WithReplay(actor string, f func(*Record) error) Option {
	return func(o *options) {
		o.chain = append(o.chain, hashchain.WithEachLine(func(_ uint64, line []byte) error {
			if !bytes.Contains(line, countersField) {
				return nil
			}
			// Only what a merge reads is decoded (the arguments and
			// the recorded values are skipped).
			var r struct {
				Event, Actor, Tool string
				RunID              string `json:"run_id"`
				CallID             string `json:"call_id"`
				Counters           *Counters
			}
			if err := json.Unmarshal(line, &r); err != nil {
				return err
			}
			if r.Event != EventDispatch || r.Actor != actor || r.Counters == nil {
				return nil
			}
			return f(&Record{Event: r.Event, Actor: r.Actor, Tool: r.Tool, RunID: r.RunID, CallID: r.CallID, Counters: r.Counters})
		}))
	}
}

// WithKeyFile names the deployment's secret for confidential digests
// (default: audit.key beside the log), made on first use.
func WithKeyFile(path string) Option { return func(o *options) { o.keyFile = path } }

// WithoutSync skips the fsync per line (benchmarks only: a crash may lose
// acknowledged records).
func WithoutSync() Option {
	return func(o *options) { o.chain = append(o.chain, hashchain.WithoutSync()) }
}

// WithClock sets the clock of Time.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// Open opens (creating the directory and file) the log at path, verifies
// the chain so far and positions after its last line.
func Open(path string, opts ...Option) (*Log, error) {
	o := options{now: time.Now}
	for _, f := range opts {
		f(&o)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("%w: %v (make the directory writable or pass another --audit path)", ErrUnwritable, err)
	}
	if o.keyFile == "" {
		o.keyFile = filepath.Join(filepath.Dir(path), KeyFile)
	}
	key, err := LoadKey(o.keyFile)
	if err != nil {
		return nil, fmt.Errorf("refusing to open the audit log without its confidential-mode key: %w", err)
	}
	w, err := hashchain.Open(path, o.chain...)
	if err != nil {
		if errors.Is(err, hashchain.ErrBroken) {
			return nil, fmt.Errorf("audit log %s: %w (it was altered: keep it as evidence and start a new log)", path, err)
		}
		return nil, fmt.Errorf("%w: %v", ErrUnwritable, err)
	}
	return &Log{w: w, now: o.now, hash: NewHasher(key)}, nil
}

// Append writes r as the next line; Seq, Prev and Time are filled in. It
// returns once the record is on stable storage, except a "result" record,
// which it returns once the record is in the file, leaving the fsync to the
// next record (or to the chain writer within hashchain.DeferredSyncDelay):
// see the package documentation for why that is enough. Concurrent appends
// share fsyncs.
func (l *Log) Append(r *Record) error {
	build := func(h hashchain.Head) ([]byte, error) {
		r.Seq, r.Prev = h.Next(), h.Hash
		if r.Time == "" {
			r.Time = l.now().UTC().Format(time.RFC3339Nano)
		}
		return json.Marshal(r)
	}
	var err error
	if r.Event == EventResult {
		_, err = l.w.AppendDeferred(build)
	} else {
		_, err = l.w.Append(build)
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnwritable, err)
	}
	return nil
}

// Close closes the file.
func (l *Log) Close() error { return l.w.Close() }

// Verify checks the chain of the log at path and returns its line count.
func Verify(path string) (uint64, error) {
	h, err := hashchain.VerifyFile(path, nil)
	return h.Seq, err
}

// SetArgs stores args in r: as they are, or (confidential) as h's keyed
// digest of each argument's canonical JSON, so equal values stay
// comparable across records without their plaintext (keyed.go says why
// never a plain hash).
func (r *Record) SetArgs(args map[string]any, confidential bool, h *Hasher) {
	if len(args) == 0 {
		return
	}
	if !confidential {
		r.Args, _ = json.Marshal(args)
		return
	}
	r.ArgsHMAC = make(map[string]string, len(args))
	for k, v := range args {
		r.ArgsHMAC[k] = h.Digest(v)
	}
}

// SetOutput records the output's hash and size, never its content.
func (r *Record) SetOutput(out []byte) {
	if len(out) == 0 {
		return
	}
	s := sha256.Sum256(out)
	r.OutSHA256, r.OutBytes = hex.EncodeToString(s[:]), len(out)
}

// HashValue is the hex SHA-256 of v's RFC 8785 canonical JSON.
func HashValue(v any) string {
	raw, err := json.Marshal(v)
	if err == nil {
		if c, err2 := jcs.Transform(raw); err2 == nil {
			raw = c
		}
	}
	s := sha256.Sum256(raw)
	return hex.EncodeToString(s[:])
}
