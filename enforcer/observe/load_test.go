//go:build linux && (amd64 || arm64)

package observe

import (
	"testing"

	"github.com/cilium/ebpf"
)

// TestProgramsShareMaps: the programs are loaded one by one against maps
// created first; they must all use those maps, and one copy of each data
// section (the rename generation in .bss is one counter for every program,
// the wakeup threshold in .rodata one value), never a copy per load.
func TestProgramsShareMaps(t *testing.T) {
	o := loadObserver(t)
	named := map[ebpf.MapID]string{}
	for name, m := range map[string]*ebpf.Map{"events": o.objs.Events, "kpbuf": o.objs.Kpbuf, "lost": o.objs.Lost,
		"pending": o.objs.Pending, "scratch": o.objs.Scratch, "seen": o.objs.Seen, "subtree": o.objs.Subtree, "watched": o.objs.Watched} {
		info, err := m.Info()
		if err != nil {
			t.Fatal(err)
		}
		id, ok := info.ID()
		if !ok {
			t.Skip("no map ids on this kernel")
		}
		named[id] = name
	}
	progs := map[string]*ebpf.Program{"obs_sys_exit": o.objs.ObsSysExit, "obs_exec": o.objs.ObsExec,
		"obs_fork": o.objs.ObsFork, "obs_exit": o.objs.ObsExit, "obs_ctime_ts": o.objs.ObsCtimeTs,
		"obs_ctime_xchg": o.objs.ObsCtimeXchg, "obs_ctime_skip": o.objs.ObsCtimeSkip}
	data := map[ebpf.MapID]bool{}
	for name, p := range progs {
		if p == nil {
			continue // an optional ctime program this kernel lacks
		}
		info, err := p.Info()
		if err != nil {
			t.Fatal(err)
		}
		ids, ok := info.MapIDs()
		if !ok {
			t.Skip("no program map ids on this kernel")
		}
		for _, id := range ids {
			if _, ok := named[id]; !ok {
				data[id] = true
			}
		}
		if name == "obs_sys_exit" && len(ids) != len(named)+2 {
			t.Errorf("obs_sys_exit uses %d maps, want the %d named ones and .rodata and .bss", len(ids), len(named))
		}
	}
	if len(data) != 2 {
		t.Errorf("the programs use %d maps besides the named ones, want 2 (.rodata, .bss shared by all)", len(data))
	}
}
