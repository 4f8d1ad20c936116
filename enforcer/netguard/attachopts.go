package netguard

// AttachOption configures Guard.Attach.
type AttachOption func(*attachOpts)

type attachOpts struct {
	flags uint32
}

// ReportAllowed makes the session report every allowed connect, sendmsg
// with an address, bind and (with NET:raw) raw socket as well as the
// denials: for a session whose other backends leave no syscall tracepoint
// to report them (bpf-lsm). Without it only denials are reported, and the
// tracepoint observer reports what was allowed.
func ReportAllowed() AttachOption {
	return func(o *attachOpts) { o.flags |= flagReport }
}
