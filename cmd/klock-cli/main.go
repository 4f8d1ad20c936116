// Command klock enforces what an AI agent declared it would do.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/klocklabs/klock/enforcer/launch"
	"github.com/klocklabs/klock/policy"
	"github.com/klocklabs/klock/policy/celexpr"
	"github.com/spf13/cobra"
)

// Exit statuses of klock itself (klock run passes the agent's own through).
const (
	exitOK      = 0
	exitInvalid = 1 // a manifest or signature was rejected
	exitUsage   = 2 // bad flags or arguments
	exitRefused = 3 // klock rollback refused: it would undo what changed after the session ended
)

// exitError carries an exit status through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	// Stage 2 of klock run: becomes the agent and never returns.
	launch.Init()
	// Manifests are checked whole, their autonomy conditions included.
	policy.UseConditions(celexpr.Compiler{})
	root := newRoot()
	err := root.Execute()
	if err == nil {
		os.Exit(exitOK)
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(os.Stderr, "klock:", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "klock:", err)
	os.Exit(exitUsage)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "klock",
		Short: "Enforce what an AI agent declared it would do",
		Long: `klock enforces an AI agent's declared scope at the syscall level.

An operator declares the agent's intents (KLIS triples such as
"MUTATES FILE:/srv/repo/src/**"), its tools and its cost budget in one
manifest. klock validates and explains that manifest, launches the agent
under it (klock run), blocks what was not declared and writes a
verification log.

Start with:
  klock doctor                                  # what this kernel can enforce
  klock validate examples/manifests/coding-agent.yaml
  klock explain  examples/manifests/refund-agent.yaml
  sudo klock run -m agent.yaml -- ./agent.sh    # run an agent under its manifest
  klock schema > klock-manifest.schema.json     # for your editor`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRun(), newLog(), newRollback(), newBackups(), newDoctor(), newValidate(), newExplain(), newSchema(), newKeygen(), newSign(), newVerify(), newVersion(), newPS(), newKill(), newEvents(), newLeases(), newMCP(), newApprovals(), newApprove(), newDeny(), newTools(), newMeter(), newReceipts(), newReport(), newAudit(), newOCIHook(), newGenMan())
	return root
}
