package meter

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Event is one server-sent event: its raw bytes (relayed as they are) and
// its parsed event name and data.
type Event struct {
	Raw   []byte
	Name  string
	Data  []byte
	Final bool // "data: [DONE]"
}

// ErrEventTooLarge is returned for an event over the reader's limit.
var ErrEventTooLarge = errors.New("server-sent event too large")

// EventReader splits an SSE stream into events (blank-line separated).
type EventReader struct {
	br  *bufio.Reader
	max int
}

// NewEventReader reads events of at most max bytes.
func NewEventReader(r io.Reader, max int) *EventReader {
	return &EventReader{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// Next returns the next event; io.EOF after the last one.
func (er *EventReader) Next() (*Event, error) {
	var raw, data []byte
	var name string
	for {
		line, err := er.br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, ErrEventTooLarge
		}
		if len(raw)+len(line) > er.max {
			return nil, ErrEventTooLarge
		}
		raw = append(raw, line...)
		body := bytes.TrimRight(line, "\r\n")
		if len(body) == 0 && len(line) > 0 {
			if len(raw) > len(line) { // not a stray blank line
				return &Event{Raw: raw, Name: name, Data: data, Final: string(data) == "[DONE]"}, nil
			}
			raw = raw[:0]
			continue
		}
		if err != nil {
			if len(bytes.TrimSpace(raw)) > 0 && err == io.EOF {
				// Stream ended without the closing blank line: the last
				// event still counts.
				return &Event{Raw: raw, Name: name, Data: data, Final: string(data) == "[DONE]"}, nil
			}
			return nil, err
		}
		field, value, _ := bytes.Cut(body, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			name = string(value)
		case "data":
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, value...)
		}
	}
}
