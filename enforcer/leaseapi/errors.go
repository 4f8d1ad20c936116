package leaseapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Class is an error_class of the API.
type Class string

const (
	ClassBadRequest       Class = "bad_request"
	ClassUnauthorized     Class = "unauthorized"
	ClassForbidden        Class = "forbidden"
	ClassNotFound         Class = "not_found"
	ClassMethodNotAllowed Class = "method_not_allowed"
	ClassTooLarge         Class = "too_large"
	ClassDie              Class = "die"
	ClassWait             Class = "wait"
	ClassRateLimited      Class = "rate_limited"
	ClassShuttingDown     Class = "shutting_down"
	ClassInternal         Class = "internal"
	// ClassGone is an item's class in a bulk heartbeat: the session holds
	// no active lease (expired, released or revoked).
	ClassGone Class = "gone"
)

// Sentinels: errors.Is(err, ErrForbidden) holds for every *Error of that
// class.
var (
	ErrBadRequest       = errors.New(string(ClassBadRequest))
	ErrUnauthorized     = errors.New(string(ClassUnauthorized))
	ErrForbidden        = errors.New(string(ClassForbidden))
	ErrNotFound         = errors.New(string(ClassNotFound))
	ErrMethodNotAllowed = errors.New(string(ClassMethodNotAllowed))
	ErrTooLarge         = errors.New(string(ClassTooLarge))
	ErrDie              = errors.New(string(ClassDie))
	ErrWait             = errors.New(string(ClassWait))
	ErrRateLimited      = errors.New(string(ClassRateLimited))
	ErrShuttingDown     = errors.New(string(ClassShuttingDown))
	ErrInternal         = errors.New(string(ClassInternal))
	ErrGone             = errors.New(string(ClassGone))
	// ErrNoServer: nothing serves the API at the client's address (klockd
	// is not running).
	ErrNoServer = errors.New("klockd's lease API is not running")
	// ErrConfig: the TCP listener's options are refused; klockd does not
	// start.
	ErrConfig = errors.New("leaseapi: refused configuration")
)

// classes lists every class with its HTTP status, retryability and
// sentinel (the OpenAPI test checks openapi.yaml names exactly these).
var classes = map[Class]struct {
	status    int
	retryable bool
	err       error
}{
	ClassBadRequest:       {http.StatusBadRequest, false, ErrBadRequest},
	ClassUnauthorized:     {http.StatusUnauthorized, false, ErrUnauthorized},
	ClassForbidden:        {http.StatusForbidden, false, ErrForbidden},
	ClassNotFound:         {http.StatusNotFound, false, ErrNotFound},
	ClassMethodNotAllowed: {http.StatusMethodNotAllowed, false, ErrMethodNotAllowed},
	ClassTooLarge:         {http.StatusRequestEntityTooLarge, false, ErrTooLarge},
	ClassDie:              {http.StatusConflict, true, ErrDie},
	ClassWait:             {http.StatusConflict, true, ErrWait},
	ClassRateLimited:      {http.StatusTooManyRequests, true, ErrRateLimited},
	ClassShuttingDown:     {http.StatusServiceUnavailable, true, ErrShuttingDown},
	ClassInternal:         {http.StatusInternalServerError, false, ErrInternal},
	ClassGone:             {http.StatusNotFound, false, ErrGone},
}

// Error is the API's typed failure, in its wire shape.
type Error struct {
	OK        bool   `json:"ok"` // always false
	Class     Class  `json:"error_class"`
	Retryable bool   `json:"retryable"`
	Message   string `json:"message"`
	// Field locates a bad request's fault: "intents[2].object", "ttl_ms".
	Field string `json:"field,omitempty"`
	// RetryAfterMS: when a rate_limited acquire may be retried.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
	// Status is the HTTP status it came with (client side).
	Status int `json:"-"`
}

func (e *Error) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Class, e.Field, e.Message)
	}
	return string(e.Class) + ": " + e.Message
}

// Is matches the class's sentinel.
func (e *Error) Is(target error) bool {
	c, ok := classes[e.Class]
	return ok && c.err == target
}

// newError builds an error of class c with the class's retryability.
func newError(c Class, format string, a ...any) *Error {
	return &Error{Class: c, Retryable: classes[c].retryable, Message: fmt.Sprintf(format, a...)}
}

// badField is a bad_request located at field.
func badField(field, format string, a ...any) *Error {
	e := newError(ClassBadRequest, format, a...)
	e.Field = field
	return e
}

// status is the HTTP status of e's class.
func (e *Error) status() int {
	if c, ok := classes[e.Class]; ok {
		return c.status
	}
	return http.StatusInternalServerError
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(newError(ClassInternal, "encode the answer: %v", err))
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeError writes e (its class's status; 429 with Retry-After).
func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfterMS > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(float64(e.RetryAfterMS)/1000)), 10))
	}
	writeJSON(w, e.status(), e)
}

// ms is d in whole milliseconds, rounded up so that a positive wait is
// never 0.
func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
