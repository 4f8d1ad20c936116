package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/klocklabs/klock/internal/flagfile"
)

// manPath is klockd's man page, generated from its flags and config keys.
const manPath = "../../deploy/man/klockd.8"

// TestKlockdManPageMatchesTheFlags: deploy/man/klockd.8 is written from
// klockd's flags and configuration keys, so it cannot drift from them.
// KLOCK_UPDATE_DOCS=1 writes it anew.
func TestKlockdManPageMatchesTheFlags(t *testing.T) {
	got := manPage(newOptions().fs)
	if os.Getenv("KLOCK_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(manPath, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(manPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != got {
		t.Errorf("%s is not klockd's flags: a flag changed. Regenerate it: KLOCK_UPDATE_DOCS=1 go test ./cmd/klockd -run TestKlockdManPageMatchesTheFlags", manPath)
	}
}

// Every configuration key names a flag klockd has, and no two keys the
// same flag.
func TestConfigKeysNameFlags(t *testing.T) {
	fs := newOptions().fs
	seen := map[string]bool{}
	for _, k := range configKeys {
		if fs.Lookup(k.Flag) == nil || seen[k.Flag] {
			t.Errorf("config key %s: flag --%s missing or repeated", k.Name, k.Flag)
		}
		seen[k.Flag] = true
	}
	for name := range liveFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("live flag --%s does not exist", name)
		}
	}
}

// roff escapes text for a man page: backslashes, and a leading dot or
// quote.
func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func manPage(fs *flag.FlagSet) string {
	keys := map[string]string{}
	for _, k := range configKeys {
		keys[k.Flag] = k.Name
	}
	var b strings.Builder
	b.WriteString(`.\" Generated from klockd's flags by cmd/klockd/man_test.go: do not edit.
.TH KLOCKD 8 "" "klock" "klock manual"
.SH NAME
klockd \- klock's daemon: keeps the BPF programs loaded and runs sessions
.SH SYNOPSIS
.B klockd
[\fIOPTIONS\fR]
.SH DESCRIPTION
klockd runs klock sessions for \fBklock run\fR, \fBklock ps\fR and \fBklock kill\fR over a unix socket,
and is its host's lease manager (the KLIS\-7 lease API). It runs as root; members of the klock group may
use its socket. Under systemd it is started by klockd.socket or klockd.service (socket activation: it
serves the sockets systemd passes, matched to \fB\-\-socket\fR and \fB\-\-api\-socket\fR by path).
.SH OPTIONS
Each option may also be set in the configuration file (\fB\-\-config\fR) under the key shown; the
command line wins.
`)
	fs.VisitAll(func(f *flag.Flag) {
		name, _ := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, ".TP\n.B \\-\\-%s", roff(f.Name))
		if name != "" {
			fmt.Fprintf(&b, " \\fI%s\\fR", roff(name))
		}
		b.WriteString("\n" + roff(f.Usage))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "[]" {
			fmt.Fprintf(&b, " (default: %s)", roff(f.DefValue))
		}
		if k, ok := keys[f.Name]; ok {
			fmt.Fprintf(&b, ".\nFile key: \\fB%s\\fR", roff(k))
			if liveFlags[f.Name] {
				b.WriteString(" (SIGHUP applies it)")
			}
		}
		b.WriteString(".\n")
	})
	b.WriteString(`.SH SIGNALS
.TP
.B SIGHUP
Reads the command line and the configuration file again and applies the log format and level,
\fB\-\-require\-signed\fR, the trusted keys (\fB\-\-trust\fR, \fB\-\-trust\-dir\fR) and \fB\-\-syscall\-linger\fR
without touching any session. A file that cannot be applied changes nothing; other changed settings are logged as needing
a restart.
.TP
.B SIGTERM, SIGINT
Kill every session (each ends as a killed session does: rollback, verification log), wait for them,
unload the BPF programs and exit.
.SH FILES
.TP
.I /etc/klock/klockd.yaml
The configuration file.
.TP
.I /run/klock/klockd.sock, /run/klock/api.sock
The session socket and the lease API socket (0660 root:klock).
.TP
.I /var/lib/klock
Sessions' logs and backups when the workdir has none.
.SH SEE ALSO
.BR klock (1),
.BR systemd.socket (5)
`)
	return b.String()
}

// Every flag but --config is a configuration key (a new flag needs its
// row in configKeys), and deploy/etc/klockd.yaml, the commented default
// file, shows every key with a value klockd accepts.
func TestDefaultConfigShowsEveryKey(t *testing.T) {
	o := newOptions()
	keyed := map[string]bool{}
	for _, k := range configKeys {
		keyed[k.Flag] = true
	}
	o.fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config" && !keyed[f.Name] {
			t.Errorf("flag --%s has no configuration key: add it to configKeys and deploy/etc/klockd.yaml", f.Name)
		}
	})
	data, err := os.ReadFile("../../deploy/etc/klockd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The file as shipped sets nothing.
	if s, err := flagfile.Parse("klockd.yaml", data, configKeys); err != nil || len(s) != 0 {
		t.Fatalf("the default file sets %v (%v)", s, err)
	}
	// Uncommented, every example is valid and every key is there.
	var on []string
	for _, line := range strings.Split(string(data), "\n") {
		if k, _, ok := strings.Cut(strings.TrimPrefix(line, "#"), ":"); ok && strings.HasPrefix(line, "#") && !strings.ContainsAny(k, " -") {
			on = append(on, strings.TrimPrefix(line, "#"))
		}
	}
	s, err := flagfile.Parse("klockd.yaml", []byte(strings.Join(on, "\n")), configKeys)
	if err == nil {
		err = flagfile.Apply(newOptions().fs, "klockd.yaml", s)
	}
	if err != nil {
		t.Fatalf("an example in the default file: %v", err)
	}
	if len(s) != len(configKeys) {
		t.Errorf("the default file shows %d keys, klockd has %d", len(s), len(configKeys))
	}
}
