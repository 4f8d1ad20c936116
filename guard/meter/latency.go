package meter

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/klocklabs/klock/guard/tokenguard"
)

// latencyCut reports whether ctx ended at the envelope's max_latency_ms.
func (p *Proxy) latencyCut(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), tokenguard.ErrLatency)
}

func (p *Proxy) latencyReason(c *call) string {
	ms := p.c.Guard.Envelope().MaxLatencyMS
	if c.run != "" {
		return fmt.Sprintf("invocation %s reached the envelope's max_latency_ms (%d ms): the call was cancelled", c.run, ms)
	}
	return fmt.Sprintf("the call reached the envelope's max_latency_ms (%d ms) and was cancelled", ms)
}

// timeout answers a call cancelled at max_latency_ms: a typed, final
// timeout (retrying cannot help: the invocation has no time left).
func (p *Proxy) timeout(w http.ResponseWriter, c *call) {
	writeError(w, http.StatusGatewayTimeout, "timeout", false, fmt.Errorf("%w: %s", tokenguard.ErrLatency, p.latencyReason(c)))
}
