package dist

import (
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Chrome traces (chrome://tracing, Perfetto): a timeline of the calls in
// flight records, in the Trace Event Format, as Horovod's timeline. Each
// rank is a process track ("rank R"), each of its groups a thread
// ("group G"), each call a complete event ("ph":"X") from its start to
// its end (to the dump's time for a call still in flight) with its
// sequence number, payload, state and peer as arguments. Timestamps are
// microseconds since the earliest call of all the dumps, by each rank's
// own clock.

// WriteChromeTrace writes the calls of the dumps, typically one per rank
// (DumpFlight's files, or FlightDump), as one Chrome trace.
func WriteChromeTrace(w io.Writer, dumps ...*FlightDump) error {
	var t0 time.Time
	for _, d := range dumps {
		for _, g := range d.Groups {
			for _, e := range g.Entries {
				if t0.IsZero() || e.Start.Before(t0) {
					t0 = e.Start
				}
			}
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	events := []chromeEvent{}
	for _, d := range dumps {
		name := fmt.Sprintf("rank %d", d.Rank)
		if d.Host != "" {
			name += " (" + d.Host + ")"
		}
		events = append(events, chromeEvent{Name: "process_name", Ph: "M", PID: d.Rank, Args: map[string]any{"name": name}},
			chromeEvent{Name: "process_sort_index", Ph: "M", PID: d.Rank, Args: map[string]any{"sort_index": d.Rank}})
		for _, g := range d.Groups {
			events = append(events, chromeEvent{Name: "thread_name", Ph: "M", PID: d.Rank, TID: g.ID,
				Args: map[string]any{"name": fmt.Sprintf("group %d %v", g.ID, g.Ranks)}})
			for _, e := range g.Entries {
				end := e.End
				if end.IsZero() {
					end = d.Time
				}
				args := map[string]any{"seq": e.Seq, "state": e.State, "count": e.Count, "bytes": e.Bytes}
				if e.DType != "" {
					args["dtype"] = e.DType
				}
				if e.ReduceOp != "" {
					args["reduce_op"] = e.ReduceOp
				}
				if e.Root >= 0 {
					args["root"] = e.Root
				}
				if e.Peer >= 0 {
					args["peer"], args["tag"] = e.Peer, e.Tag
				}
				if e.WaitingOn >= 0 {
					args["waiting_on"] = e.WaitingOn
				}
				if e.Error != "" {
					args["error"] = e.Error
				}
				cat := "collective"
				if e.Op == "send" || e.Op == "recv" {
					cat = "p2p"
				}
				dur := max(us(end.Sub(e.Start)), 0)
				events = append(events, chromeEvent{Name: e.Op, Cat: cat, Ph: "X", TS: us(e.Start.Sub(t0)), Dur: &dur,
					PID: d.Rank, TID: g.ID, Args: args})
			}
		}
	}
	enc := json.NewEncoder(w)
	return enc.Encode(struct {
		TraceEvents     []chromeEvent `json:"traceEvents"`
		DisplayTimeUnit string        `json:"displayTimeUnit"`
	}{events, "ms"})
}

// chromeEvent is one event of the Trace Event Format.
type chromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  uint32         `json:"tid"`
	Args map[string]any `json:"args,omitempty"`
}

// WriteChromeTrace writes this rank's flight record (every group of the
// job in this process) as a Chrome trace; see the package-level
// WriteChromeTrace to merge the dumps of several ranks.
func (g *Group) WriteChromeTrace(w io.Writer) error {
	return WriteChromeTrace(w, g.FlightDump("chrome trace"))
}
