package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// cliDocPath is the CLI reference, generated from the commands.
const cliDocPath = "../../docs/cli.md"

// generatedMark starts docs/cli.md's generated part: above it the guide
// is written by hand, below it is every command's --help.
const generatedMark = "<!-- Generated below from the commands"

// TestCLIDocMatchesTheCommands: docs/cli.md's reference part is every
// command's --help, as the commands print it, so it cannot drift from the
// code. KLOCK_UPDATE_DOCS=1 writes it anew (the guide above it is kept).
func TestCLIDocMatchesTheCommands(t *testing.T) {
	data, err := os.ReadFile(cliDocPath)
	if err != nil {
		t.Fatal(err)
	}
	guide, _, _ := strings.Cut(string(data), generatedMark)
	got := cliDoc(newRoot())
	if os.Getenv("KLOCK_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(cliDocPath, []byte(strings.TrimRight(guide, "\n")+"\n\n"+got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !strings.HasSuffix(string(data), got) {
		t.Errorf("%s is not the commands' help: a command changed. Regenerate it: KLOCK_UPDATE_DOCS=1 go test ./cmd/klock-cli -run TestCLIDocMatchesTheCommands", filepath.Base(cliDocPath))
	}
}

// cliDoc renders root's help and every subcommand's, depth first, in the
// order klock --help lists them.
func cliDoc(root *cobra.Command) string {
	var b strings.Builder
	b.WriteString(generatedMark + ": do not edit; KLOCK_UPDATE_DOCS=1 go test ./cmd/klock-cli -run TestCLIDocMatchesTheCommands writes it again, and make test fails when it no longer matches. -->\n\n")
	b.WriteString("## Reference: every command's --help\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		var out bytes.Buffer
		c.SetOut(&out)
		_ = c.Help()
		c.SetOut(nil)
		b.WriteString("\n### " + c.CommandPath() + "\n\n```text\n")
		b.WriteString(strings.TrimRight(out.String(), "\n") + "\n```\n")
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return b.String()
}
