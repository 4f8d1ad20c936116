//go:build linux

package bpfprog

import (
	"reflect"

	"github.com/cilium/ebpf"
)

// Programs are the loaded programs of a bpf2go programs struct (progs
// is a pointer to it, e.g. &objs.observePrograms: reflection cannot read
// through an unexported embedded field), by their name (the `ebpf` tag): the
// programs a backend holds, for their run-time statistics (klockd
// --metrics-bpf-stats). Programs not loaded (nil) are left out.
func Programs(progs any) map[string]*ebpf.Program {
	out := map[string]*ebpf.Program{}
	collect(reflect.ValueOf(progs), out)
	return out
}

// collect reads v's *ebpf.Program fields.
func collect(v reflect.Value, out map[string]*ebpf.Program) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	progType := reflect.TypeFor[*ebpf.Program]()
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		if f.Type == progType && f.IsExported() && f.Tag.Get("ebpf") != "" && !fv.IsNil() {
			out[f.Tag.Get("ebpf")] = fv.Interface().(*ebpf.Program)
		}
	}
}
