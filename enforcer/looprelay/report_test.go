//go:build linux

package looprelay

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/klocklabs/klock/enforcer/event"
	"github.com/klocklabs/klock/internal/testutil"
	"golang.org/x/sys/unix"
)

// TestReportTellsAnsweredConnects: with Report, every connect the relay
// answers itself is told, as a wall would report it: the blocking and
// the non-blocking connect handed over (errno 0, EINPROGRESS), and the
// second connect on each handed socket refused at the trap (EISCONN),
// each as CONSUMES NET of the declared service over TCP, by the agent's
// process; a disconnect (AF_UNSPEC) names no destination, and a connect
// to an undeclared port continues to the walls, which report it: neither
// is told.
func TestReportTellsAnsweredConnects(t *testing.T) {
	testutil.RequirePrivileged(t)
	svc, other := startService(t, "declared"), startService(t, "undeclared")
	var mu sync.Mutex
	var told []event.Event
	report := Report(func(ev event.Event) {
		mu.Lock()
		told = append(told, ev)
		mu.Unlock()
	})
	var agent int
	res, r := runAgent(t, []string{"block=" + svc.addr(), "nonblock=" + svc.addr(), "refused=" + other.addr()}, func(pid int, l *os.File) *Relay {
		agent = pid
		r := relayOf(t, pid, svc, report)
		if err := r.HandOff(l); err != nil {
			t.Fatal(err)
		}
		return r
	})
	t.Logf("agent: %v", res)
	for _, op := range []string{"block", "nonblock"} {
		if !strings.HasPrefix(res[op], "declared") || !strings.HasSuffix(res[op], "again=EISCONN unspec=EPERM") {
			t.Fatalf("%s connect: %q", op, res[op])
		}
	}
	mu.Lock()
	defer mu.Unlock()
	want := "CONSUMES NET:127.0.0.1:" + strconv.Itoa(int(svc.port)) + "/tcp"
	errnos := map[string]int{}
	for _, ev := range told {
		if ev.Triple.String() != want || ev.Source != event.SourceLoopRelay || ev.Syscall != "connect" || ev.Blocked ||
			ev.PID != uint32(agent) || ev.TID == 0 || ev.Comm == "" || ev.Time.IsZero() {
			t.Errorf("told %+v (%s), want %s by the agent (pid %d)", ev, ev.Triple, want, agent)
		}
		errnos[errName(unix.Errno(ev.Errno))]++
	}
	if len(told) != 4 || errnos["ok"] != 1 || errnos["EINPROGRESS"] != 1 || errnos["EISCONN"] != 2 {
		t.Errorf("told %d connects (by errno %v), want the 2 handed over (ok, EINPROGRESS) and the 2 refused at the trap (EISCONN)", len(told), errnos)
	}
	if c := r.Counters()["svc"]; c.Handed != 2 {
		t.Errorf("counters %+v: want the 2 connects handed over", c)
	}
}
