package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/klocklabs/klock/enforcer/oci"
)

// The flags of runc 1.1's exec (runc exec --help): those that take a value
// and those that take none. urfave/cli parses them with Go's flag package:
// -x and --x alike, "--x=v" and "--x v", "--" ends them, and the first
// other argument is the container id (exec does not reorder: what follows
// the id is the command's).
var (
	execValueFlags = map[string]bool{
		"console-socket": true, "cwd": true, "env": true, "e": true, "user": true, "u": true,
		"additional-gids": true, "g": true, "process": true, "p": true, "pid-file": true,
		"process-label": true, "apparmor": true, "cap": true, "c": true, "preserve-fds": true, "cgroup": true,
	}
	execBoolFlags = map[string]bool{
		"tty": true, "t": true, "detach": true, "d": true, "no-new-privs": true, "ignore-paused": true,
		"help": true, "h": true,
	}
)

// execCall is runc exec's arguments as klock-runtime reads them.
type execCall struct {
	// flags are the arguments before the container id ("--" excluded),
	// verbatim; rest starts at "--" when there was one, else at the id.
	flags, rest []string
	id          string
	command     []string // after the id
	process     string   // --process/-p, "" when not given
	caps        []string // --cap/-c
	help        bool
}

// execPolicy is what create decided about the container's processes that
// exec needs again (execPolicyFile in its state directory, root's alone).
type execPolicy struct {
	// AllowRoot keeps uid/gid 0 (oci.AllowRoot); else 0 becomes 65534.
	AllowRoot bool `json:"allowRoot"`
}

const execPolicyFile = "exec.json"

func writeExecPolicy(stateDir string, p execPolicy) error {
	return writeStateFile(stateDir, execPolicyFile, p)
}

// writeStateFile writes v's JSON as name in a container's state
// directory, root's and 0600 (the directory is bound read-only inside the
// container), whole or not at all.
func writeStateFile(stateDir, name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("state directory: %s: %w", name, err)
	}
	tmp := filepath.Join(stateDir, "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(stateDir, name)); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	return nil
}

// readExecPolicy reads a container's execPolicy; a state directory without
// one (an older klock-runtime) allows nothing.
func readExecPolicy(id string) (execPolicy, error) {
	var p execPolicy
	b, err := os.ReadFile(filepath.Join(stateRoot, id, execPolicyFile))
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("%s: %w", filepath.Join(stateRoot, id, execPolicyFile), err)
	}
	return p, nil
}

// parseExec reads exec's arguments. An argument it cannot place (a flag
// runc 1.1 does not have, a value flag with no value) is an error: the
// container id would be a guess.
func parseExec(args []string) (*execCall, error) {
	c := &execCall{}
	i := 0
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		name, value, hasValue := flagName(a)
		switch {
		case execBoolFlags[name]:
			c.flags = append(c.flags, a)
			if name == "help" || name == "h" {
				c.help = true
			}
		case execValueFlags[name]:
			c.flags = append(c.flags, a)
			if !hasValue {
				if i+1 >= len(args) {
					return nil, fmt.Errorf("exec: %s needs a value", a)
				}
				i++
				value = args[i]
				c.flags = append(c.flags, value)
			}
			switch name {
			case "process", "p":
				c.process = value
			case "cap", "c":
				c.caps = append(c.caps, value)
			}
		default:
			return nil, fmt.Errorf("exec: flag %s is not one of runc 1.1's exec flags: klock-runtime cannot tell which argument is the container id, so it refuses rather than guess (put the container id after the flags it knows, or run the real runtime directly for a container klock does not manage)", a)
		}
	}
	c.rest = args[i:]
	if i < len(args) && args[i] == "--" {
		i++
	}
	if i < len(args) {
		c.id = args[i]
		c.command = args[i+1:]
	}
	return c, nil
}

// stage2Prefix is what runs before the exec'd command, as before the
// container's entrypoint (oci.Rewrite).
var stage2Prefix = []string{oci.Stage2Path, "--klock-wall=" + oci.WallPath, "--"}

// prepared says whether klock-runtime set the container up: its state
// directory exists (made at create, removed by the session's poststop).
// A wall not written yet makes stage 2 refuse the process: closed, not
// open.
func prepared(id string) bool {
	if !validID.MatchString(id) || id == "." || id == ".." {
		return false // never an id klock-runtime prepared
	}
	st, err := os.Lstat(filepath.Join(stateRoot, id))
	return err == nil && st.IsDir()
}

// anyPrepared says whether klock-runtime prepared any container on this
// host (a state directory under stateRoot).
func anyPrepared() bool {
	entries, err := os.ReadDir(stateRoot)
	return err == nil && len(entries) > 0
}

// execArgv is exec's part: a process exec'd into a container klock-runtime
// prepared goes through klock-stage2 as the entrypoint did (the Landlock
// wall and klock's seccomp filter), with no_new_privs, no capabilities
// and, unless the container may run as root, uid/gid 0 made 65534; with --process FILE the file is rewritten in place, else
// the prefix goes after the container id. Any other container, and
// "exec --help", passes through: argv is returned as it was.
func execArgv(inv *invocation) ([]string, error) {
	c, err := parseExec(inv.args)
	if err != nil {
		if !anyPrepared() {
			return inv.argv, nil // no container of klock's on this host
		}
		return nil, err
	}
	if c.help || c.id == "" || !prepared(c.id) {
		return inv.argv, nil
	}
	if len(c.caps) > 0 {
		return nil, fmt.Errorf("exec %s: --cap %s: klock-runtime runs this container's processes with no capabilities; exec without --cap", c.id, strings.Join(c.caps, ","))
	}
	pol, err := readExecPolicy(c.id)
	if err != nil {
		return nil, fmt.Errorf("exec %s: %w", c.id, err)
	}
	if c.process != "" {
		if err := rewriteProcessFile(c.process, pol); err != nil {
			return nil, fmt.Errorf("exec %s: %w", c.id, err)
		}
		return inv.argv, nil
	}
	if len(c.command) == 0 {
		return inv.argv, nil // runc refuses an exec with no command
	}
	globals := inv.argv[:len(inv.argv)-len(inv.args)]
	out := slices.Clone(globals)
	for i := 0; i < len(c.flags); i++ {
		f := c.flags[i]
		name, value, hasValue := flagName(f)
		if name == "no-new-privs" {
			continue // "--no-new-privs=false" must not survive
		}
		if !execValueFlags[name] {
			out = append(out, f)
			continue
		}
		if !hasValue {
			i++
			value = c.flags[i]
		}
		if !pol.AllowRoot {
			switch name {
			case "user", "u":
				value = nonRootUser(value)
			case "additional-gids", "g":
				if g, err := strconv.ParseInt(value, 0, 64); err == nil && g == 0 {
					continue // as Rewrite drops gid 0 from additionalGids
				}
			}
		}
		if hasValue {
			out = append(out, f[:len(f)-len(value0(f))]+value)
		} else {
			out = append(out, f, value)
		}
	}
	out = append(out, "--no-new-privs")
	out = append(out, c.rest[:len(c.rest)-len(c.command)]...) // ["--"] ID
	if !hasPrefix(c.command) {
		out = append(out, stage2Prefix...)
	}
	return append(out, c.command...), nil
}

// value0 is the value part of a "--x=v" flag.
func value0(f string) string {
	_, v, _ := flagName(f)
	return v
}

// nonRootUser maps runc exec's --user "<uid>[:<gid>]" as Rewrite maps the
// spec's user: 0 becomes 65534 (runc reads both with strconv.Atoi).
func nonRootUser(v string) string {
	uid, gid, hasGID := strings.Cut(v, ":")
	if n, err := strconv.Atoi(uid); err == nil && n == 0 {
		uid = strconv.Itoa(oci.NobodyID)
	}
	if hasGID {
		if n, err := strconv.Atoi(gid); err == nil && n == 0 {
			gid = strconv.Itoa(oci.NobodyID)
		}
		return uid + ":" + gid
	}
	return uid
}

func hasPrefix(args []string) bool {
	return len(args) >= len(stage2Prefix) && slices.Equal(args[:len(stage2Prefix)], stage2Prefix)
}

// rewriteProcessFile edits a runtime-spec Process JSON (what podman,
// containerd and Docker pass to exec --process) in place: args prefixed
// with stage 2, noNewPrivileges true, all five capability sets empty,
// and unless pol.AllowRoot user uid/gid 0 made 65534 and gid 0 dropped
// from additionalGids (what Rewrite does to the spec's process).
// Every other field is kept as it was written (the object is edited key
// by key, not re-marshalled through a struct that could drop a field).
func rewriteProcessFile(file string, pol execPolicy) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read the process: %w", err)
	}
	var proc map[string]json.RawMessage
	if err := json.Unmarshal(data, &proc); err != nil || proc == nil {
		return fmt.Errorf("%s: not a process object: %v", file, err)
	}
	var args []string
	if raw, ok := proc["args"]; ok {
		if err := json.Unmarshal(raw, &args); err != nil {
			return fmt.Errorf("%s: args: %w", file, err)
		}
	}
	if len(args) == 0 {
		return fmt.Errorf("%s: args is empty: stage 2 has nothing to exec", file)
	}
	if !hasPrefix(args) {
		args = append(slices.Clone(stage2Prefix), args...)
	}
	set := func(key string, v any) {
		b, _ := json.Marshal(v)
		proc[key] = b
	}
	set("args", args)
	set("noNewPrivileges", true)
	empty := []string{}
	set("capabilities", map[string][]string{"bounding": empty, "effective": empty, "inheritable": empty, "permitted": empty, "ambient": empty})
	if !pol.AllowRoot {
		raw, ok := proc["user"]
		if !ok {
			raw = []byte("{}") // no user is root
		}
		var user map[string]json.RawMessage
		if err := json.Unmarshal(raw, &user); err != nil || user == nil {
			return fmt.Errorf("%s: user: not an object: %v", file, err)
		}
		var u specs.User
		if err := json.Unmarshal(raw, &u); err != nil {
			return fmt.Errorf("%s: user: %w", file, err)
		}
		if u.UID == 0 {
			user["uid"], _ = json.Marshal(oci.NobodyID)
		}
		if u.GID == 0 {
			user["gid"], _ = json.Marshal(oci.NobodyID)
		}
		if _, ok := user["additionalGids"]; ok {
			user["additionalGids"], _ = json.Marshal(slices.DeleteFunc(u.AdditionalGids, func(g uint32) bool { return g == 0 }))
		}
		set("user", user)
	}
	out, err := json.Marshal(proc)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(file); err == nil {
		file = real
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := writeAtomic(file, append(out, '\n')); err != nil {
		return fmt.Errorf("rewrite %s: %w", file, err)
	}
	return nil
}
