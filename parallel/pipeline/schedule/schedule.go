// Package schedule holds pipeline-parallel schedules as pure per-rank
// programs: for each rank of a pipeline, the ordered list of forward and
// backward computations on micro-batches and the sends and receives of
// activations and gradients between stages. Nothing here touches a
// network or a tensor; parallel/pipeline runs a program, and the
// validator and simulator here check and time every schedule.
//
// The model: the network is cut into Stages consecutive stages, placed
// round-robin on Ranks ranks: stage s lives on rank s % Ranks, so each
// rank holds Stages/Ranks stages (one, except for interleaved schedules,
// which give each rank several "virtual" stages). A step runs Micros
// micro-batches through every stage: Forward(s, i) needs the output of
// Forward(s-1, i); the last stage's forward also computes the loss.
// Backward(s, i) needs Forward(s, i) and the input gradient of stage s+1
// for micro-batch i (the last stage starts from its loss). A zero-bubble
// schedule splits Backward into BackwardInput (the gradient of the stage's
// input, which the previous stage is waiting for) and BackwardWeight (the
// gradients of the stage's parameters, needed only by the optimizer step),
// so weight gradients can fill the pipeline's bubbles.
//
// Communication is explicit: SendAct(s, i) sends stage s's output for
// micro-batch i to the rank of stage s+1, which receives it with
// RecvAct(s+1, i); SendGrad(s, i) sends the gradient of stage s's input to
// the rank of stage s-1, which receives it with RecvGrad(s-1, i). When two
// consecutive stages share a rank (one rank only) the value is handed over
// in memory and no send or receive appears. Sends never block (the
// executor starts them and waits for them at the end of the step); a
// receive blocks until its data has arrived.
//
// GPipe, OneFOneB, Interleaved1F1B and ZBH1 (or ByName) build schedules;
// Validate checks that one can run, Simulate times it from the cost of
// each kind of action:
//
//	s, err := schedule.OneFOneB(4, 8) // 4 ranks, 8 micro-batches
//	...
//	res, err := schedule.Simulate(s, schedule.Costs{Forward: 1, Backward: 2})
//	// res.Bubble == 3/11, res.PeakActivations == [4 3 2 1]
//
// Costs.Stages gives each stage its own costs (a GPT's first stage holds
// the embeddings, its last the output head and the loss), and
// Costs.Cores runs the ranks on that many processors, shared equally by
// the ranks computing at a time: together they predict a step on a real
// machine, where stages differ and pipeline ranks may outnumber cores.
//
// Every schedule here runs the backwards of each stage in micro-batch
// order (and the weight passes too), so gradients accumulate in the same
// order under all of them. With p ranks, m micro-batches, no latency,
// every stage costing the same, a processor per rank and the idle share
// of the ranks' time called the bubble, the tests check:
//
//   - GPipe and OneFOneB: (p-1)/(m+p-1); GPipe holds m micro-batches'
//     activations on every rank, OneFOneB min(p-r, m) on rank r.
//   - Interleaved1F1B with v chunks per rank, m a multiple of p and a
//     chunk costing 1/v of a stage: (p-1)/(v*m+p-1).
//   - ZBH1 with F = BI = BW and m >= p: (p-1)/(3m+p-1); each rank idles
//     (p-1)(F+BI-BW), a third of OneFOneB's (p-1)(F+B) with B = BI+BW. It
//     holds min(p, m) micro-batches on every rank, OneFOneB's peak.
package schedule

import "fmt"

// Kind is what an Action does.
type Kind uint8

const (
	Forward        Kind = iota // run stage Stage's forward on micro-batch Micro
	Backward                   // its whole backward: input and weight gradients
	BackwardInput              // the input gradient only (zero-bubble schedules)
	BackwardWeight             // the weight gradients of an earlier BackwardInput
	SendAct                    // send Stage's output for Micro to Peer (stage Stage+1)
	RecvAct                    // receive Stage's input for Micro from Peer (stage Stage-1)
	SendGrad                   // send the gradient of Stage's input for Micro to Peer (stage Stage-1)
	RecvGrad                   // receive the gradient of Stage's output for Micro from Peer (stage Stage+1)
)

var kindNames = [...]string{"F", "B", "BI", "BW", "SendAct", "RecvAct", "SendGrad", "RecvGrad"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// Compute reports whether k is a computation rather than a transfer.
func (k Kind) Compute() bool { return k <= BackwardWeight }

// Action is one step of a rank's program.
type Action struct {
	Kind  Kind
	Stage int // the stage computed, or the local stage that sends or receives
	Micro int // the micro-batch
	Peer  int // for transfers: the rank at the other end; -1 otherwise
}

func (a Action) String() string {
	if a.Kind.Compute() {
		return fmt.Sprintf("%v%d.%d", a.Kind, a.Stage, a.Micro)
	}
	return fmt.Sprintf("%v%d.%d@%d", a.Kind, a.Stage, a.Micro, a.Peer)
}

// Program is one rank's actions, in order.
type Program []Action

// Schedule is a whole pipeline's programs, one per rank.
type Schedule struct {
	Name     string
	Ranks    int       // pipeline ranks
	Stages   int       // model stages; a multiple of Ranks
	Micros   int       // micro-batches per step
	Programs []Program // Programs[r] is rank r's
}

// RankOf returns the rank that holds stage s.
func (s *Schedule) RankOf(stage int) int { return stage % s.Ranks }

// StagesOf returns the stages rank r holds, in order.
func (s *Schedule) StagesOf(r int) []int {
	var out []int
	for st := r; st < s.Stages; st += s.Ranks {
		out = append(out, st)
	}
	return out
}

// String prints every rank's program, one line each, for test failures.
func (s *Schedule) String() string {
	out := fmt.Sprintf("%s: %d ranks, %d stages, %d micro-batches\n", s.Name, s.Ranks, s.Stages, s.Micros)
	for r, p := range s.Programs {
		out += fmt.Sprintf("rank %d:", r)
		for _, a := range p {
			out += " " + a.String()
		}
		out += "\n"
	}
	return out
}
