package toolproxy

import (
	"fmt"

	"github.com/klocklabs/klock/guard/gateway"
	"github.com/klocklabs/klock/guard/toolerr"
)

// fmtNotDispatched marks e as a call that never reached a tool.
func fmtNotDispatched(e *toolerr.Error) error {
	return fmt.Errorf("%w: %w", gateway.ErrNotDispatched, e)
}
