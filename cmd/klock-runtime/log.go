package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"
)

// report writes err to stderr and, when runc's --log names a file, there
// too in runc's format (logrus JSON with --log-format=json, else text):
// containerd and podman show the runtime's errors from that file, not
// from stderr.
func report(inv *invocation, err error) {
	msg := "klock-runtime: " + err.Error()
	fmt.Fprintln(os.Stderr, msg)
	if inv == nil || inv.log == "" {
		return
	}
	f, ferr := os.OpenFile(inv.log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if ferr != nil {
		return // stderr has it
	}
	defer f.Close()
	_, _ = f.Write(logLine(inv.logFormat, msg, time.Now()))
}

func logLine(format, msg string, now time.Time) []byte {
	ts := now.UTC().Format(time.RFC3339Nano)
	if format == "json" {
		b, _ := json.Marshal(struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Time  string `json:"time"`
		}{"error", msg, ts})
		return append(b, '\n')
	}
	return []byte("time=" + strconv.Quote(ts) + " level=error msg=" + strconv.Quote(msg) + "\n")
}
